// Package certs gives the webhook a serving certificate without cert-manager: wavegate keeps its own
// CA and serving certificate in a Secret in its namespace (shared by every replica), writes them
// where the webhook server reads them (controller-runtime's certwatcher reloads them without a
// restart), injects the CA into its webhook configurations, and renews before expiry.
package certs

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"math"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"

	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/patch"
)

// Only wavegate's own certificate Secret, in its own namespace (create cannot be narrowed to a name).
// `make manifests` writes this Role to config/self-managed/rbac: only the self-managed install has
// it. Patching the webhook configurations' CA is the webhookconfig controller's access.
// +kubebuilder:rbac:groups="",namespace=wavegate-system,resources=secrets,verbs=get;update,resourceNames=wavegate-webhook-certs
// +kubebuilder:rbac:groups="",namespace=wavegate-system,resources=secrets,verbs=create

// Secret keys.
const (
	caCertKey = "ca.crt"
	caKeyKey  = "ca.key"
	certKey   = "tls.crt"
	keyKey    = "tls.key"
)

// SelfManaged issues and rotates the webhook's certificate.
type SelfManaged struct {
	Client kubernetes.Interface
	// Namespace and Secret hold the CA and the serving certificate.
	Namespace, Secret string
	// CertDir is where the webhook server reads tls.crt and tls.key.
	CertDir string
	// DNSNames and IPs are the serving certificate's names (the webhook Service's DNS names, or
	// 127.0.0.1 for a webhook reached by URL).
	DNSNames []string
	IPs      []net.IP
	// MutatingWebhooks and ValidatingWebhooks are the configurations whose caBundle is injected.
	MutatingWebhooks, ValidatingWebhooks []string
	// Validity of the serving certificate (default 90 days); it is renewed after two thirds.
	Validity time.Duration
	// Check is how often expiry is checked (default 1 hour).
	Check time.Duration
	// Now is the clock (tests may replace it).
	Now func() time.Time
}

// NeedLeaderElection is false: every replica serves the webhook and needs the certificate files.
func (s *SelfManaged) NeedLeaderElection() bool { return false }

func (s *SelfManaged) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// Issue reconciles until the first certificate is issued, or until timeout: the webhook server
// cannot start without it. It retries with backoff, logging each failure, because right after an
// install the manager's roles may not be in force yet (the authorizer lags its bindings by a
// moment) and its webhook configurations may not exist yet; a permanent error is returned once the
// time is up.
func (s *SelfManaged) Issue(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	backoff := wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Cap: 5 * time.Second, Steps: math.MaxInt32}
	err := wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
		last = s.Reconcile(ctx)
		if last != nil {
			ctrl.LoggerFrom(ctx).Info("Issuing the webhook certificate failed; retrying", "error", last.Error())
		}
		return last == nil, nil
	})
	if err != nil && last != nil {
		return last
	}
	return err
}

// Start keeps the certificate valid and injected until ctx ends: it reconciles every Check, and at
// once whenever one of its webhook configurations is created or changed (re-applied manifests, a
// reinstall after `wavegate uninstall`), so that a configuration never waits for its CA bundle.
func (s *SelfManaged) Start(ctx context.Context) error {
	check := s.Check
	if check == 0 {
		check = time.Hour
	}
	changed := make(chan struct{}, 1)
	if err := s.watchConfigurations(ctx, func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}); err != nil {
		return err
	}
	for {
		if err := s.Reconcile(ctx); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Reconciling the webhook certificate")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(check):
		case <-changed:
		}
	}
}

// watchConfigurations calls changed whenever one of wavegate's webhook configurations is added or
// updated. Webhook configurations are few and small: they are watched whole.
func (s *SelfManaged) watchConfigurations(ctx context.Context, changed func()) error {
	ours := map[string]bool{}
	for _, n := range append(slices.Clone(s.MutatingWebhooks), s.ValidatingWebhooks...) {
		ours[n] = true
	}
	handler := toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { notifyIfOurs(o, ours, changed) },
		UpdateFunc: func(_, o any) { notifyIfOurs(o, ours, changed) },
	}
	f := informers.NewSharedInformerFactory(s.Client, 0)
	var synced []toolscache.InformerSynced
	if len(s.MutatingWebhooks) > 0 {
		inf := f.Admissionregistration().V1().MutatingWebhookConfigurations().Informer()
		if _, err := inf.AddEventHandler(handler); err != nil {
			return fmt.Errorf("watching MutatingWebhookConfigurations: %w", err)
		}
		synced = append(synced, inf.HasSynced)
	}
	if len(s.ValidatingWebhooks) > 0 {
		inf := f.Admissionregistration().V1().ValidatingWebhookConfigurations().Informer()
		if _, err := inf.AddEventHandler(handler); err != nil {
			return fmt.Errorf("watching ValidatingWebhookConfigurations: %w", err)
		}
		synced = append(synced, inf.HasSynced)
	}
	f.Start(ctx.Done())
	if !toolscache.WaitForCacheSync(ctx.Done(), synced...) && ctx.Err() == nil {
		return errors.New("the webhook configuration informers did not sync")
	}
	return nil
}

func notifyIfOurs(o any, ours map[string]bool, changed func()) {
	if m, ok := o.(metav1.Object); ok && ours[m.GetName()] {
		changed()
	}
}

// Reconcile makes the Secret hold a valid CA and serving certificate, writes them to CertDir and
// injects the CA. Replicas race on the Secret with optimistic concurrency; the loser reads the
// winner's.
func (s *SelfManaged) Reconcile(ctx context.Context) error {
	sec, err := s.Client.CoreV1().Secrets(s.Namespace).Get(ctx, s.Secret, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		sec = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: s.Secret, Namespace: s.Namespace,
			Labels: map[string]string{keys.NameLabel: "wavegate"}}, Type: corev1.SecretTypeTLS}
		if err := s.issue(sec, true); err != nil {
			return err
		}
		if sec, err = s.Client.CoreV1().Secrets(s.Namespace).Create(ctx, sec, metav1.CreateOptions{}); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return s.Reconcile(ctx)
			}
			return fmt.Errorf("creating Secret %s/%s: %w", s.Namespace, s.Secret, err)
		}
	} else if err != nil {
		return fmt.Errorf("reading Secret %s/%s: %w", s.Namespace, s.Secret, err)
	} else if renewCA, renew := s.due(sec); renew {
		if err := s.issue(sec, renewCA); err != nil {
			return err
		}
		if sec, err = s.Client.CoreV1().Secrets(s.Namespace).Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
			if apierrors.IsConflict(err) {
				return s.Reconcile(ctx)
			}
			return fmt.Errorf("renewing Secret %s/%s: %w", s.Namespace, s.Secret, err)
		}
		ctrl.LoggerFrom(ctx).Info("Renewed the webhook certificate", "renewedCA", renewCA)
	}
	if err := s.write(sec); err != nil {
		return err
	}
	return s.inject(ctx, sec.Data[caCertKey])
}

// due reports whether the serving certificate (and the CA) must be renewed.
func (s *SelfManaged) due(sec *corev1.Secret) (renewCA, renew bool) {
	ca, err1 := parseCert(sec.Data[caCertKey])
	cert, err2 := parseCert(sec.Data[certKey])
	if err1 != nil || err2 != nil || len(sec.Data[caKeyKey]) == 0 || len(sec.Data[keyKey]) == 0 {
		return true, true
	}
	now := s.now()
	renewCA = now.After(ca.NotAfter.Add(-ca.NotAfter.Sub(ca.NotBefore) / 3))
	renew = renewCA || now.After(cert.NotAfter.Add(-cert.NotAfter.Sub(cert.NotBefore)/3)) || !s.covers(cert)
	return renewCA, renew
}

func (s *SelfManaged) covers(cert *x509.Certificate) bool {
	for _, d := range s.DNSNames {
		if cert.VerifyHostname(d) != nil {
			return false
		}
	}
	for _, ip := range s.IPs {
		if cert.VerifyHostname(ip.String()) != nil {
			return false
		}
	}
	return true
}

// issue fills sec with a new serving certificate, and a new CA if asked. When the CA is renewed,
// the old CA stays in the bundle so that API servers trusting it keep working during the switch.
func (s *SelfManaged) issue(sec *corev1.Secret, newCA bool) error {
	if sec.Data == nil {
		sec.Data = map[string][]byte{}
	}
	validity := s.Validity
	if validity == 0 {
		validity = 90 * 24 * time.Hour
	}
	now := s.now()
	// Backdate a little for clock skew between API servers, never by a large share of the lifetime.
	backdate := min(time.Minute, validity/10)
	var caCert *x509.Certificate
	var caKey *ecdsa.PrivateKey
	bundle := sec.Data[caCertKey]
	if !newCA {
		var err error
		if caCert, err = parseCert(sec.Data[caCertKey]); err != nil {
			newCA = true
		} else if caKey, err = parseKey(sec.Data[caKeyKey]); err != nil {
			newCA = true
		}
	}
	if newCA {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "wavegate-webhook-ca"},
			NotBefore: now.Add(-backdate), NotAfter: now.Add(4 * validity), IsCA: true, BasicConstraintsValid: true,
			KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
		der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
		if err != nil {
			return err
		}
		if caCert, err = x509.ParseCertificate(der); err != nil {
			return err
		}
		caKey = key
		newPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
		bundle = append(newPEM, keepValid(bundle, now)...)
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return err
		}
		sec.Data[caKeyKey] = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "wavegate-webhook"},
		NotBefore: now.Add(-backdate), NotAfter: now.Add(validity), DNSNames: s.DNSNames, IPAddresses: s.IPs,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	sec.Data[caCertKey] = bundle
	sec.Data[certKey] = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	sec.Data[keyKey] = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	return nil
}

// keepValid returns the certificates of a PEM bundle that are still valid.
func keepValid(bundle []byte, now time.Time) []byte {
	var out []byte
	for {
		var b *pem.Block
		b, bundle = pem.Decode(bundle)
		if b == nil {
			return out
		}
		if c, err := x509.ParseCertificate(b.Bytes); err == nil && now.Before(c.NotAfter) {
			out = append(out, pem.EncodeToMemory(b)...)
		}
	}
}

// write puts the serving pair where the webhook server reads it, atomically (rename), only when
// it changed, so the certwatcher reloads exactly once per renewal.
func (s *SelfManaged) write(sec *corev1.Secret) error {
	if err := os.MkdirAll(s.CertDir, 0o700); err != nil {
		return err
	}
	for _, k := range []string{keyKey, certKey} {
		path := filepath.Join(s.CertDir, k)
		if cur, err := os.ReadFile(path); err == nil && bytes.Equal(cur, sec.Data[k]) {
			continue
		}
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, sec.Data[k], 0o600); err != nil {
			return err
		}
		if err := os.Rename(tmp, path); err != nil {
			return err
		}
	}
	return nil
}

// inject sets the CA bundle on every webhook of wavegate's configurations.
func (s *SelfManaged) inject(ctx context.Context, ca []byte) error {
	caPatch := func(n int) []byte {
		ops := make([]patch.Operation, n)
		for i := range n {
			ops[i] = patch.Add(fmt.Sprintf("/webhooks/%d/clientConfig/caBundle", i), encode(ca))
		}
		b, _ := patch.Marshal(ops...) // strings always encode
		return b
	}
	for _, name := range s.MutatingWebhooks {
		c, err := s.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading MutatingWebhookConfiguration %s: %w", name, err)
		}
		if caCurrent(c.Webhooks, func(i int) []byte { return c.Webhooks[i].ClientConfig.CABundle }, ca) {
			continue
		}
		if _, err := s.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Patch(ctx, name, types.JSONPatchType, caPatch(len(c.Webhooks)), metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("injecting the CA into %s: %w", name, err)
		}
	}
	for _, name := range s.ValidatingWebhooks {
		c, err := s.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading ValidatingWebhookConfiguration %s: %w", name, err)
		}
		if caCurrent(c.Webhooks, func(i int) []byte { return c.Webhooks[i].ClientConfig.CABundle }, ca) {
			continue
		}
		if _, err := s.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Patch(ctx, name, types.JSONPatchType, caPatch(len(c.Webhooks)), metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("injecting the CA into %s: %w", name, err)
		}
	}
	return nil
}

func caCurrent[T any](hooks []T, bundle func(int) []byte, ca []byte) bool {
	for i := range hooks {
		if !bytes.Equal(bundle(i), ca) {
			return false
		}
	}
	return true
}

func encode(b []byte) string {
	return base64.StdEncoding.EncodeToString(b)
}

func parseCert(p []byte) (*x509.Certificate, error) {
	b, _ := pem.Decode(p)
	if b == nil {
		return nil, errors.New("no PEM certificate")
	}
	return x509.ParseCertificate(b.Bytes)
}

func parseKey(p []byte) (*ecdsa.PrivateKey, error) {
	b, _ := pem.Decode(p)
	if b == nil {
		return nil, errors.New("no PEM key")
	}
	return x509.ParseECPrivateKey(b.Bytes)
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}
