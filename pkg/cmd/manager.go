package cmd

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"wavegate.io/wavegate/certs"
	"wavegate.io/wavegate/pkg/manager"
)

type managerOptions struct {
	metricsAddr   string
	probeAddr     string
	pprofAddr     string
	webhookPort   int
	certDir       string
	leaderElect   bool
	secureMetrics bool
	enableHTTP2   bool
	qps           float32
	burst         int
	webhookHost   string
	certMode      string
	certDNSNames  []string
	certIPs       []net.IP
	wavegate      manager.Config
	zap           zap.Options
}

func newManagerCommand() *cobra.Command {
	o := managerOptions{zap: zap.Options{Development: false}}
	c := &cobra.Command{
		Use:   "manager",
		Short: "Run the admission webhook and the controllers",
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctrl.SetLogger(zap.New(zap.UseFlagOptions(&o.zap)))
			return runManager(cmd, o)
		},
	}
	f := c.Flags()
	f.StringVar(&o.metricsAddr, "metrics-bind-address", ":8443", "address of the metrics endpoint; 0 disables it")
	f.BoolVar(&o.secureMetrics, "metrics-secure", true, "serve metrics over HTTPS with authentication and authorization")
	f.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "address of the health and readiness probes")
	f.StringVar(&o.pprofAddr, "pprof-bind-address", "0", "address of Go's /debug/pprof endpoints (profiling); 0 disables them")
	f.IntVar(&o.webhookPort, "webhook-port", 9443, "port of the admission webhook server")
	f.StringVar(&o.certDir, "webhook-cert-dir", "", "directory holding tls.crt and tls.key (default: controller-runtime's)")
	f.BoolVar(&o.leaderElect, "leader-elect", true, "elect a leader for the controllers; every replica serves the webhook")
	f.StringVar(&o.wavegate.WebhookConfigurationName, "webhook-configuration-name", manager.DefaultWebhookConfigurationName,
		"wavegate's MutatingWebhookConfiguration, whose entries for policy group labels the manager maintains")
	f.StringVar(&o.wavegate.Namespace, "namespace", envOr("POD_NAMESPACE", "wavegate-system"), "wavegate's namespace")
	f.StringVar(&o.wavegate.WaiterImage, "waiter-image", envOr("WAVEGATE_IMAGE", "wavegate:latest"),
		"the image wait Jobs run: wavegate's own image")
	f.Float32Var(&o.qps, "kube-api-qps", 100, "queries per second to the API server (ungating 100 pods is 100 patches)")
	f.IntVar(&o.burst, "kube-api-burst", 200, "burst of queries to the API server")
	f.StringVar(&o.webhookHost, "webhook-host", "", "address the webhook server binds (default: every interface)")
	f.StringVar(&o.certMode, "cert-mode", "cert-manager", "where the webhook certificate comes from: cert-manager (files mounted "+
		"from a Secret cert-manager issues, CA injected by its cainjector) or self-managed (wavegate issues, injects and rotates it)")
	f.StringSliceVar(&o.certDNSNames, "cert-dns-names", nil, "self-managed: DNS names of the serving certificate "+
		"(default: the webhook Service's names in --namespace)")
	f.IPSliceVar(&o.certIPs, "cert-ips", nil, "self-managed: IP addresses of the serving certificate (127.0.0.1 for a local webhook)")
	f.BoolVar(&o.enableHTTP2, "enable-http2", false, "serve HTTP/2 (off: CVE-2023-44487 and CVE-2023-39325)")
	zapFlags := flag.NewFlagSet("zap", flag.ContinueOnError)
	o.zap.BindFlags(zapFlags)
	f.AddGoFlagSet(zapFlags)
	return c
}

func runManager(cmd *cobra.Command, o managerOptions) error {
	var tlsOpts []func(*tls.Config)
	if !o.enableHTTP2 {
		tlsOpts = append(tlsOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}
	tlsOpts = append(tlsOpts, func(c *tls.Config) { c.MinVersion = tls.VersionTLS12 })
	metrics := metricsserver.Options{BindAddress: o.metricsAddr, SecureServing: o.secureMetrics, TLSOpts: tlsOpts}
	if o.secureMetrics {
		metrics.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading the kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = o.qps, o.burst
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 manager.Scheme(),
		Cache:                  manager.CacheOptions(o.wavegate),
		Metrics:                metrics,
		HealthProbeBindAddress: o.probeAddr,
		PprofBindAddress:       o.pprofAddr,
		LeaderElection:         o.leaderElect,
		LeaderElectionID:       "wavegate.io",
		WebhookServer: webhook.NewServer(webhook.Options{
			Host: o.webhookHost, Port: o.webhookPort, CertDir: o.certDir, TLSOpts: tlsOpts,
		}),
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	if _, err := manager.Setup(mgr, o.wavegate); err != nil {
		return err
	}
	switch o.certMode {
	case "cert-manager":
	case "self-managed":
		if err := selfManagedCerts(cmd.Context(), cfg, mgr, o); err != nil {
			return err
		}
	default:
		return fmt.Errorf("--cert-mode %q: use cert-manager or self-managed", o.certMode)
	}
	return mgr.Start(cmd.Context())
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// selfManagedCerts issues the first certificate before the webhook server starts (it needs the
// files), then keeps rotating it as a runnable.
func selfManagedCerts(ctx context.Context, cfg *rest.Config, mgr ctrl.Manager, o managerOptions) error {
	dir := o.certDir
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "k8s-webhook-server", "serving-certs")
	}
	names := o.certDNSNames
	if len(names) == 0 && len(o.certIPs) == 0 {
		svc := "wavegate-webhook-service"
		names = []string{svc + "." + o.wavegate.Namespace + ".svc", svc + "." + o.wavegate.Namespace + ".svc.cluster.local"}
	}
	sm := &certs.SelfManaged{
		Client: kubernetes.NewForConfigOrDie(cfg), Namespace: o.wavegate.Namespace, Secret: "wavegate-webhook-certs",
		CertDir: dir, DNSNames: names, IPs: o.certIPs,
		MutatingWebhooks:   []string{o.wavegate.WebhookConfigurationName},
		ValidatingWebhooks: []string{manager.ValidatingName(o.wavegate.WebhookConfigurationName)},
	}
	if err := sm.Issue(ctx, 2*time.Minute); err != nil {
		return fmt.Errorf("issuing the webhook certificate: %w", err)
	}
	return mgr.Add(sm)
}
