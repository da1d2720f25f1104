// Package keys holds every label, annotation, finalizer and scheduling-gate key wavegate reads or writes.
// Nothing else in wavegate spells these strings.
package keys

const (
	// Domain is the prefix of every wavegate key.
	Domain = "wavegate.io"

	// EnabledLabel on a Namespace opts it in: "true".
	EnabledLabel = Domain + "/enabled"

	// SystemLabel on wavegate's own namespace: "true". The owned-labels admission policy
	// (config/webhook) lets only opted-in namespaces and this one have wait Jobs and waiter access.
	SystemLabel = Domain + "/system"

	// GroupLabel names the group an object belongs to. A WavePolicy may name another label
	// (spec.groupLabel) that carries the group too.
	GroupLabel = Domain + "/group"
	// GroupOrderLabel gives the group's order when no WavePolicy defines the group.
	GroupOrderLabel = Domain + "/group-order"
	// OrderLabel orders components inside a group: 0 to MaxOrder.
	OrderLabel = Domain + "/order"
	// SequenceLabel separates independent sequences. Default: the object's namespace.
	SequenceLabel = Domain + "/sequence"

	// AdmittedLabel on a pod says that wavegate's webhook admitted it when it was created: "true".
	// The webhook's object selector leaves such pods out, so that their updates (a gate removal
	// among them) skip the webhook and its match conditions; templates never carry it.
	AdmittedLabel = Domain + "/admitted"

	// WaitJobLabel marks wavegate's companion wait Jobs: "true".
	WaitJobLabel = Domain + "/wait-job"
	// WaitGroupLabel on a wait Job names the group it waits for (not GroupLabel: that would make
	// the Job a member).
	WaitGroupLabel = Domain + "/wait-for-group"

	// WaitSequenceLabel and WaitRevisionLabel on a wait Job name the sequence and the group revision
	// it waits for.
	WaitSequenceLabel = Domain + "/wait-sequence"
	WaitRevisionLabel = Domain + "/wait-revision"
	// WaiterReadyAnnotation on a wait Job records when its waiter found every member ready (RFC 3339
	// with nanoseconds), written by the waiter itself: the same evidence as its pod's exit 0, without
	// waiting for the kubelet to notice the exit (its PLEG relists containers every second).
	WaiterReadyAnnotation = Domain + "/waiter-ready-at"
	// WaiterCheckedAnnotation is written with WaiterReadyAnnotation: the fingerprint of what the
	// waiter judged (waiter.Args.Fingerprint). A mark counts only when it matches the Job's own
	// arguments: a Job replaced under the same name may still have the old one's waiter running.
	WaiterCheckedAnnotation = Domain + "/waiter-checked"
	// WaitOpenedAnnotation on a wait Job records when its group opened (RFC 3339 with
	// nanoseconds), written when the Job is armed, so that a changed timeout is counted from then.
	WaitOpenedAnnotation = Domain + "/opened-at"
	// WaitingSinceAnnotation on a wait Job made for a new revision of a group that was open and
	// waiting (its earlier revision's Job running, armed or made with this annotation itself)
	// records when the group opened (RFC 3339 with nanoseconds): the Job's timeout counts from then
	// when it is first armed, so that a group whose members keep changing still times out. It is
	// removed when the group is seen closed before the Job is armed.
	WaitingSinceAnnotation = Domain + "/waiting-since"
	// WaiterRBACLabel marks the ServiceAccounts, Roles and bindings wavegate provisions for waiters.
	WaiterRBACLabel = Domain + "/waiter-rbac"

	// ResolvedDomain prefixes the annotations in which wavegate records what it resolved.
	ResolvedDomain = "resolved." + Domain
	// ResolvedSequenceAnnotation is the sequence the object belongs to.
	ResolvedSequenceAnnotation = ResolvedDomain + "/sequence"
	// ResolvedGroupAnnotation is the group the object belongs to.
	ResolvedGroupAnnotation = ResolvedDomain + "/group"
	// ResolvedGroupOrderAnnotation is the group's order.
	ResolvedGroupOrderAnnotation = ResolvedDomain + "/group-order"
	// ResolvedWaveAnnotation is the derived wave: group order x WavesPerGroup + order.
	ResolvedWaveAnnotation = ResolvedDomain + "/wave"

	// ArgoCDSyncWaveAnnotation is Argo CD's sync-wave annotation, stamped with the derived wave.
	ArgoCDSyncWaveAnnotation = "argocd.argoproj.io/sync-wave"

	// SchedulingGate holds a pod until every earlier group of its sequence is released.
	SchedulingGate = Domain + "/ordered"
	// TeardownFinalizer holds a deleted member until every later group of its sequence is gone.
	TeardownFinalizer = Domain + "/ordered-teardown"

	// CleanupAnnotation on a member lists kinds (resource.group, comma-separated, for example
	// clusterpolicies.nvidia.com) whose objects wavegate deletes, and waits to be gone, before the
	// member's deletion completes: custom resources created outside Git.
	CleanupAnnotation = Domain + "/cleanup"

	// AggregateToManagerLabel on a ClusterRole adds its rules to the manager's: how users grant
	// wavegate access to their custom resource kinds.
	AggregateToManagerLabel = Domain + "/aggregate-to-manager"

	// FieldManager is the field manager of every write wavegate's controllers make.
	FieldManager = "wavegate"

	// PodSequenceIndex indexes cached member pods by sequence; SequenceIndex indexes tracked
	// members by sequence.
	PodSequenceIndex = Domain + "/pod-sequence"
	SequenceIndex    = Domain + "/sequence"
)

// Keys of Kubernetes and common tools that wavegate reads or writes.
const (
	// TemplateHashLabels are the labels in which workload controllers stamp a pod's template: the
	// ReplicaSet's pod-template-hash, the StatefulSet's or DaemonSet's controller-revision-hash.
	PodTemplateHashLabel        = "pod-template-hash"
	ControllerRevisionHashLabel = "controller-revision-hash"
	// LastAppliedAnnotation is kubectl's client-side apply record: never cached.
	LastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"
	// ManagedByLabel and NameLabel are the recommended app labels on what wavegate creates.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	NameLabel      = "app.kubernetes.io/name"
	// NamespaceControllerUser is kube-controller-manager's namespace controller.
	NamespaceControllerUser = "system:serviceaccount:kube-system:namespace-controller"
	// StatefulSetControllerUser is kube-controller-manager's StatefulSet controller (per-controller
	// credentials); KubeControllerManagerUser is kube-controller-manager without them.
	StatefulSetControllerUser = "system:serviceaccount:kube-system:statefulset-controller"
	KubeControllerManagerUser = "system:kube-controller-manager"
	// ClaimTemplateAnnotation marks a claim that a StatefulSet's volumeClaimTemplates made (admission
	// sets it when kube-controller-manager creates a claim no controller owns): it is no member,
	// and holds nothing. The StatefulSet keeps it when it goes (its persistentVolumeClaimRetentionPolicy
	// Retain), so as a member it would hold the groups before its own for good.
	ClaimTemplateAnnotation = "wavegate.io/volume-claim-template"
)

// TemplateHashLabels lists the template labels in the order they are read for a pod of a
// controller of another kind (an operator's pods, which may carry either).
var TemplateHashLabels = []string{PodTemplateHashLabel, ControllerRevisionHashLabel}

// TemplateHashLabelsOf lists the labels that identify the template of a pod whose controller is of
// kind: the one its controller stamps. A template may carry the other (a pod-template-hash copied
// from a ReplicaSet's pods into a StatefulSet's template, say) with a value that never changes,
// which would make every revision look like the one already released.
func TemplateHashLabelsOf(kind string) []string {
	switch kind {
	case "ReplicaSet":
		return TemplateHashLabels[:1]
	case "StatefulSet", "DaemonSet":
		return TemplateHashLabels[1:]
	}
	return TemplateHashLabels
}

const (
	// WavesPerGroup is the width of a group in waves: wave = group order x WavesPerGroup + order.
	WavesPerGroup = 100
	// MaxOrder is the highest component order inside a group.
	MaxOrder = 49
	// WaitJobWaveOffset places a group's wait Job after all of its components.
	WaitJobWaveOffset = 50
	// MinGroupOrder and MaxGroupOrder bound a group order, so that every wave fits Argo CD's int32.
	MinGroupOrder = -1000
	MaxGroupOrder = 1000
)
