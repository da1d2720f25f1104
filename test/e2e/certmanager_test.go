//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"wavegate.io/wavegate/pkg/keys"
)

var (
	issuersGVR      = schema.GroupVersionResource{Group: "cert-manager.io", Version: "v1", Resource: "issuers"}
	certificatesGVR = schema.GroupVersionResource{Group: "cert-manager.io", Version: "v1", Resource: "certificates"}
)

// devCertMode is where the local cluster's webhook certificate comes from, as test/tools/dev/dev.sh
// recorded it: "self-managed" (the manager's own), or "cert-manager" (ENGINES=certmanager: the
// Secret cert-manager issues for config/default's Certificate).
func devCertMode() string {
	b, _ := os.ReadFile(filepath.Join(root, ".dev", "cert-mode"))
	return strings.TrimSpace(string(b))
}

// devConfig is the kustomization dev.sh applied for wavegate's CRDs and webhook configurations.
func devConfig() string {
	if devCertMode() == "cert-manager" {
		return filepath.Join(root, "config", "dev-certmanager")
	}
	return filepath.Join(root, "config", "dev")
}

// requireCertManager skips a test unless the local cluster runs cert-manager and wavegate's
// webhook serves the certificate it issues (`make dev-up ENGINES=certmanager`; make test-e2e does).
func requireCertManager(t *testing.T) {
	t.Helper()
	if mode := devCertMode(); mode != "cert-manager" {
		t.Skipf("cert-manager is not running on the local cluster (its webhook certificate is %q): "+
			"start it with make dev-up ENGINES=certmanager, or run make test-e2e", mode)
	}
	for _, name := range []string{"certmanager-controller", "certmanager-cainjector"} {
		b, err := os.ReadFile(filepath.Join(root, ".dev", name+".pid"))
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 || syscall.Kill(pid, 0) != nil {
			t.Skipf("cert-manager's %s is not running (.dev/%s.pid): start it with make dev-up ENGINES=certmanager", name, name)
		}
	}
}

// renderDefault renders config/default with the real kubectl (as `kubectl apply -k` would) and
// returns its objects by "Kind/name".
func renderDefault(t *testing.T) map[string]*unstructured.Unstructured {
	t.Helper()
	out := run(t, "kustomize", filepath.Join(root, "config", "default"))
	objs := map[string]*unstructured.Unstructured{}
	docs := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(out)))
	for {
		doc, err := docs.Read()
		if errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("reading config/default: %v", err)
		}
		j, err := yaml.YAMLToJSON(doc)
		if err != nil {
			t.Fatalf("decoding config/default: %v", err)
		}
		if strings.TrimSpace(string(j)) == "null" {
			continue
		}
		// As the API returns objects: integers as int64, not float64.
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(j); err != nil {
			t.Fatalf("decoding config/default: %v", err)
		}
		objs[u.GetKind()+"/"+u.GetName()] = u
	}
	return objs
}

// readyStatus returns the status of an object's Ready condition when it is about the current
// generation, else "".
func readyStatus(u *unstructured.Unstructured) string {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] != "Ready" {
			continue
		}
		if gen, ok := m["observedGeneration"].(int64); ok && gen != u.GetGeneration() {
			return ""
		}
		s, _ := m["status"].(string)
		return s
	}
	return ""
}

// certOf parses the first PEM certificate of b.
func certOf(g Gomega, b []byte, what string) *x509.Certificate {
	block, _ := pem.Decode(b)
	g.Expect(block).NotTo(BeNil(), "%s holds no PEM certificate", what)
	c, err := x509.ParseCertificate(block.Bytes)
	g.Expect(err).NotTo(HaveOccurred(), what)
	return c
}

// certsIn returns the DER bytes of every certificate of a PEM bundle.
func certsIn(bundle []byte) [][]byte {
	var out [][]byte
	for block, rest := pem.Decode(bundle); block != nil; block, rest = pem.Decode(rest) {
		out = append(out, block.Bytes)
	}
	return out
}

// verifiesAgainst tells why leaf does not verify for 127.0.0.1 (the address the local cluster's
// webhook configurations name) against the CA bundle, or nil when it does: what the API server
// checks when it calls a webhook.
func verifiesAgainst(leaf *x509.Certificate, bundle []byte) error {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(bundle) {
		return errors.New("the CA bundle holds no certificate")
	}
	_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "127.0.0.1"})
	return err
}

// renew asks cert-manager to issue a Certificate again now, as `cmctl renew` does (an Issuing
// condition, reason ManuallyTriggered, replacing any there is), and returns once the issuance is
// done: the status revision went up, no Issuing condition is True, the Secret's tls.crt changed
// and the Certificate is Ready.
func renew(t *testing.T, ns, name string) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	cert, err := dyn.Resource(certificatesGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	secretName, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
	revision, _, _ := unstructured.NestedInt64(cert.Object, "status", "revision")
	before, err := cs.CoreV1().Secrets(ns).Get(ctx, secretName, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() error {
		cert, err := dyn.Resource(certificatesGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		conds, _, _ := unstructured.NestedSlice(cert.Object, "status", "conditions")
		conds = slices.DeleteFunc(conds, func(c any) bool { m, _ := c.(map[string]any); return m["type"] == "Issuing" })
		conds = append(conds, map[string]any{"type": "Issuing", "status": "True", "reason": "ManuallyTriggered",
			"message": "renewed by the e2e test", "observedGeneration": cert.GetGeneration(),
			"lastTransitionTime": time.Now().UTC().Format(time.RFC3339)})
		if err := unstructured.SetNestedSlice(cert.Object, conds, "status", "conditions"); err != nil {
			return err
		}
		_, err = dyn.Resource(certificatesGVR).Namespace(ns).UpdateStatus(ctx, cert, metav1.UpdateOptions{})
		return err
	}).WithTimeout(30 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
	g.Eventually(func(g Gomega) {
		cert, err := dyn.Resource(certificatesGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		now, _, _ := unstructured.NestedInt64(cert.Object, "status", "revision")
		g.Expect(now).To(BeNumerically(">", revision), "Certificate %s/%s was not issued again", ns, name)
		conds, _, _ := unstructured.NestedSlice(cert.Object, "status", "conditions")
		g.Expect(conds).NotTo(ContainElement(And(HaveKeyWithValue("type", "Issuing"), HaveKeyWithValue("status", "True"))))
		g.Expect(readyStatus(cert)).To(Equal("True"))
		secret, err := cs.CoreV1().Secrets(ns).Get(ctx, secretName, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(secret.Data["tls.crt"]).NotTo(Equal(before.Data["tls.crt"]), "Secret %s/%s was not issued again", ns, secretName)
	}).WithTimeout(time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
}

// TestCertManagerIssuesTheWebhookCertificate proves config/default's certificate mode with the real
// cert-manager (its certificate controllers and cainjector, ENGINES=certmanager): the Issuers and
// Certificates config/default renders become Ready, cert-manager issues wavegate's CA and the
// serving certificate it signs, its cainjector injects the CA into every entry of both webhook
// configurations, the manager serves exactly that serving certificate, and the API server calls
// both webhooks through it: a mutation (the objects webhook fails closed, so a wrong CA would deny
// the create) and a refused foreground deletion (the DELETE check fails open, so only a successful
// call can refuse). Then both certificates are renewed: the API server's trust never changes for
// the serving certificate's renewal, and the CA's renewal keeps its key, so the certificate the
// manager still serves keeps verifying and the webhook keeps being called.
func TestCertManagerIssuesTheWebhookCertificate(t *testing.T) {
	requireCertManager(t)
	g := NewWithT(t)
	ctx := context.Background()
	rendered := renderDefault(t)
	for _, name := range []string{
		"Issuer/wavegate-selfsigned-issuer", "Issuer/wavegate-ca-issuer",
		"Certificate/wavegate-ca", "Certificate/wavegate-serving-cert",
		"MutatingWebhookConfiguration/wavegate-mutating-webhook-configuration",
		"ValidatingWebhookConfiguration/wavegate-validating-webhook-configuration",
		"Deployment/wavegate-manager",
	} {
		g.Expect(rendered).To(HaveKey(name), "config/default renders no %s", name)
	}
	caCert, servingCert := rendered["Certificate/wavegate-ca"], rendered["Certificate/wavegate-serving-cert"]
	mutatingName := rendered["MutatingWebhookConfiguration/wavegate-mutating-webhook-configuration"].GetName()
	validatingName := rendered["ValidatingWebhookConfiguration/wavegate-validating-webhook-configuration"].GetName()
	ns := servingCert.GetNamespace()

	// The Issuers and the Certificates on the cluster are config/default's, the serving Certificate
	// with the local address added (config/dev-certmanager), and all are Ready.
	for _, name := range []string{"Issuer/wavegate-selfsigned-issuer", "Issuer/wavegate-ca-issuer"} {
		issuer := rendered[name]
		g.Eventually(func(g Gomega) {
			live, err := dyn.Resource(issuersGVR).Namespace(issuer.GetNamespace()).Get(ctx, issuer.GetName(), metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(live.Object["spec"]).To(Equal(issuer.Object["spec"]))
			g.Expect(readyStatus(live)).To(Equal("True"), "Issuer %s/%s is not Ready", live.GetNamespace(), live.GetName())
		}).WithTimeout(time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
	}
	specs := map[string]map[string]any{}
	for _, cert := range []*unstructured.Unstructured{caCert, servingCert} {
		g.Eventually(func(g Gomega) {
			live, err := dyn.Resource(certificatesGVR).Namespace(cert.GetNamespace()).Get(ctx, cert.GetName(), metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			spec, _ := live.Object["spec"].(map[string]any)
			for k, v := range cert.Object["spec"].(map[string]any) {
				g.Expect(spec).To(HaveKeyWithValue(k, v), "Certificate %s spec.%s differs from config/default's", cert.GetName(), k)
			}
			g.Expect(readyStatus(live)).To(Equal("True"), "Certificate %s/%s is not Ready", live.GetNamespace(), live.GetName())
			specs[cert.GetName()] = spec
		}).WithTimeout(time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
	}
	g.Expect(specs[servingCert.GetName()]).To(HaveKeyWithValue("ipAddresses", []any{"127.0.0.1"}))
	caSecretName := specs[caCert.GetName()]["secretName"].(string)
	servingSecretName := specs[servingCert.GetName()]["secretName"].(string)

	// config/default's manager mounts the serving Secret (the local manager reads the same files
	// from .dev/certs, written by dev.sh from the Secret).
	volumes, _, _ := unstructured.NestedSlice(rendered["Deployment/wavegate-manager"].Object, "spec", "template", "spec", "volumes")
	g.Expect(volumes).To(ContainElement(HaveKeyWithValue("secret", HaveKeyWithValue("secretName", servingSecretName))),
		"config/default's manager does not mount the serving Certificate's Secret")

	// wavegate's CA: self-signed, a CA; the serving certificate: the Certificate's names, signed by
	// the CA, which its Secret names as ca.crt.
	caSecret, err := cs.CoreV1().Secrets(ns).Get(ctx, caSecretName, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	ca := certOf(g, caSecret.Data["tls.crt"], "Secret "+caSecretName+" tls.crt")
	g.Expect(ca.IsCA).To(BeTrue(), "wavegate's CA is not a CA certificate")
	g.Expect(ca.CheckSignatureFrom(ca)).To(Succeed(), "wavegate's CA is not self-signed")
	g.Expect(bytes.TrimSpace(caSecret.Data["ca.crt"])).To(Equal(bytes.TrimSpace(caSecret.Data["tls.crt"])))
	secret, err := cs.CoreV1().Secrets(ns).Get(ctx, servingSecretName, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(secret.Annotations).To(HaveKeyWithValue("cert-manager.io/certificate-name", servingCert.GetName()))
	leaf := certOf(g, secret.Data["tls.crt"], "Secret "+servingSecretName+" tls.crt")
	g.Expect(leaf.DNSNames).To(ConsistOf(servingCert.Object["spec"].(map[string]any)["dnsNames"]))
	g.Expect(leaf.IPAddresses).To(ContainElement(WithTransform(net.IP.String, Equal("127.0.0.1"))))
	g.Expect(leaf.IsCA).To(BeFalse())
	g.Expect(leaf.CheckSignatureFrom(ca)).To(Succeed(), "the serving certificate is not signed by wavegate's CA")
	g.Expect(bytes.TrimSpace(secret.Data["ca.crt"])).To(Equal(bytes.TrimSpace(caSecret.Data["tls.crt"])))

	// bundles returns the caBundle of every entry of both webhook configurations, which carry
	// config/default's annotation.
	bundles := func(g Gomega) [][]byte {
		var out [][]byte
		mutating, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, mutatingName, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(mutating.Annotations).To(HaveKeyWithValue("cert-manager.io/inject-ca-from", ns+"/"+caCert.GetName()))
		g.Expect(mutating.Webhooks).NotTo(BeEmpty())
		for _, w := range mutating.Webhooks {
			out = append(out, w.ClientConfig.CABundle)
		}
		validating, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, validatingName, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(validating.Annotations).To(HaveKeyWithValue("cert-manager.io/inject-ca-from", ns+"/"+caCert.GetName()))
		g.Expect(validating.Webhooks).NotTo(BeEmpty())
		for _, w := range validating.Webhooks {
			out = append(out, w.ClientConfig.CABundle)
		}
		return out
	}
	// cainjector injected the CA (not the serving certificate) into every entry.
	var injected [][]byte
	g.Eventually(func(g Gomega) {
		injected = bundles(g)
		g.Expect(injected).To(HaveEach(WithTransform(certsIn, ContainElement(ca.Raw))))
	}).WithTimeout(time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
	g.Expect(injected).To(HaveEach(WithTransform(certsIn, Not(ContainElement(leaf.Raw)))), "the serving certificate itself is trusted")

	// The manager serves exactly that serving certificate, and it verifies against the injected CA
	// for the address the webhook configurations name.
	conn, err := tls.Dial("tcp", "127.0.0.1:19443", &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}) //nolint:gosec // verified below against the injected bundle
	g.Expect(err).NotTo(HaveOccurred())
	served := conn.ConnectionState().PeerCertificates[0]
	_ = conn.Close()
	g.Expect(served.Raw).To(Equal(leaf.Raw), "the webhook serves another certificate than cert-manager's")
	g.Expect(verifiesAgainst(served, caSecret.Data["ca.crt"])).To(Succeed())

	// The API server calls both webhooks with that CA.
	proof := "certmanager-proof"
	applyYAML(t, `apiVersion: v1
kind: Namespace
metadata: {name: `+proof+`, labels: {wavegate.io/enabled: "true"}}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: first
  namespace: `+proof+`
  labels: {wavegate.io/group: first, wavegate.io/group-order: "1"}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: second
  namespace: `+proof+`
  labels: {wavegate.io/group: second, wavegate.io/group-order: "2"}
`)
	t.Cleanup(func() { _ = exec.Command(kubectl, "delete", "namespace", proof, "--wait=false").Run() })
	first, err := cs.CoreV1().ConfigMaps(proof).Get(ctx, "first", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(first.Annotations).To(HaveKeyWithValue(keys.ResolvedGroupAnnotation, "first"), "the objects webhook did not mutate")
	g.Eventually(func() string {
		out, _ := exec.Command(kubectl, "delete", "-n", proof, "configmap/first", "--cascade=foreground", "--dry-run=server").CombinedOutput()
		return string(out)
	}).WithTimeout(time.Minute).WithPolling(200*time.Millisecond).Should(ContainSubstring(`is deleted after group(s) second`),
		"the DELETE check did not refuse a foreground deletion of group first while group second exists")

	// Renewals. The serving certificate first: a new key and certificate from the same CA, so the
	// bundle stays as it is, and the certificate the manager still serves (the local manager read
	// its files once) verifies against it as well as the renewed one.
	renew(t, ns, servingCert.GetName())
	secret, err = cs.CoreV1().Secrets(ns).Get(ctx, servingSecretName, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	renewed := certOf(g, secret.Data["tls.crt"], "the renewed Secret "+servingSecretName)
	g.Expect(renewed.PublicKey).NotTo(Equal(leaf.PublicKey), "the serving certificate's key was not rotated (rotationPolicy: Always)")
	g.Consistently(func(g Gomega) {
		g.Expect(bundles(g)).To(Equal(injected))
	}).WithTimeout(3*time.Second).WithPolling(200*time.Millisecond).Should(Succeed(), "renewing the serving certificate changed the API server's trust")
	g.Expect(verifiesAgainst(renewed, caSecret.Data["ca.crt"])).To(Succeed())
	g.Expect(verifiesAgainst(served, caSecret.Data["ca.crt"])).To(Succeed())

	// Then the CA: cert-manager issues it again with the same key (rotationPolicy: Never) and
	// cainjector injects the renewed CA. Certificates signed before verify against the renewed CA
	// alone. cainjector keeps the previous CA in the bundles until it expires, so to make the API
	// server's calls depend on the renewed CA alone the test narrows every bundle to it (cainjector
	// leaves that as it is): the webhook that serves the first serving certificate keeps being
	// called.
	renew(t, ns, caCert.GetName())
	caSecret2, err := cs.CoreV1().Secrets(ns).Get(ctx, caSecretName, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	ca2 := certOf(g, caSecret2.Data["tls.crt"], "the renewed Secret "+caSecretName)
	g.Expect(ca2.PublicKey).To(Equal(ca.PublicKey), "renewing wavegate's CA replaced its key")
	g.Eventually(func(g Gomega) {
		injected = bundles(g)
		g.Expect(injected).To(HaveEach(WithTransform(certsIn, ContainElement(ca2.Raw))))
	}).WithTimeout(time.Minute).WithPolling(200*time.Millisecond).Should(Succeed(), "cainjector did not inject the renewed CA")
	for _, bundle := range injected {
		g.Expect(verifiesAgainst(served, bundle)).To(Succeed())
	}
	g.Expect(verifiesAgainst(served, caSecret2.Data["ca.crt"])).To(Succeed())
	g.Expect(verifiesAgainst(renewed, caSecret2.Data["ca.crt"])).To(Succeed())
	g.Eventually(func() error {
		m, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, mutatingName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for i := range m.Webhooks {
			m.Webhooks[i].ClientConfig.CABundle = caSecret2.Data["ca.crt"]
		}
		_, err = cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, m, metav1.UpdateOptions{})
		return err
	}).WithTimeout(30 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
	g.Consistently(func(g Gomega) {
		m, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, mutatingName, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		for _, w := range m.Webhooks {
			g.Expect(certsIn(w.ClientConfig.CABundle)).To(Equal([][]byte{ca2.Raw}), "mutating webhook %s", w.Name)
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "after-renewals-", Namespace: proof,
			Labels: map[string]string{keys.GroupLabel: "second", keys.GroupOrderLabel: "2"}}}
		created, err := cs.CoreV1().ConfigMaps(proof).Create(ctx, cm, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		g.Expect(err).NotTo(HaveOccurred(), "the objects webhook was not called with the renewed CA alone")
		g.Expect(created.Annotations).To(HaveKeyWithValue(keys.ResolvedGroupAnnotation, "second"), "the objects webhook did not mutate")
	}).WithTimeout(5 * time.Second).WithPolling(250 * time.Millisecond).Should(Succeed())
	deleteNamespaceTimed(t, proof)
}
