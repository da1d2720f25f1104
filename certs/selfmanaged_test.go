package certs

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// selfManagedOnFakes returns a SelfManaged on a fake clientset holding one mutating webhook
// configuration ("hook"), writing into a temporary directory, on the clock *now.
func selfManagedOnFakes(t *testing.T, validity time.Duration, now *time.Time) (*SelfManaged, *fake.Clientset, string) {
	t.Helper()
	hook := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "hook"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "a.wavegate.io"}}}
	cs := fake.NewClientset(hook)
	dir := t.TempDir()
	s := &SelfManaged{Client: cs, Namespace: "wavegate-system", Secret: "certs", CertDir: dir, IPs: []net.IP{net.ParseIP("127.0.0.1")},
		MutatingWebhooks: []string{"hook"}, Validity: validity, Now: func() time.Time { return *now }}
	return s, cs, dir
}

// TestNewCATrustedBeforeItSigns: when the CA is renewed, the serving certificate keeps being the one
// signed by the previous CA until the new CA has been in every webhook configuration's caBundle
// for trustGrace; only then is a certificate signed by the new CA written where the webhook serves
// it. Signing and serving at once (as before) let the API servers, which had not loaded the new
// bundle yet, refuse the webhook's certificate: with failurePolicy Fail, every admission failed.
func TestNewCATrustedBeforeItSigns(t *testing.T) {
	ctx := context.Background()
	const validity = time.Hour
	now := time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)
	s, cs, dir := selfManagedOnFakes(t, validity, &now)
	served := func() *x509.Certificate {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, certKey))
		if err != nil {
			t.Fatal(err)
		}
		c, err := parseCert(b)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	bundle := func() []*x509.Certificate {
		t.Helper()
		h, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "hook", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var out []*x509.Certificate
		for rest := h.Webhooks[0].ClientConfig.CABundle; ; {
			var b *pem.Block
			if b, rest = pem.Decode(rest); b == nil {
				return out
			}
			c, err := x509.ParseCertificate(b.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, c)
		}
	}
	trusts := func(cert *x509.Certificate) bool {
		for _, ca := range bundle() {
			if cert.CheckSignatureFrom(ca) == nil {
				return true
			}
		}
		return false
	}

	if err := s.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	first := served()
	if !trusts(first) {
		t.Fatal("the first certificate is not signed by a CA in the bundle")
	}
	// The CA lives 4 x validity and is renewed after two thirds of it; the serving certificate is
	// renewed every two thirds of an hour meanwhile, signed by the same CA, until the pass that
	// renews the CA.
	for len(bundle()) == 1 {
		now = now.Add(validity / 6)
		if err := s.Reconcile(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Reconcile(ctx); err != nil { // as the configuration's change wakes Start at once
		t.Fatal(err)
	}
	if got := len(bundle()); got != 2 {
		t.Fatalf("bundle has %d CAs after the renewal, want the new and the previous", got)
	}
	kept := served()
	if !trusts(kept) || kept.CheckSignatureFrom(bundle()[0]) == nil {
		t.Fatal("a certificate signed by the new CA is served before the CA has been trusted for trustGrace")
	}
	if s.again <= 0 || s.again > s.trustGrace() {
		t.Errorf("Start looks again in %s, want within trustGrace %s", s.again, s.trustGrace())
	}
	now = now.Add(s.trustGrace())
	if err := s.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	switched := served()
	if switched.CheckSignatureFrom(bundle()[0]) != nil {
		t.Fatal("the serving certificate did not switch to the new CA after trustGrace")
	}
}

// TestRenewalDoesNotWaitForAMissingConfiguration: a webhook configuration that cannot be read
// (deleted, or not yet applied) fails the injection, but the serving certificate is still renewed
// when it is signed by the CA the served one already is: only a new CA waits for the injection.
func TestRenewalDoesNotWaitForAMissingConfiguration(t *testing.T) {
	ctx := context.Background()
	const validity = time.Hour
	now := time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)
	s, _, dir := selfManagedOnFakes(t, validity, &now)
	if err := s.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	first, err := os.ReadFile(filepath.Join(dir, certKey))
	if err != nil {
		t.Fatal(err)
	}
	s.MutatingWebhooks = append(s.MutatingWebhooks, "missing")
	now = now.Add(validity * 3 / 4)
	if err := s.Reconcile(ctx); err == nil {
		t.Fatal("the injection into a missing configuration did not fail the pass")
	}
	renewed, err := os.ReadFile(filepath.Join(dir, certKey))
	if err != nil {
		t.Fatal(err)
	}
	if string(renewed) == string(first) {
		t.Error("the serving certificate was not renewed while a configuration was missing")
	}
}
