package framework

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"wavegate.io/wavegate/pkg/cmd"
	"wavegate.io/wavegate/pkg/keys"
)

// WaitJobRunner plays kubelet and Job controller for wavegate's wait Jobs in an API server without
// nodes: it runs each new wait Job's `wavegate wait` arguments in-process against the same API
// server, then writes the Job's status from the exit code as the Job controller would: after its
// batch period, and at once when the Job's deadline passed; a waiter that failed is run again
// (at once) as the Job's pod failure policy and backoff limit say. There are no wait-Job pods, so the
// manager acts on the Job's conditions; the release on the waiter pod's exit is proven on the
// local cluster with the real kubelet stand-in and Job controller (test/e2e).
type WaitJobRunner struct {
	clients kubernetes.Interface
	dynamic dynamic.Interface
	cancel  context.CancelFunc

	mu        sync.Mutex
	logs      map[string]*bytes.Buffer
	seen      map[string]bool
	completed map[string]time.Time
	running   map[string]*runningJob // by Job UID
}

// runningJob is a waiter in progress: its start, and its deadline while the Job has one. As the
// Job controller, which reads activeDeadlineSeconds at each sync and counts it from the Job's
// start, the runner follows the Job's deadline: a Job that started ahead of its group's turn is
// given one later, and one whose group closed again loses it until the group reopens.
type runningJob struct {
	started  time.Time
	cancel   context.CancelCauseFunc
	timer    *time.Timer
	deadline *int64
}

// JobControllerBatchPeriod is kube-controller-manager's SyncJobBatchPeriod (v1.36): how long the
// Job controller gathers pod updates before it syncs a Job.
const JobControllerBatchPeriod = time.Second

var errDeadline = errors.New("the Job's activeDeadlineSeconds passed")

// arm sets the deadline clock of a running Job to its current activeDeadlineSeconds, or stops it
// when the Job has none (r.mu held).
func (j *runningJob) arm(d *int64) {
	if ptr.Equal(d, j.deadline) {
		return
	}
	if j.timer != nil {
		j.timer.Stop()
		j.timer = nil
	}
	j.deadline = nil
	if d == nil {
		return
	}
	j.deadline = ptr.To(*d)
	j.timer = time.AfterFunc(time.Until(j.started.Add(time.Duration(*d)*time.Second)), func() { j.cancel(errDeadline) })
}

// CompletedAt returns when the runner wrote a wait Job's final status, or the zero time.
func (r *WaitJobRunner) CompletedAt(namespace, name string) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.completed[namespace+"/"+name]
}

// RunWaitJobs starts the runner; stop it with Stop.
func (e *Env) RunWaitJobs(ctx context.Context) (*WaitJobRunner, error) {
	cs, err := kubernetes.NewForConfig(e.Config)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(e.Config)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	r := &WaitJobRunner{clients: cs, dynamic: dyn, cancel: cancel, logs: map[string]*bytes.Buffer{}, seen: map[string]bool{},
		completed: map[string]time.Time{}, running: map[string]*runningJob{}}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = labels.SelectorFromSet(labels.Set{keys.WaitJobLabel: "true"}).String()
	}))
	inf := f.Batch().V1().Jobs().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { r.start(ctx, obj.(*batchv1.Job)) },
		UpdateFunc: func(_, obj any) {
			job := obj.(*batchv1.Job)
			r.mu.Lock()
			j, ok := r.running[string(job.UID)]
			if ok {
				j.arm(job.Spec.ActiveDeadlineSeconds)
			}
			r.mu.Unlock()
			if !ok {
				r.start(ctx, job) // resumed
			}
		},
	}); err != nil {
		cancel()
		return nil, err
	}
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	return r, nil
}

// Stop stops running Jobs; their waiters end without a status.
func (r *WaitJobRunner) Stop() { r.cancel() }

// Log returns what a wait Job's waiter printed so far.
func (r *WaitJobRunner) Log(namespace, name string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if b, ok := r.logs[namespace+"/"+name]; ok {
		return b.String()
	}
	return ""
}

type lockedBuffer struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (l lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (r *WaitJobRunner) start(ctx context.Context, job *batchv1.Job) {
	key := job.Namespace + "/" + job.Name
	r.mu.Lock()
	// As the Job controller: no pod for a suspended Job (wavegate resumes its wait Jobs once their
	// waiter's access exists).
	if r.seen[string(job.UID)] || len(job.Status.Conditions) > 0 || job.Spec.Suspend != nil && *job.Spec.Suspend {
		r.mu.Unlock()
		return
	}
	r.seen[string(job.UID)] = true
	buf := &bytes.Buffer{}
	r.logs[key] = buf
	started := metav1.Now()
	runCtx, cancel := context.WithCancelCause(ctx)
	run := &runningJob{started: started.Time, cancel: cancel}
	run.arm(job.Spec.ActiveDeadlineSeconds)
	r.running[string(job.UID)] = run
	r.mu.Unlock()
	go func() {
		defer func() {
			r.mu.Lock()
			if run.timer != nil {
				run.timer.Stop()
			}
			delete(r.running, string(job.UID))
			r.mu.Unlock()
			cancel(nil)
		}()
		var code, failures int
		var deadline bool
		reason := batchv1.JobReasonBackoffLimitExceeded
		for {
			c := cmd.NewWaitCommand(func() (dynamic.Interface, error) { return r.dynamic, nil }, lockedBuffer{&r.mu, buf})
			c.SetArgs(job.Spec.Template.Spec.Containers[0].Args[1:])
			c.SilenceErrors, c.SilenceUsage = true, true
			err := c.ExecuteContext(runCtx)
			if ctx.Err() != nil {
				return // the runner stopped: the Job stays running, as it would on a lost node
			}
			code = 0
			if err != nil {
				code = cmd.ExitCode(err)
			}
			deadline = errors.Is(context.Cause(runCtx), errDeadline)
			if code == 0 || deadline {
				break
			}
			// As the Job controller: the pod failure policy's first matching rule decides, else the
			// failure counts toward the backoff limit. The runner retries at once (the Job
			// controller waits 10 s, doubling).
			action := failureAction(job, code)
			if action == batchv1.PodFailurePolicyActionFailJob {
				reason = batchv1.JobReasonPodFailurePolicy
			}
			if action != batchv1.PodFailurePolicyActionIgnore {
				failures++
			}
			if action == batchv1.PodFailurePolicyActionFailJob || failures > int(ptr.Deref(job.Spec.BackoffLimit, 6)) {
				break
			}
			fmt.Fprintf(lockedBuffer{&r.mu, buf}, "runner: the waiter exited %d; running it again\n", code)
		}
		if !deadline {
			// The Job controller batches the updates of a Job's pods: it syncs the Job up to a
			// second after its pod finished (a deadline it acts on at once).
			select {
			case <-time.After(JobControllerBatchPeriod):
			case <-ctx.Done():
				return
			}
		}
		if deadline {
			reason = batchv1.JobReasonDeadlineExceeded
		}
		if uerr := r.finish(ctx, job, started, code, failures, reason); uerr != nil {
			fmt.Fprintf(lockedBuffer{&r.mu, buf}, "runner: writing the Job status: %v\n", uerr)
		}
	}()
}

// failureAction is what a Job's pod failure policy says of a waiter that exited with code: the
// action of the first rule on the waiter's exit codes that matches (there are no disruptions
// here), else Count.
func failureAction(job *batchv1.Job, code int) batchv1.PodFailurePolicyAction {
	if job.Spec.PodFailurePolicy == nil {
		return batchv1.PodFailurePolicyActionCount
	}
	container := job.Spec.Template.Spec.Containers[0].Name
	for _, rule := range job.Spec.PodFailurePolicy.Rules {
		req := rule.OnExitCodes
		if req == nil || req.ContainerName != nil && *req.ContainerName != container {
			continue
		}
		if slices.Contains(req.Values, int32(code)) == (req.Operator == batchv1.PodFailurePolicyOnExitCodesOpIn) {
			return rule.Action
		}
	}
	return batchv1.PodFailurePolicyActionCount
}

// finish writes the status the Job controller would write: complete when the waiter's last exit
// code is 0, else failed with reason, after failures counted failures.
func (r *WaitJobRunner) finish(ctx context.Context, job *batchv1.Job, started metav1.Time, code, failures int, reason string) error {
	now := metav1.Now()
	j, err := r.clients.BatchV1().Jobs(job.Namespace).Get(ctx, job.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || err == nil && j.UID != job.UID {
		// The Job was deleted (and perhaps made again under its name): as the Job controller, which
		// tracks a Job's pods by its UID, nothing is written.
		return nil
	}
	if err != nil {
		return err
	}
	j.Status.StartTime = &started
	cond := func(t batchv1.JobConditionType, reason string) batchv1.JobCondition {
		return batchv1.JobCondition{Type: t, Status: corev1.ConditionTrue, Reason: reason, LastProbeTime: now, LastTransitionTime: now}
	}
	if code == 0 {
		j.Status.Succeeded, j.Status.CompletionTime = 1, &now
		j.Status.Conditions = []batchv1.JobCondition{cond(batchv1.JobSuccessCriteriaMet, "CompletionsReached"), cond(batchv1.JobComplete, "CompletionsReached")}
	} else {
		j.Status.Failed = int32(max(failures, 1))
		j.Status.Conditions = []batchv1.JobCondition{cond(batchv1.JobFailureTarget, reason), cond(batchv1.JobFailed, reason)}
	}
	if _, err = r.clients.BatchV1().Jobs(job.Namespace).UpdateStatus(ctx, j, metav1.UpdateOptions{}); err != nil {
		return err
	}
	r.mu.Lock()
	r.completed[job.Namespace+"/"+job.Name] = time.Now()
	r.mu.Unlock()
	return nil
}
