// Package ordering tests runtime ordering through a real API server: pods gated at admission,
// wait Jobs run in-process, gates removed in group order.
package ordering

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/sequence"
	"wavegate.io/wavegate/test/framework"
)

var (
	env    *framework.Env
	mgr    *framework.Manager
	runner *framework.WaitJobRunner
)

const timeout = 20 * time.Second

// settleMax is the manager's bound on a settle in this suite (sequence.MembershipSettleMax in a
// deployment): TestMembersThatNeverSettleHoldTheGroupsForABoundedTime waits it out.
const settleMax = 5 * time.Second

func TestMain(m *testing.M) {
	os.Exit(framework.RunSuite(m, &env, &mgr, func() error {
		env.ManagerTransport = reads.wrap // straggler_test.go
		env.SettleMax = settleMax
		return nil
	}, func() (func(), error) {
		var err error
		runner, err = env.RunWaitJobs(context.Background())
		if err != nil {
			return nil, err
		}
		return runner.Stop, nil
	}))
}

func namespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "order-", Labels: map[string]string{keys.EnabledLabel: "true"}}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func member(group string, order int) map[string]string {
	return map[string]string{keys.GroupLabel: group, keys.GroupOrderLabel: fmt.Sprint(order)}
}

func podSpec(image string) corev1.PodSpec {
	return corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: image}}}
}

func statefulSet(ns, name string, l map[string]string) *appsv1.StatefulSet {
	sel := map[string]string{"app": name}
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: l},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: sel}, Spec: podSpec("postgres:16")}},
	}
}

func deployment(ns, name string, l map[string]string) *appsv1.Deployment {
	sel := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: l},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: sel}, Spec: podSpec("web:1")}},
	}
}

func job(ns, name string, l map[string]string) *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: l},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: func() corev1.PodSpec {
			s := podSpec("migrate:1")
			s.RestartPolicy = corev1.RestartPolicyNever
			return s
		}()}},
	}
}

// podOf creates a pod the way a workload controller would (envtest runs no controllers): from
// the workload's admitted template, owned by it, with the template hash label.
func podOf(t *testing.T, owner client.Object, tpl corev1.PodTemplateSpec, hashLabel, hash string) *corev1.Pod {
	t.Helper()
	gvk, err := env.Client.GroupVersionKindFor(owner)
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{hashLabel: hash}
	for k, v := range tpl.Labels {
		labels[k] = v
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: owner.GetName() + "-", Namespace: owner.GetNamespace(), Labels: labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind,
				Name: owner.GetName(), UID: owner.GetUID(), Controller: ptr.To(true)}}},
		Spec: tpl.Spec,
	}
	if err := env.Client.Create(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	return p
}

func gated(g Gomega, p *corev1.Pod) bool {
	got := &corev1.Pod{}
	g.Expect(env.Client.Get(context.Background(), client.ObjectKeyFromObject(p), got)).To(Succeed())
	return sequence.HasGate(got)
}

func eventuallyUngated(t *testing.T, p *corev1.Pod) {
	t.Helper()
	NewWithT(t).Eventually(func(g Gomega) bool { return gated(g, p) }).WithTimeout(timeout).WithPolling(20*time.Millisecond).
		Should(BeFalse(), "pod %s stayed gated", p.Name)
}

// gatedWindow is how long "stays gated" is watched: longer than the controller takes to react to
// the change that would release a pod (a few reconciles), so that a release a moment later fails.
const gatedWindow = 1500 * time.Millisecond

// expectGated asserts that every pod stays gated for gatedWindow, not only at this instant.
func expectGated(t *testing.T, pods ...*corev1.Pod) {
	t.Helper()
	NewWithT(t).Consistently(func(g Gomega) {
		for _, p := range pods {
			g.Expect(gated(g, p)).To(BeTrue(), "pod %s of group %s was released early", p.Name, p.Labels[keys.GroupLabel])
		}
	}).WithTimeout(gatedWindow).WithPolling(100 * time.Millisecond).Should(Succeed())
}

// markStatefulSetReady writes the status a StatefulSet controller writes once its pods are ready.
func markStatefulSetReady(t *testing.T, s *appsv1.StatefulSet) {
	t.Helper()
	g := NewWithT(t)
	g.Expect(env.Client.Get(context.Background(), client.ObjectKeyFromObject(s), s)).To(Succeed())
	s.Status = appsv1.StatefulSetStatus{ObservedGeneration: s.Generation, Replicas: 1, ReadyReplicas: 1, CurrentReplicas: 1,
		UpdatedReplicas: 1, AvailableReplicas: 1, CurrentRevision: "r", UpdateRevision: "r"}
	g.Expect(env.Client.Status().Update(context.Background(), s)).To(Succeed())
}

func markDeploymentReady(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	g := NewWithT(t)
	g.Expect(env.Client.Get(context.Background(), client.ObjectKeyFromObject(d), d)).To(Succeed())
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 1, ReadyReplicas: 1, UpdatedReplicas: 1, AvailableReplicas: 1,
		Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue},
			{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetAvailable"}}}
	g.Expect(env.Client.Status().Update(context.Background(), d)).To(Succeed())
}

func markJobComplete(t *testing.T, j *batchv1.Job) {
	t.Helper()
	g := NewWithT(t)
	g.Expect(env.Client.Get(context.Background(), client.ObjectKeyFromObject(j), j)).To(Succeed())
	now := metav1.Now()
	start := &now
	if j.Status.StartTime != nil {
		start = j.Status.StartTime // immutable once set, as the Job controller knows
	}
	j.Status = batchv1.JobStatus{StartTime: start, CompletionTime: &now, Succeeded: 1, Conditions: []batchv1.JobCondition{
		{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now}}}
	g.Expect(env.Client.Status().Update(context.Background(), j)).To(Succeed())
}

// markJobFailed writes a Job that failed for good, as the Job controller writes it.
func markJobFailed(t *testing.T, j *batchv1.Job) {
	t.Helper()
	g := NewWithT(t)
	g.Expect(env.Client.Get(context.Background(), client.ObjectKeyFromObject(j), j)).To(Succeed())
	now := metav1.Now()
	j.Status = batchv1.JobStatus{StartTime: &now, Failed: 1, Conditions: []batchv1.JobCondition{
		{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonBackoffLimitExceeded, LastTransitionTime: now},
		{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonBackoffLimitExceeded, LastTransitionTime: now}}}
	g.Expect(env.Client.Status().Update(context.Background(), j)).To(Succeed())
}

// markJobRunning writes a started Job: kstatus would call it Current; wavegate must not.
func markJobRunning(t *testing.T, j *batchv1.Job) {
	t.Helper()
	g := NewWithT(t)
	g.Expect(env.Client.Get(context.Background(), client.ObjectKeyFromObject(j), j)).To(Succeed())
	now := metav1.Now()
	j.Status = batchv1.JobStatus{StartTime: &now, Active: 1}
	g.Expect(env.Client.Status().Update(context.Background(), j)).To(Succeed())
}

func sequenceStatus(g Gomega, seq string) *wavev1.Sequence {
	s := &wavev1.Sequence{}
	g.Expect(env.Client.Get(context.Background(), client.ObjectKey{Name: sequence.ObjectName(seq)}, s)).To(Succeed())
	return s
}

func groupPhase(seq, group string) func(g Gomega) wavev1.GroupPhase {
	return func(g Gomega) wavev1.GroupPhase {
		for _, gs := range sequenceStatus(g, seq).Status.Groups {
			if gs.Name == group {
				return gs.Phase
			}
		}
		return ""
	}
}

func uid(o client.Object) types.UID { return o.GetUID() }
