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
//
// A pod being deleted (its Job deleted, an eviction, a namespace deletion) ends as on a kubelet:
// its process gets SIGTERM, and SIGKILL after the pod's grace period; its exit is reported (a
// terminal phase, the exit code, 128 + the signal for a process a signal ended), keeping the
// conditions others wrote (an eviction's DisruptionTarget, which the Job controller's pod failure
// policy reads); then the pod is deleted for good. kwok's own pod-delete stage leaves these pods
// to it (kwokctl-config.sh): it would remove them at once, before any exit is reported.
package main

import (
	"context"
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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
	// running are the pods whose process was started, by namespace/name and UID; stop ends the
	// process of a pod being deleted (execute then reports its exit and removes the pod).
	running map[string]*process
}

type process struct {
	uid  types.UID
	stop context.CancelFunc
	// grace is the deleting pod's grace period, read when stop is called: the process gets SIGKILL
	// that long after SIGTERM.
	grace time.Duration
	// exited: the process ended and its exit was reported; a deletion now only removes the pod.
	exited bool
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
	r := &runner{cs: cs, admin: admin, binary: binary, kubectl: kubectl, logs: logs, running: map[string]*process{}}
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
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: handle, UpdateFunc: func(_, o any) { handle(o) },
			DeleteFunc: func(o any) {
				if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
					o = d.Obj
				}
				if p, ok := o.(*corev1.Pod); ok {
					r.forget(p)
				}
			}}); err != nil {
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
	proc := r.running[key]
	if proc != nil && proc.uid != p.UID {
		proc = nil // an earlier pod of the same name
	}
	terminal := p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
	switch {
	case p.Spec.NodeName == "":
	case p.DeletionTimestamp != nil && proc != nil && !proc.exited:
		// SIGTERM, and SIGKILL after the grace period; execute reports the exit, then the pod goes.
		proc.grace = terminationGrace(p)
		proc.stop()
	case p.DeletionTimestamp != nil && proc == nil && !terminal:
		// Deleted before it started here (or while podrunner was down): a kubelet reports it
		// failed, then removes it. A Job's pod failure policy counts a pod only in a terminal phase.
		go r.finish(ctx, p, true)
	case p.DeletionTimestamp != nil:
		go r.remove(ctx, p) // its exit was reported: removed at once
	case proc == nil && p.Status.Phase == corev1.PodRunning:
		// Running, but no process here: podrunner restarted. The process is lost (a kubelet would
		// still have it): it is reported failed, and its Job replaces it.
		r.running[key] = &process{uid: p.UID, stop: func() {}, exited: true}
		go r.finish(ctx, p, false)
	case proc == nil && p.Status.Phase == corev1.PodPending:
		pctx, stop := context.WithCancel(ctx)
		proc = &process{uid: p.UID, stop: stop}
		r.running[key] = proc
		go func() {
			defer stop()
			reported, err := r.execute(ctx, pctx, proc, p)
			if err != nil {
				fmt.Fprintf(os.Stderr, "podrunner: %s: %v\n", key, err)
			}
			r.mu.Lock()
			proc.exited = true
			r.mu.Unlock()
			switch {
			case ctx.Err() != nil:
			case pctx.Err() != nil && reported:
				r.remove(ctx, p) // stopped because the pod is being deleted: its exit is reported
			case pctx.Err() != nil || !reported:
				r.finish(ctx, p, pctx.Err() != nil) // it never ran, or its exit could not be reported
			}
		}()
	}
}

// terminationGrace is how long a kubelet lets a deleted pod's containers stop before SIGKILL: the
// grace period of the deletion, at least 2 s.
func terminationGrace(p *corev1.Pod) time.Duration {
	grace := int64(corev1.DefaultTerminationGracePeriodSeconds)
	if p.DeletionGracePeriodSeconds != nil {
		grace = *p.DeletionGracePeriodSeconds
	} else if p.Spec.TerminationGracePeriodSeconds != nil {
		grace = *p.Spec.TerminationGracePeriodSeconds
	}
	return max(time.Duration(grace)*time.Second, 2*time.Second)
}

// finish reports a pod whose container is lost or never ran failed, as a kubelet does (exit 137,
// ContainerStatusUnknown), and removes it if it is being deleted.
func (r *runner) finish(ctx context.Context, p *corev1.Pod, deleting bool) {
	now := metav1.Now()
	if err := r.status(ctx, p, corev1.PodFailed, corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: 137, Reason: "ContainerStatusUnknown", Message: "The container could not be located when the pod was terminated",
		StartedAt: now, FinishedAt: now}}); err != nil {
		fmt.Fprintf(os.Stderr, "podrunner: %s/%s: %v\n", p.Namespace, p.Name, err)
	}
	if deleting {
		r.remove(ctx, p)
	}
}

// forget drops a pod that is gone.
func (r *runner) forget(p *corev1.Pod) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if proc := r.running[p.Namespace+"/"+p.Name]; proc != nil && proc.uid == p.UID {
		proc.stop()
		delete(r.running, p.Namespace+"/"+p.Name)
	}
}

// remove deletes a pod being deleted for good (grace period 0), as a kubelet does once its
// containers have stopped; the Job controller's finalizer may keep it a moment longer.
func (r *runner) remove(ctx context.Context, p *corev1.Pod) {
	err := r.cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64(0)),
		Preconditions: &metav1.Preconditions{UID: &p.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		fmt.Fprintf(os.Stderr, "podrunner: removing %s/%s: %v\n", p.Namespace, p.Name, err)
	}
}

// execute runs a pod's process until it exits, or until pctx ends (the pod is being deleted: its
// process group gets SIGTERM, and SIGKILL after the deletion's grace period), and reports its exit
// (reported: the terminal status was written). Nothing is reported once ctx ends (podrunner
// stops).
func (r *runner) execute(ctx, pctx context.Context, proc *process, p *corev1.Pod) (reported bool, err error) {
	c := p.Spec.Containers[0]
	started := metav1.Now()
	if err := r.status(ctx, p, corev1.PodRunning, corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}); err != nil {
		return false, err
	}
	kubeconfig, err := r.podKubeconfig(ctx, p)
	if err != nil {
		return false, err
	}
	defer os.Remove(kubeconfig)
	logPath := filepath.Join(r.logs, p.Namespace+"_"+p.Name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return false, err
	}
	defer logFile.Close()
	argv := append(append([]string{}, c.Command...), c.Args...)
	name := r.binary
	env := append(os.Environ(), "KUBECONFIG="+kubeconfig)
	if p.Labels[execLabel] == "true" {
		if len(argv) == 0 {
			return false, fmt.Errorf("pod %s/%s has no command to run", p.Namespace, p.Name)
		}
		if argv[0] == "kubectl" {
			argv[0] = r.kubectl
		}
		name, argv = argv[0], argv[1:]
		env = append(env, "PATH="+filepath.Dir(r.kubectl)+string(os.PathListSeparator)+os.Getenv("PATH"),
			"KUBECACHEDIR="+filepath.Join(r.logs, "kube-cache"))
	}
	cmd := exec.CommandContext(pctx, name, argv...)
	// The container is the process group: a shell's children stop with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		r.mu.Lock()
		grace := proc.grace
		r.mu.Unlock()
		pgid := cmd.Process.Pid
		time.AfterFunc(grace, func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) })
		return syscall.Kill(-pgid, syscall.SIGTERM)
	}
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logFile, logFile
	err = cmd.Run()
	finished := metav1.Now()
	if cmd.ProcessState == nil {
		return false, err // it never started
	}
	if !nextRelist(ctx) {
		return false, nil // podrunner stops
	}
	// The exit code is the process's own, also when it exited after SIGTERM (Run then returns the
	// context's error); 128 + the signal for a process a signal ended.
	code := cmd.ProcessState.ExitCode()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	phase, reason := corev1.PodSucceeded, "Completed"
	if code != 0 {
		phase, reason = corev1.PodFailed, "Error"
	}
	if err := r.status(ctx, p, phase, corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: int32(code), Reason: reason, StartedAt: started, FinishedAt: finished}}); err != nil {
		return false, err
	}
	return true, nil
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
		// A kubelet owns these conditions and keeps the others (PodScheduled, an eviction's
		// DisruptionTarget).
		conds := []corev1.PodCondition{{Type: corev1.PodReady, Status: ready, LastTransitionTime: now},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now}}
		for _, c := range cur.Status.Conditions {
			if c.Type != corev1.PodReady && c.Type != corev1.PodInitialized {
				conds = append(conds, c)
			}
		}
		cur.Status.Conditions = conds
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
