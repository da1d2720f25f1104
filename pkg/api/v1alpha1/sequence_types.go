package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GroupPhase is where a group of a sequence stands.
// +kubebuilder:validation:Enum=Pending;Waiting;Released;Failed;TimedOut;Terminating
type GroupPhase string

const (
	// GroupPending: an earlier group is not released yet; this group's new pods are gated.
	GroupPending GroupPhase = "Pending"
	// GroupWaiting: every earlier group is released; the group's wait Job waits for its members.
	GroupWaiting GroupPhase = "Waiting"
	// GroupReleased: the wait Job of the group's current revision completed.
	GroupReleased GroupPhase = "Released"
	// GroupFailed: a member failed for good, or the group's waiter kept failing; later groups stay
	// gated.
	GroupFailed GroupPhase = "Failed"
	// GroupTimedOut: the group was not ready within its timeout.
	GroupTimedOut GroupPhase = "TimedOut"
	// GroupTerminating: every object of the group is being deleted.
	GroupTerminating GroupPhase = "Terminating"
)

// SequenceSpec names the sequence the object reports on.
type SequenceSpec struct {
	// Sequence is the value of wavegate.io/sequence (or the namespace) the members carry.
	Sequence string `json:"sequence"`
}

// GroupStatus is one group of a sequence, in order.
type GroupStatus struct {
	Name  string `json:"name"`
	Order int32  `json:"order"`
	// Revision identifies the group's members and their generations; a new revision needs a new
	// wait Job before later groups are released again.
	Revision string `json:"revision,omitempty"`
	// Members counts the group's members; Ready how many of them are ready.
	Members int32 `json:"members"`
	Ready   int32 `json:"ready"`
	// Phase of the group.
	Phase GroupPhase `json:"phase"`
	// WaitJob is the wait Job of the current revision, as namespace/name.
	// +optional
	WaitJob string `json:"waitJob,omitempty"`
	// WaitJobRefusedSince is when the API server first refused to create the wait Job of the
	// current revision (WaitJob) while the group was open: with no Job, the group's timeout counts
	// from then.
	// +optional
	WaitJobRefusedSince *metav1.Time `json:"waitJobRefusedSince,omitempty"`
	// Terminating counts objects of this group that are being deleted.
	// +optional
	Terminating int32 `json:"terminating,omitempty"`
	// Held counts deleted objects of this group that teardown holds until later groups are gone.
	// +optional
	Held int32 `json:"held,omitempty"`
	// Owned counts objects of this group that a controller made (an operator's child resources)
	// and that carry a finalizer, not being deleted (those count in Terminating): no members, they
	// hold the groups before this one as members do.
	// +optional
	Owned int32 `json:"owned,omitempty"`
	// Resources are the kinds of the group's objects (members and those being deleted), as
	// <group>/<version>/<resource> ("v1/configmaps" for the core group): the DELETE check of
	// ordered teardown confirms on a consistent read of these that a later group still has objects
	// before it refuses a deletion.
	// +optional
	// +listType=set
	Resources []string `json:"resources,omitempty"`
	// GatedPods counts pods of this group that still carry the scheduling gate.
	GatedPods int32 `json:"gatedPods,omitempty"`
	// ClearedTemplates are the pod templates (controller UID and template hash) whose new pods may
	// start without a gate: the controller checked that every earlier group was released for them.
	// +optional
	// +listType=set
	ClearedTemplates []string `json:"clearedTemplates,omitempty"`
	// Message says what the group waits for.
	// +optional
	Message string `json:"message,omitempty"`
}

// SequenceStatus is the observed state of a sequence.
type SequenceStatus struct {
	// Groups in order.
	// +optional
	Groups []GroupStatus `json:"groups,omitempty"`
	// Summary is a one-line view of the groups, for kubectl get.
	// +optional
	Summary string `json:"summary,omitempty"`
	// Conditions: Ready is True when every group is released.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Sequence reports the state of one ordered sequence: its groups, their members and readiness,
// their wait Jobs and which groups are still gated. wavegate creates and deletes Sequences; they
// hold no configuration.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=seq
// +kubebuilder:printcolumn:name="Sequence",type=string,JSONPath=`.spec.sequence`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Groups",type=string,JSONPath=`.status.summary`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Sequence struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   SequenceSpec   `json:"spec,omitempty"`
	Status SequenceStatus `json:"status,omitempty"`
}

// SequenceList is a list of Sequence.
// +kubebuilder:object:root=true
type SequenceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Sequence `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Sequence{}, &SequenceList{})
}
