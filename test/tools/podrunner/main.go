// Command podrunner executes wavegate's wait-Job pods in the local kwok cluster. kwok simulates
// every other pod; wait-Job pods are excluded from its stages, and podrunner plays their kubelet:
// it runs the pod's `wavegate wait ...` arguments with the wavegate binary, authenticated as the
// pod's service account (a bound token from the TokenRequest API), writes the output to a log
// file, and reports the pod's phase and exit code, so the Job controller completes or fails the
// Job exactly as on a real node.
//
// Pods labeled dev.wavegate.io/exec=true (excluded from kwok's stages too) are run the same way,
// but with their own command: the first container's command and arguments as a host process, with
// the cache's kubectl first on PATH. That is how the wait Jobs teams write themselves (a kubectl
// image running `kubectl rollout status ...`) really wait on the local cluster.
//
// A container's exit is reported when a kubelet would notice it: at the next relist of its pod
// lifecycle event generator (PLEG), which a kubelet runs every second (genericPlegRelistPeriod;
// the evented PLEG is alpha and off by default). Reporting it at once would make this stand-in
// faster than the kubelet it plays, and anything waiting for a wait-Job pod's exit look faster
// than on a real node.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"wavegate.io/wavegate/pkg/keys"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "admin kubeconfig of the local cluster")
	binary := flag.String("wavegate", "bin/wavegate", "the wavegate binary the pods run")
	kubectl := flag.String("kubectl", "kubectl", "the kubectl binary that pods labeled "+execLabel+"=true find first on PATH")
	logs := flag.String("logs", ".dev/pods", "directory for the pods' logs")
	flag.DurationVar(&plegRelistPeriod, "pleg-relist-period", time.Second, "how often a kubelet relists containers: an exit is reported at the next relist")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *kubeconfig, *binary, *kubectl, *logs); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// plegRelistPeriod is the kubelet's PLEG relist period; relists run at fixed ticks from start.
var (
	plegRelistPeriod = time.Second
	plegStart        = time.Now()
)

// nextRelist waits for the next PLEG relist (false: ctx ended first).
func nextRelist(ctx context.Context) bool {
	if plegRelistPeriod <= 0 {
		return true
	}
	since := time.Since(plegStart)
	wait := plegRelistPeriod - since%plegRelistPeriod
	select {
	case <-ctx.Done():
		return false
	case <-time.After(wait):
		return true
	}
}

// execLabel marks a pod that podrunner runs with its own command (kwokctl-config.sh keeps kwok's
// stages away from it).
const execLabel = "dev.wavegate.io/exec"

type runner struct {
	cs      kubernetes.Interface
	admin   *clientcmdapi.Config
	binary  string
	kubectl string
	logs    string
	mu      sync.Mutex
	running map[string]context.CancelFunc
}

func run(ctx context.Context, kubeconfig, binary, kubectl, logs string) error {
	admin, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	// A kubelet's client limits (kubeAPIQPS 50, kubeAPIBurst 100), not client-go's defaults (5/10),
	// which would make this stand-in slower than the kubelet it plays.
	cfg.QPS, cfg.Burst = 50, 100
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return err
	}
	if kubectl, err = exec.LookPath(kubectl); err != nil {
		return err
	}
	if kubectl, err = filepath.Abs(kubectl); err != nil {
		return err
	}
	r := &runner{cs: cs, admin: admin, binary: binary, kubectl: kubectl, logs: logs, running: map[string]context.CancelFunc{}}
	handle := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok {
			r.handle(ctx, p)
		}
	}
	// Label selectors cannot say "or": one informer per label.
	for _, selector := range []string{keys.WaitJobLabel + "=true", execLabel + "=true"} {
		f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = selector
		}))
		inf := f.Core().V1().Pods().Informer()
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: handle, UpdateFunc: func(_, o any) { handle(o) }}); err != nil {
			return err
		}
		f.Start(ctx.Done())
	}
	fmt.Println("podrunner: running wavegate wait-Job pods and pods labeled " + execLabel + "=true")
	<-ctx.Done()
	return nil
}

func (r *runner) handle(ctx context.Context, p *corev1.Pod) {
	key := p.Namespace + "/" + p.Name
	r.mu.Lock()
	defer r.mu.Unlock()
	if p.DeletionTimestamp != nil {
		if cancel, ok := r.running[key]; ok {
			cancel() // the Job's deadline passed or the Job was deleted: stop like a kubelet would
		}
		return
	}
	if p.Spec.NodeName == "" || p.Status.Phase != corev1.PodPending {
		return
	}
	if _, ok := r.running[key]; ok {
		return
	}
	pctx, cancel := context.WithCancel(ctx)
	r.running[key] = cancel
	go func() {
		defer cancel()
		if err := r.execute(pctx, p); err != nil {
			fmt.Fprintf(os.Stderr, "podrunner: %s: %v\n", key, err)
		}
	}()
}

func (r *runner) execute(ctx context.Context, p *corev1.Pod) error {
	c := p.Spec.Containers[0]
	started := metav1.Now()
	if err := r.status(ctx, p, corev1.PodRunning, corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}); err != nil {
		return err
	}
	kubeconfig, err := r.podKubeconfig(ctx, p)
	if err != nil {
		return err
	}
	defer os.Remove(kubeconfig)
	logPath := filepath.Join(r.logs, p.Namespace+"_"+p.Name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	argv := append(append([]string{}, c.Command...), c.Args...)
	cmd := exec.CommandContext(ctx, r.binary, argv...)
	env := append(os.Environ(), "KUBECONFIG="+kubeconfig)
	if p.Labels[execLabel] == "true" {
		if len(argv) == 0 {
			return fmt.Errorf("pod %s/%s has no command to run", p.Namespace, p.Name)
		}
		if argv[0] == "kubectl" {
			argv[0] = r.kubectl
		}
		cmd = exec.CommandContext(ctx, argv[0], argv[1:]...)
		env = append(env, "PATH="+filepath.Dir(r.kubectl)+string(os.PathListSeparator)+os.Getenv("PATH"),
			"KUBECACHEDIR="+filepath.Join(r.logs, "kube-cache"))
	}
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logFile, logFile
	err = cmd.Run()
	finished := metav1.Now()
	if ctx.Err() != nil || !nextRelist(ctx) {
		return nil // the pod was deleted
	}
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		return err
	}
	phase, reason := corev1.PodSucceeded, "Completed"
	if code != 0 {
		phase, reason = corev1.PodFailed, "Error"
	}
	return r.status(ctx, p, phase, corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: int32(code), Reason: reason, StartedAt: started, FinishedAt: finished}})
}

func (r *runner) status(ctx context.Context, p *corev1.Pod, phase corev1.PodPhase, state corev1.ContainerState) error {
	for range 5 {
		cur, err := r.cs.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		cur.Status.Phase = phase
		ready := corev1.ConditionFalse
		if phase == corev1.PodRunning {
			ready = corev1.ConditionTrue
		}
		cur.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: ready, LastTransitionTime: now},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now}}
		if cur.Status.StartTime == nil {
			cur.Status.StartTime = &now
		}
		cur.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: p.Spec.Containers[0].Name, Image: p.Spec.Containers[0].Image,
			Ready: phase == corev1.PodRunning, State: state}}
		if _, err = r.cs.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("could not update the status of %s/%s", p.Namespace, p.Name)
}

// podKubeconfig writes a kubeconfig that authenticates as the pod's service account.
func (r *runner) podKubeconfig(ctx context.Context, p *corev1.Pod) (string, error) {
	tr, err := r.cs.CoreV1().ServiceAccounts(p.Namespace).CreateToken(ctx, p.Spec.ServiceAccountName, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(3600)),
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID}}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("requesting a token for service account %s/%s: %w", p.Namespace, p.Spec.ServiceAccountName, err)
	}
	ctxName := r.admin.CurrentContext
	cluster := r.admin.Clusters[r.admin.Contexts[ctxName].Cluster]
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = cluster
	cfg.AuthInfos["sa"] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	cfg.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "sa", Namespace: p.Namespace}
	cfg.CurrentContext = "c"
	f, err := os.CreateTemp("", "podrunner-*.kubeconfig")
	if err != nil {
		return "", err
	}
	f.Close()
	return f.Name(), clientcmd.WriteToFile(*cfg, f.Name())
}
