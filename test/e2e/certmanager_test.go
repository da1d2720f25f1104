//go:build e2e

package e2e

import (
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
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

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
// returns its objects by kind.
func renderDefault(t *testing.T) map[string]*unstructured.Unstructured {
	t.Helper()
	out := run(t, "kustomize", filepath.Join(root, "config", "default"))
	objs := map[string]*unstructured.Unstructured{}
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(out), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decoding config/default: %v", err)
		}
		if u.Object != nil {
			objs[u.GetKind()] = u
		}
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

// TestCertManagerIssuesTheWebhookCertificate proves config/default's certificate mode with the real
// cert-manager (its certificate controllers and cainjector, ENGINES=certmanager): the Issuer and the
// Certificate config/default renders become Ready, cert-manager issues the Secret, its cainjector
// injects the Secret's CA into every entry of both webhook configurations, the manager serves
// exactly that certificate, and the API server calls both webhooks through it: a mutation (the
// objects webhook fails closed, so a wrong CA would deny the create) and a refused foreground
// deletion (the DELETE check fails open, so only a successful call can refuse).
func TestCertManagerIssuesTheWebhookCertificate(t *testing.T) {
	requireCertManager(t)
	g := NewWithT(t)
	ctx := context.Background()
	rendered := renderDefault(t)
	for _, kind := range []string{"Issuer", "Certificate", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} {
		g.Expect(rendered).To(HaveKey(kind), "config/default renders no %s", kind)
	}

	// The Issuer and the Certificate on the cluster are config/default's, the Certificate with the
	// local address added (config/dev-certmanager), and both are Ready.
	issuer, cert := rendered["Issuer"], rendered["Certificate"]
	ns := cert.GetNamespace()
	g.Eventually(func(g Gomega) {
		live, err := dyn.Resource(issuersGVR).Namespace(issuer.GetNamespace()).Get(ctx, issuer.GetName(), metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(live.Object["spec"]).To(Equal(issuer.Object["spec"]))
		g.Expect(readyStatus(live)).To(Equal("True"), "Issuer %s/%s is not Ready", live.GetNamespace(), live.GetName())
	}).WithTimeout(time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
	var spec map[string]any
	g.Eventually(func(g Gomega) {
		live, err := dyn.Resource(certificatesGVR).Namespace(ns).Get(ctx, cert.GetName(), metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		spec, _ = live.Object["spec"].(map[string]any)
		for k, v := range cert.Object["spec"].(map[string]any) {
			g.Expect(spec).To(HaveKeyWithValue(k, v), "Certificate spec.%s differs from config/default's", k)
		}
		g.Expect(spec).To(HaveKeyWithValue("ipAddresses", []any{"127.0.0.1"}))
		g.Expect(readyStatus(live)).To(Equal("True"), "Certificate %s/%s is not Ready", ns, live.GetName())
	}).WithTimeout(time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())

	// config/default's manager mounts that Secret (the local manager reads the same files from
	// .dev/certs, written by dev.sh from the Secret).
	g.Expect(rendered).To(HaveKey("Deployment"))
	volumes, _, _ := unstructured.NestedSlice(rendered["Deployment"].Object, "spec", "template", "spec", "volumes")
	g.Expect(volumes).To(ContainElement(HaveKeyWithValue("secret", HaveKeyWithValue("secretName", spec["secretName"]))),
		"config/default's manager does not mount the Certificate's Secret")

	// The Secret cert-manager issued: a self-signed certificate (the selfSigned issuer) with the
	// Certificate's names; its CA is the certificate itself.
	secret, err := cs.CoreV1().Secrets(ns).Get(ctx, spec["secretName"].(string), metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(secret.Annotations).To(HaveKeyWithValue("cert-manager.io/certificate-name", cert.GetName()))
	ca := secret.Data["ca.crt"]
	g.Expect(ca).NotTo(BeEmpty(), "Secret %s/%s has no ca.crt", ns, secret.Name)
	block, _ := pem.Decode(secret.Data["tls.crt"])
	g.Expect(block).NotTo(BeNil(), "Secret %s/%s has no tls.crt", ns, secret.Name)
	leaf, err := x509.ParseCertificate(block.Bytes)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(leaf.DNSNames).To(ConsistOf(cert.Object["spec"].(map[string]any)["dnsNames"]))
	g.Expect(leaf.IPAddresses).To(ContainElement(WithTransform(net.IP.String, Equal("127.0.0.1"))))
	g.Expect(leaf.RawIssuer).To(Equal(leaf.RawSubject), "the selfSigned issuer names the certificate its own issuer")
	g.Expect(leaf.CheckSignature(leaf.SignatureAlgorithm, leaf.RawTBSCertificate, leaf.Signature)).To(Succeed(),
		"the selfSigned issuer signs the certificate with its own key")
	g.Expect(bytes.TrimSpace(ca)).To(Equal(bytes.TrimSpace(secret.Data["tls.crt"])))

	// cainjector injected the Secret's CA into every entry of both webhook configurations, which
	// carry config/default's annotation.
	g.Eventually(func(g Gomega) {
		mutating, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, rendered["MutatingWebhookConfiguration"].GetName(), metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(mutating.Annotations).To(HaveKeyWithValue("cert-manager.io/inject-ca-from",
			rendered["MutatingWebhookConfiguration"].GetAnnotations()["cert-manager.io/inject-ca-from"]))
		g.Expect(mutating.Webhooks).NotTo(BeEmpty())
		for _, w := range mutating.Webhooks {
			g.Expect(w.ClientConfig.CABundle).To(Equal(ca), "mutating webhook %s", w.Name)
		}
		validating, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, rendered["ValidatingWebhookConfiguration"].GetName(), metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(validating.Annotations).To(HaveKeyWithValue("cert-manager.io/inject-ca-from",
			rendered["ValidatingWebhookConfiguration"].GetAnnotations()["cert-manager.io/inject-ca-from"]))
		g.Expect(validating.Webhooks).NotTo(BeEmpty())
		for _, w := range validating.Webhooks {
			g.Expect(w.ClientConfig.CABundle).To(Equal(ca), "validating webhook %s", w.Name)
		}
	}).WithTimeout(time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())

	// The manager serves exactly that certificate, and it verifies against the injected CA for the
	// address the webhook configurations name.
	roots := x509.NewCertPool()
	g.Expect(roots.AppendCertsFromPEM(ca)).To(BeTrue())
	conn, err := tls.Dial("tcp", "127.0.0.1:19443", &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12})
	g.Expect(err).NotTo(HaveOccurred(), "the webhook's certificate does not verify against the injected CA")
	served := conn.ConnectionState().PeerCertificates[0]
	_ = conn.Close()
	g.Expect(served.Raw).To(Equal(leaf.Raw), "the webhook serves another certificate than cert-manager's")

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
	deleteNamespaceTimed(t, proof)
}
