// Package certs tests self-managed certificates through a real API server: while the serving
// certificate rotates, every admission keeps succeeding.
package certs

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"wavegate.io/wavegate/certs"
	"wavegate.io/wavegate/pkg/mutate"
	"wavegate.io/wavegate/pkg/policy"
	"wavegate.io/wavegate/test/framework"
)

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func serial(t *testing.T, path string) string {
	if c := served(path); c != nil {
		return c.SerialNumber.String()
	}
	return ""
}

// issuer identifies the CA that signed the certificate at path ("" if unreadable).
func issuer(path string) string {
	if c := served(path); c != nil {
		return string(c.AuthorityKeyId)
	}
	return ""
}

func served(path string) *x509.Certificate {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	p, _ := pem.Decode(b)
	if p == nil {
		return nil
	}
	c, err := x509.ParseCertificate(p.Bytes)
	if err != nil {
		return nil
	}
	return c
}

// apiServer starts a real API server for one test, stopped when the test ends, and returns a
// context that ends before it and a clientset.
func apiServer(t *testing.T) (context.Context, *kubernetes.Clientset) {
	t.Helper()
	env, err := framework.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return ctx, kubernetes.NewForConfigOrDie(env.Config)
}

// background runs f until the test ends, and waits for it to return before the cleanups registered
// earlier run (they run last in, first out): a certificate manager or a webhook server still writing
// or watching its TempDir once the test ends made the TempDir's removal fail ("directory not empty").
func background(t *testing.T, ctx context.Context, f func(context.Context) error) {
	ctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = f(ctx)
	}()
	t.Cleanup(func() {
		stop()
		<-done
	})
}

func TestRotationWithoutFailedAdmissions(t *testing.T) {
	g := NewWithT(t)
	ctx, cs := apiServer(t)

	// A fail-closed webhook for ConfigMaps of one namespace, served by wavegate's handler over a
	// certificate that rotates every few seconds.
	port, dir := freePort(t), t.TempDir()
	hook := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "rotation-test"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "rotation.wavegate.io",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To(fmt.Sprintf("https://127.0.0.1:%d%s", port, mutate.Path))},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{"CREATE"}, Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"rotation": "true"}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To[int32](5),
		}},
	}
	_, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, hook, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "rotation", Labels: map[string]string{"rotation": "true"}}}
	_, err = cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	sm := &certs.SelfManaged{Client: cs, Namespace: framework.WavegateNamespace, Secret: "wavegate-webhook-certs", CertDir: dir,
		IPs: []net.IP{net.ParseIP("127.0.0.1")}, MutatingWebhooks: []string{hook.Name},
		Validity: 6 * time.Second, Check: 200 * time.Millisecond}
	g.Expect(sm.Reconcile(ctx)).To(Succeed())
	background(t, ctx, sm.Start)

	server := webhook.NewServer(webhook.Options{Host: "127.0.0.1", Port: port, CertDir: dir})
	server.Register(mutate.Path, &mutate.Server{Policies: policy.NewStaticStore(&policy.Index{})})
	background(t, ctx, server.Start)
	g.Eventually(func() error { return server.StartedChecker()(nil) }).WithTimeout(10 * time.Second).Should(Succeed())

	// Admit ConfigMaps without pause for three rotations and one of the CA (it lives 24 s and is
	// renewed after 16 s: the certificate signed by it is served once the API server trusts it).
	certPath := filepath.Join(dir, "tls.crt")
	serials := map[string]bool{serial(t, certPath): true}
	issuers := map[string]bool{issuer(certPath): true}
	deadline := time.Now().Add(40 * time.Second)
	n := 0
	for (len(serials) < 4 || len(issuers) < 2) && time.Now().Before(deadline) {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm-" + strconv.Itoa(n), Namespace: "rotation"}}
		_, err := cs.CoreV1().ConfigMaps("rotation").Create(ctx, cm, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred(), "admission %d failed while the certificate rotated", n)
		n++
		serials[serial(t, certPath)] = true
		issuers[issuer(certPath)] = true
	}
	g.Expect(len(serials)).To(BeNumerically(">=", 4), "the certificate did not rotate three times")
	g.Expect(len(issuers)).To(BeNumerically(">=", 2), "the CA was not renewed")
	t.Logf("%d admissions across %d certificates and %d CAs, none failed", n, len(serials), len(issuers))
}

// TestReinjectsARecreatedConfiguration: a webhook configuration re-applied without its CA bundle
// (a reinstall after `wavegate uninstall`, say) gets the CA at once, not at the next hourly check.
func TestReinjectsARecreatedConfiguration(t *testing.T) {
	g := NewWithT(t)
	ctx, cs := apiServer(t)
	hook := func() *admissionregistrationv1.ValidatingWebhookConfiguration {
		return idleValidatingWebhook("reinject")
	}
	vwc := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	_, err := vwc.Create(ctx, hook(), metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	sm := &certs.SelfManaged{Client: cs, Namespace: framework.WavegateNamespace, Secret: "wavegate-webhook-certs", CertDir: t.TempDir(),
		IPs: []net.IP{net.ParseIP("127.0.0.1")}, ValidatingWebhooks: []string{"reinject-test"}, Check: time.Hour}
	background(t, ctx, sm.Start)
	bundle := func() []byte {
		c, err := vwc.Get(ctx, "reinject-test", metav1.GetOptions{})
		if err != nil {
			return nil
		}
		return c.Webhooks[0].ClientConfig.CABundle
	}
	g.Eventually(bundle).WithTimeout(10 * time.Second).ShouldNot(BeEmpty())
	injected := bundle()

	g.Expect(vwc.Delete(ctx, "reinject-test", metav1.DeleteOptions{})).To(Succeed())
	_, err = vwc.Create(ctx, hook(), metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(bundle).WithTimeout(10*time.Second).Should(Equal(injected), "the recreated configuration did not get the CA")
}

// TestIssueWaitsForItsConfiguration: the first certificate is issued even when the manager starts
// before what it needs is in force (here its webhook configuration, created a moment later; on a
// fresh install also its roles): Issue retries instead of failing the manager's start.
func TestIssueWaitsForItsConfiguration(t *testing.T) {
	g := NewWithT(t)
	ctx, cs := apiServer(t)
	sm := &certs.SelfManaged{Client: cs, Namespace: framework.WavegateNamespace, Secret: "wavegate-webhook-certs", CertDir: t.TempDir(),
		IPs: []net.IP{net.ParseIP("127.0.0.1")}, ValidatingWebhooks: []string{"late-test"}}
	issued := make(chan error, 1)
	go func() { issued <- sm.Issue(ctx, 30*time.Second) }()
	g.Consistently(issued).WithTimeout(time.Second).ShouldNot(Receive(), "issued without its webhook configuration")
	_, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, idleValidatingWebhook("late"), metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(issued).WithTimeout(15 * time.Second).Should(Receive(BeNil()))

	// A cause that does not go away is returned, not hidden behind a timeout.
	missing := &certs.SelfManaged{Client: cs, Namespace: framework.WavegateNamespace, Secret: "wavegate-webhook-certs", CertDir: t.TempDir(),
		IPs: []net.IP{net.ParseIP("127.0.0.1")}, ValidatingWebhooks: []string{"never-created"}}
	err = missing.Issue(ctx, 2*time.Second)
	g.Expect(err).To(MatchError(ContainSubstring("never-created")))
}

// idleValidatingWebhook is a configuration named <name>-test whose one entry is never called (it
// selects namespaces labeled <name>=true, which no test creates): something for the CA to be
// injected into.
func idleValidatingWebhook(name string) *admissionregistrationv1.ValidatingWebhookConfiguration {
	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-test"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    name + ".wavegate.io",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:1/validate")},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{"DELETE"}, Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{name: "true"}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
}
