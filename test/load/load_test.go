// Package load is a bounded, loopback-only load generator for wavegate's webhook server: it sends
// AdmissionReviews over TLS at a fixed rate (open loop: requests are sent on schedule whatever the
// latency) and reports latency percentiles. Run with `make bench-webhook`.
package load

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"wavegate.io/wavegate/pkg/mutate"
	"wavegate.io/wavegate/pkg/policy"
)

// review is a CREATE of a realistic Deployment (the same shape as pkg/mutate's benchmark).
const review = `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"apps","version":"v1","kind":"Deployment"},` +
	`"resource":{"group":"apps","version":"v1","resource":"deployments"},"namespace":"shop","operation":"CREATE","userInfo":{"username":"u"},` +
	`"object":{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"shop","labels":{"app.kubernetes.io/name":"web",` +
	`"wavegate.io/group":"web","wavegate.io/group-order":"3","wavegate.io/order":"2"}},"spec":{"replicas":2,"selector":{"matchLabels":{"app":"web"}},` +
	`"template":{"metadata":{"labels":{"app":"web"}},"spec":{"containers":[{"name":"web","image":"registry.example.com/shop/web:v1.42.7",` +
	`"args":["--listen=:8080","--db=postgres://db:5432/shop"],"ports":[{"containerPort":8080}],"resources":{"requests":{"cpu":"100m","memory":"128Mi"}},` +
	`"env":[{"name":"A","value":"1"},{"name":"B","value":"2"},{"name":"C","value":"3"},{"name":"D","value":"4"}]}]}}}}}}`

func selfSigned(b *testing.B, dir string) *x509.CertPool {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "load"}, NotBefore: time.Now().Add(-time.Minute),
		NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		b.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	_ = os.WriteFile(filepath.Join(dir, "tls.crt"), certPEM, 0o600)
	_ = os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	return pool
}

// serve starts wavegate's webhook server (TLS 1.2+, HTTP/1.1 as in production) on loopback.
func serve(b *testing.B) (string, *http.Client) {
	dir := b.TempDir()
	pool := selfSigned(b, dir)
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	srv := webhook.NewServer(webhook.Options{Host: "127.0.0.1", Port: port, CertDir: dir, TLSOpts: []func(*tls.Config){
		func(c *tls.Config) { c.NextProtos = []string{"http/1.1"}; c.MinVersion = tls.VersionTLS12 }}})
	idx := policy.Compile(nil)
	srv.Register(mutate.Path, &mutate.Server{Policies: policy.NewStaticStore(idx)})
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	go func() { _ = srv.Start(ctx) }()
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, MaxIdleConnsPerHost: 100}}
	url := fmt.Sprintf("https://127.0.0.1:%d%s", port, mutate.Path)
	for i := 0; ; i++ {
		if resp, err := hc.Post(url, "application/json", bytes.NewBufferString(review)); err == nil {
			resp.Body.Close()
			break
		}
		if i > 200 {
			b.Fatal("the webhook server did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return url, hc
}

// load sends n requests at rate per second and returns their latencies and the failures.
func load(b *testing.B, url string, hc *http.Client, rate, n int) ([]time.Duration, int) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	lat := make([]time.Duration, 0, n)
	failed := 0
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	for i := range n {
		time.Sleep(time.Until(start.Add(time.Duration(i) * interval))) // the schedule, not the last response, sets the pace
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			resp, err := hc.Post(url, "application/json", bytes.NewBufferString(review))
			d := time.Since(t0)
			mu.Lock()
			defer mu.Unlock()
			if err != nil || resp.StatusCode != http.StatusOK {
				failed++
			} else {
				lat = append(lat, d)
			}
			if resp != nil {
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	return lat, failed
}

func pct(d []time.Duration, p float64) float64 {
	s := slices.Clone(d)
	slices.Sort(s)
	return float64(s[int(float64(len(s)-1)*p)].Microseconds()) / 1000
}

// BenchmarkTLSLoad: 200 reviews/s sustained for 15 s, and a 1,000/s burst for 3 s. b.N is unused:
// one iteration is one bounded run; run with -benchtime 1x.
func BenchmarkTLSLoad(b *testing.B) {
	url, hc := serve(b)
	for _, c := range []struct {
		name    string
		rate, n int
	}{{"sustained-200rps", 200, 3000}, {"burst-1000rps", 1000, 3000}} {
		b.Run(c.name, func(b *testing.B) {
			var lat []time.Duration
			failed := 0
			for range b.N {
				l, f := load(b, url, hc, c.rate, c.n)
				lat, failed = append(lat, l...), failed+f
			}
			b.ReportMetric(pct(lat, 0.5), "p50-ms")
			b.ReportMetric(pct(lat, 0.99), "p99-ms")
			b.ReportMetric(float64(failed), "failed")
			b.ReportMetric(0, "ns/op")
		})
	}
}
