// Package framework runs wavegate's integration tests against a real kube-apiserver and etcd
// (built from Go modules by `make envtest-assets`), with wavegate's CRDs and the webhook
// configuration rendered from config/ exactly as it is installed.
package framework

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/manager"
)

// WavegateNamespace is wavegate's own namespace in tests.
const WavegateNamespace = "wavegate-system"

// Env is a running API server with wavegate's configuration installed.
type Env struct {
	env    *envtest.Environment
	Config *rest.Config
	Client client.Client
	// ManagerTransport, when set before StartManager, wraps the transport of every request the
	// manager makes (a test that times something into a reconcile's window), and only the manager's.
	ManagerTransport func(http.RoundTripper) http.RoundTripper
	// SettleMax, when set before StartManager, is the manager's bound on a settle (manager.Config).
	SettleMax time.Duration
}

// RepoRoot returns the directory holding go.mod.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found above the working directory")
		}
		dir = parent
	}
}

// Start starts etcd and kube-apiserver from KUBEBUILDER_ASSETS and installs wavegate's CRDs and
// webhook configuration.
func Start() (*Env, error) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		return nil, errors.New("KUBEBUILDER_ASSETS is not set: run the tests with `make test`, which builds kube-apiserver and etcd")
	}
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(os.Stderr), zap.Level(zapLevel())))
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	hooks, validating, err := RenderWebhooks(filepath.Join(root, "config", "webhook"))
	if err != nil {
		return nil, err
	}
	e := &Env{env: &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(root, "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		WebhookInstallOptions: envtest.WebhookInstallOptions{MutatingWebhooks: hooks, ValidatingWebhooks: validating},
	}}
	if e.Config, err = e.env.Start(); err != nil {
		return nil, fmt.Errorf("starting the API server: %w", err)
	}
	e.Config.QPS, e.Config.Burst = 200, 400
	if e.Client, err = client.New(e.Config, client.Options{Scheme: manager.Scheme()}); err != nil {
		return nil, err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: WavegateNamespace, Labels: map[string]string{keys.SystemLabel: "true"}}}
	if err := e.Client.Create(context.Background(), ns); err != nil {
		return nil, err
	}
	// The admission policies: the admitted label's (config/webhook) and the manager's writes'
	// (config/rbac).
	var policies []*unstructured.Unstructured
	for _, dir := range []string{"webhook", "rbac"} {
		ps, err := RenderPolicies(filepath.Join(root, "config", dir))
		if err != nil {
			return nil, err
		}
		policies = append(policies, ps...)
	}
	for _, p := range policies {
		if err := e.Client.Create(context.Background(), p); err != nil {
			return nil, fmt.Errorf("installing %s %s: %w", p.GetKind(), p.GetName(), err)
		}
	}
	return e, nil
}

// zapLevel is errors only, unless WAVEGATE_TEST_LOG_LEVEL asks for a verbosity (0 = info).
func zapLevel() zapcore.Level {
	if v, err := strconv.Atoi(os.Getenv("WAVEGATE_TEST_LOG_LEVEL")); err == nil {
		return zapcore.Level(-v)
	}
	return zapcore.ErrorLevel
}

// Stop stops the API server and etcd.
func (e *Env) Stop() error { return e.env.Stop() }

// WebhookOptions returns where the API server expects the webhook and the CA it trusts.
func (e *Env) WebhookOptions() envtest.WebhookInstallOptions { return e.env.WebhookInstallOptions }

// RenderPolicies renders a kustomization and returns its ValidatingAdmissionPolicies and their
// bindings.
func RenderPolicies(dir string) ([]*unstructured.Unstructured, error) {
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("rendering %s: %w", dir, err)
	}
	var out []*unstructured.Unstructured
	for _, r := range m.Resources() {
		if k := r.GetKind(); k != "ValidatingAdmissionPolicy" && k != "ValidatingAdmissionPolicyBinding" {
			continue
		}
		o, err := r.Map()
		if err != nil {
			return nil, err
		}
		out = append(out, &unstructured.Unstructured{Object: o})
	}
	return out, nil
}

// RenderWebhooks renders a kustomization and returns its webhook configurations.
func RenderWebhooks(dir string) ([]*admissionregistrationv1.MutatingWebhookConfiguration, []*admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, nil, fmt.Errorf("rendering %s: %w", dir, err)
	}
	var mutating []*admissionregistrationv1.MutatingWebhookConfiguration
	var validating []*admissionregistrationv1.ValidatingWebhookConfiguration
	for _, r := range m.Resources() {
		b, err := r.AsYAML()
		if err != nil {
			return nil, nil, err
		}
		switch r.GetKind() {
		case "MutatingWebhookConfiguration":
			h := &admissionregistrationv1.MutatingWebhookConfiguration{}
			if err := yaml.UnmarshalStrict(b, h); err != nil {
				return nil, nil, fmt.Errorf("decoding the rendered webhook configuration: %w", err)
			}
			mutating = append(mutating, h)
		case "ValidatingWebhookConfiguration":
			h := &admissionregistrationv1.ValidatingWebhookConfiguration{}
			if err := yaml.UnmarshalStrict(b, h); err != nil {
				return nil, nil, fmt.Errorf("decoding the rendered webhook configuration: %w", err)
			}
			validating = append(validating, h)
		}
	}
	if len(mutating) == 0 {
		return nil, nil, fmt.Errorf("%s renders no MutatingWebhookConfiguration", dir)
	}
	return mutating, validating, nil
}

// Manager is a running wavegate manager.
type Manager struct {
	ctrl.Manager
	Wavegate *manager.Wavegate
	cancel   context.CancelFunc
	done     chan error
	stopOnce sync.Once
	exited   atomic.Bool
}

// StartManager starts a wavegate manager against the environment, serving the webhook where the
// API server calls it, and returns once the webhook serves and the policies are loaded.
func (e *Env) StartManager(ctx context.Context) (*Manager, error) {
	o := e.env.WebhookInstallOptions
	cfg := manager.Config{
		WebhookConfigurationName: e.env.WebhookInstallOptions.MutatingWebhooks[0].Name,
		Namespace:                WavegateNamespace,
		WaiterImage:              "wavegate:test",
		SettleMax:                e.SettleMax,
	}
	restCfg := e.Config
	if e.ManagerTransport != nil {
		restCfg = rest.CopyConfig(e.Config)
		restCfg.Wrap(e.ManagerTransport)
	}
	mgr, err := ctrl.NewManager(restCfg, ctrl.Options{
		Scheme:                 manager.Scheme(),
		Cache:                  manager.CacheOptions(cfg),
		Controller:             ctrlconfig.Controller{SkipNameValidation: ptr.To(true)},
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		WebhookServer: webhook.NewServer(webhook.Options{
			Host: o.LocalServingHost, Port: o.LocalServingPort, CertDir: o.LocalServingCertDir,
		}),
	})
	if err != nil {
		return nil, err
	}
	wg, err := manager.Setup(mgr, cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	m := &Manager{Manager: mgr, Wavegate: wg, cancel: cancel, done: make(chan error, 1)}
	go func() { m.done <- mgr.Start(ctx) }()
	running := m.done
	m.done = make(chan error, 1)
	go func() { err := <-running; m.done <- err; m.exited.Store(true) }()

	addr := net.JoinHostPort(o.LocalServingHost, strconv.Itoa(o.LocalServingPort))
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		if m.exited.Load() {
			return false, errors.New("the manager stopped before serving")
		}
		conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // a readiness probe of our own server
		if err != nil {
			return false, nil
		}
		_ = conn.Close()
		return wg.Ready(), nil
	})
	if err != nil {
		m.Stop()
		return nil, fmt.Errorf("waiting for the webhook to serve: %w", err)
	}
	return m, nil
}

// Stop stops the manager and waits for it to exit. It may be called more than once.
func (m *Manager) Stop() {
	m.stopOnce.Do(func() {
		m.cancel()
		<-m.done
	})
}

// WebhookURL returns the URL the API server uses for the webhook at path, and a TLS config that
// trusts its certificate, so that tests can send their own AdmissionReviews.
func (e *Env) WebhookURL(path string) (string, *tls.Config) {
	o := e.env.WebhookInstallOptions
	pool := x509Pool(o.LocalServingCAData)
	return "https://" + net.JoinHostPort(o.LocalServingHost, strconv.Itoa(o.LocalServingPort)) + path,
		&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
}

// ContainsAll reports whether every entry of want is in got.
func ContainsAll(got, want map[string]string) bool {
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			return false
		}
	}
	return true
}

// RunSuite is a TestMain body: it starts the API server, runs beforeManager (CRDs the manager must
// discover at start, say), starts a wavegate manager, runs afterManager (helpers that need both;
// the function it returns stops them first), then the tests, and stops everything. It fills *env
// and *mgr; a test may replace *mgr (a restart) and it is still stopped.
func RunSuite(m *testing.M, env **Env, mgr **Manager, beforeManager func() error, afterManager func() (func(), error)) int {
	var err error
	if *env, err = Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = (*env).Stop() }()
	if beforeManager != nil {
		if err := beforeManager(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	if *mgr, err = (*env).StartManager(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { (*mgr).Stop() }()
	if afterManager != nil {
		stop, err := afterManager()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer stop()
	}
	return m.Run()
}
