// Command certmanager runs the parts of cert-manager that wavegate's config/default relies on, for
// wavegate's local cluster (test/tools/dev/certmanager.sh): the certificate controllers with the
// selfSigned and CA issuers, and the CA injector for webhook configurations. It is built from the
// pinned cert-manager module into the user cache by test/tools/control-plane.sh. cert-manager's own
// commands (cmd/controller, cmd/cainjector) are separate modules the Go module proxy does not
// serve, so this small main wires the root module's public controller packages itself; none of
// cert-manager's code lives here.
//
//	certmanager controller --kubeconfig F --metrics-address A --health-address B
//	certmanager cainjector --kubeconfig F --metrics-address A --health-address B
//
// Neither elects a leader: one process of each runs beside one local cluster.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	kscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	cmscheme "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/scheme"
	"github.com/cert-manager/cert-manager/pkg/controller"
	"github.com/cert-manager/cert-manager/pkg/controller/cainjector"
	crapprover "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	crca "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	crselfsigned "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	"github.com/cert-manager/cert-manager/pkg/controller/issuers"
	cmhealthz "github.com/cert-manager/cert-manager/pkg/healthz"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca" // the issuer kinds the issuers controller sets up
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
)

// controllers are the cert-manager controllers an Issuer and a Certificate of the selfSigned or CA
// kind need, by the names their packages register: the Certificate lifecycle (trigger, private
// key, request, issuing into the Secret, Ready condition), approving and signing its
// CertificateRequests, and the Issuer's Ready condition.
var controllers = []string{
	trigger.ControllerName, keymanager.ControllerName, requestmanager.ControllerName,
	issuing.ControllerName, readiness.ControllerName,
	crapprover.ControllerName, crselfsigned.CRControllerName, crca.CRControllerName,
	issuers.ControllerName,
}

func main() {
	if len(os.Args) < 2 || (os.Args[1] != "controller" && os.Args[1] != "cainjector") {
		fmt.Fprintln(os.Stderr, "usage: certmanager controller|cainjector --kubeconfig FILE [--metrics-address ADDR] [--health-address ADDR] [-v N]")
		os.Exit(2)
	}
	cmd := os.Args[1]
	fs := flag.NewFlagSet(cmd, flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the cluster")
	metrics := fs.String("metrics-address", "127.0.0.1:9402", "address of the Prometheus metrics endpoint")
	health := fs.String("health-address", "127.0.0.1:9403", "address of the health endpoint (/livez for the controller, /healthz for cainjector)")
	workers := fs.Int("workers", 5, "controller: workers per controller")
	klog.InitFlags(fs)
	_ = fs.Parse(os.Args[2:])

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx = logf.NewContext(ctx, logf.Log)
	var err error
	if cmd == "controller" {
		err = runController(ctx, *kubeconfig, *metrics, *health, *workers)
	} else {
		err = runCAInjector(ctx, *kubeconfig, *metrics, *health)
	}
	if err != nil {
		logf.Log.Error(err, "exiting", "command", cmd)
		klog.Flush()
		os.Exit(1)
	}
}

// runController starts the controllers above, on shared informers, with cert-manager's defaults
// for everything an ACME, Vault or Venafi issuer would need (unused here).
func runController(ctx context.Context, kubeconfig, metricsAddr, healthAddr string, workers int) error {
	factory, err := controller.NewContextFactory(ctx, controller.ContextOptions{
		Kubeconfig:         kubeconfig,
		KubernetesAPIQPS:   20,
		KubernetesAPIBurst: 50,
		IssuerOptions:      controller.IssuerOptions{ClusterResourceNamespace: "kube-system"},
		CertificateOptions: controller.CertificateOptions{
			CopiedAnnotationPrefixes:                 []string{"*", "-kubectl.kubernetes.io/", "-fluxcd.io/", "-argocd.argoproj.io/"},
			CertificateRequestMinimumBackoffDuration: time.Hour,
		},
	})
	if err != nil {
		return err
	}
	base, err := factory.Build()
	if err != nil {
		return err
	}
	g, ctx := errgroup.WithContext(ctx)

	metricsLn, err := listen(ctx, metricsAddr)
	if err != nil {
		return err
	}
	base.Metrics.SetupCertificateCollector(base.SharedInformerFactory.Certmanager().V1().Certificates().Lister())
	base.Metrics.SetupIssuerCollector(base.SharedInformerFactory.Certmanager().V1().Issuers().Lister())
	serve(ctx, g, base.Metrics.NewServer(metricsLn), metricsLn)
	healthLn, err := listen(ctx, healthAddr)
	if err != nil {
		return err
	}
	g.Go(func() error { return cmhealthz.NewServer(20*time.Second).Start(ctx, healthLn) })

	for _, name := range controllers {
		newController, ok := controller.Known()[name]
		if !ok {
			return fmt.Errorf("controller %s is not registered", name)
		}
		c, err := newController(factory)
		if err != nil {
			return fmt.Errorf("controller %s: %w", name, err)
		}
		logf.Log.Info("starting controller", "controller", name)
		g.Go(func() error { return c.Run(workers, ctx) })
	}
	// The controllers registered their informers above: start them.
	base.SharedInformerFactory.Start(ctx.Done())
	base.KubeSharedInformerFactory.Start(ctx.Done())
	err = g.Wait()
	base.KubeSharedInformerFactory.Shutdown()
	base.SharedInformerFactory.Shutdown()
	return err
}

// runCAInjector injects CAs into Mutating- and ValidatingWebhookConfigurations annotated with
// cert-manager.io/inject-ca-from (a Certificate's Secret) or inject-ca-from-secret.
func runCAInjector(ctx context.Context, kubeconfig, metricsAddr, healthAddr string) error {
	ctrl.SetLogger(logf.Log)
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cfg.UserAgent = "cert-manager-cainjector"
	scheme := runtime.NewScheme()
	utilruntime.Must(kscheme.AddToScheme(scheme))
	utilruntime.Must(cmscheme.AddToScheme(scheme))
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: scheme,
		// Secrets are read directly and watched as metadata only, as upstream's cainjector does.
		Client:                 client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
		Metrics:                metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress: healthAddr,
	})
	if err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	err = cainjector.RegisterAllInjectors(ctx, mgr, cainjector.SetupOptions{
		EnableCertificatesDataSource: true,
		EnabledReconcilersFor: map[string]bool{
			cainjector.MutatingWebhookConfigurationName:   true,
			cainjector.ValidatingWebhookConfigurationName: true,
		},
	})
	if err != nil {
		return err
	}
	return mgr.Start(ctx)
}

func listen(ctx context.Context, addr string) (net.Listener, error) {
	var lc net.ListenConfig
	return lc.Listen(ctx, "tcp", addr)
}

// serve runs srv on ln until ctx ends.
func serve(ctx context.Context, g *errgroup.Group, srv *http.Server, ln net.Listener) {
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	g.Go(func() error {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return srv.Shutdown(shutdown)
	})
}
