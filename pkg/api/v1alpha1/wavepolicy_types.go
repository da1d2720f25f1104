package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// OnTimeout says what happens to later groups when a group is not ready within its timeout.
// +kubebuilder:validation:Enum=Block;Release
type OnTimeout string

const (
	// OnTimeoutBlock keeps later groups gated; the group's wait Job fails and a Warning Event is emitted.
	OnTimeoutBlock OnTimeout = "Block"
	// OnTimeoutRelease releases later groups anyway, with a Warning Event.
	OnTimeoutRelease OnTimeout = "Release"
)

// Teardown says whether the group order is also enforced on deletion.
// +kubebuilder:validation:Enum=Ordered;Disabled
type Teardown string

const (
	// TeardownOrdered holds a deleted group until every later group of its sequence is gone.
	TeardownOrdered Teardown = "Ordered"
	// TeardownDisabled deletes members in whatever order the client chooses.
	TeardownDisabled Teardown = "Disabled"
)

// WavePolicySpec declares the groups of ordered deployments and how wavegate treats them.
// +kubebuilder:validation:XValidation:rule="!has(self.requireKnownGroups) || !self.requireKnownGroups || (has(self.groups) && size(self.groups) > 0)",message="requireKnownGroups needs at least one entry in groups"
type WavePolicySpec struct {
	// NamespaceSelector selects the namespaces whose objects the policy applies to (its groups,
	// defaults, readiness and group label), so that teams can have different group orders; policies
	// conflict only where they select the same namespace. Empty or absent: every namespace.
	// Cluster-scoped objects see the policies without a selector and those that declare the
	// sequence they join.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`

	// Sequences declares shared sequences: the only way objects of several namespaces, or
	// cluster-scoped objects, join one sequence. Without a declaration a namespaced object may join
	// only its own namespace's sequences (the namespace's name, or <namespace>.<name>), and a
	// cluster-scoped object none. WavePolicies are cluster-scoped: tenants cannot write them.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=256
	Sequences []SharedSequence `json:"sequences,omitempty"`

	// GroupLabel names an existing label that carries an object's group, for example
	// app.kubernetes.io/component, so that manifests need no change. The label wavegate.io/group
	// always works and wins when both are set.
	// +optional
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:XValidation:rule="self != 'wavegate.io/group-order' && self != 'wavegate.io/order' && self != 'wavegate.io/sequence'",message="groupLabel must not be one of wavegate's other labels"
	// +kubebuilder:validation:XValidation:rule="self.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$')",message="groupLabel must be a label key: an optional DNS subdomain prefix and '/', then a name of at most 63 alphanumerics, '-', '_' or '.'"
	GroupLabel string `json:"groupLabel,omitempty"`

	// Groups maps group names to their order. Lower orders come first on creation and last on teardown.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=256
	Groups []GroupSpec `json:"groups,omitempty"`

	// RequireKnownGroups denies objects whose group is not listed in groups, instead of accepting the
	// order from the wavegate.io/group-order label.
	// +optional
	RequireKnownGroups bool `json:"requireKnownGroups,omitempty"`

	// Defaults apply to every group that does not override them.
	// +optional
	Defaults GroupDefaults `json:"defaults,omitempty"`

	// Readiness adjusts how wavegate decides that a member is ready.
	// +optional
	Readiness Readiness `json:"readiness,omitempty"`
}

// SharedSequence is a sequence that objects of the selected namespaces, and optionally
// cluster-scoped objects, may join.
type SharedSequence struct {
	// Name is the sequence, as objects name it in wavegate.io/sequence.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`
	Name string `json:"name"`
	// NamespaceSelector selects the namespaces whose objects may join. A namespace may always join
	// its own sequences. Absent: no other namespace.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
	// ClusterScoped lets cluster-scoped objects (CRDs, ClusterRoles, webhook configurations) join.
	// +optional
	ClusterScoped bool `json:"clusterScoped,omitempty"`
}

// Readiness adjusts readiness for kinds that kstatus cannot judge.
type Readiness struct {
	// AssumeReadyWithoutConditions counts a custom resource that reports no conditions at all as
	// ready. Off by default: a CR whose controller has not reported yet is not ready.
	// +optional
	AssumeReadyWithoutConditions bool `json:"assumeReadyWithoutConditions,omitempty"`

	// LoadBalancerIngress makes a Service of type LoadBalancer ready only once its
	// status.loadBalancer.ingress lists an address. Off by default: a Service is ready once created.
	// +optional
	LoadBalancerIngress bool `json:"loadBalancerIngress,omitempty"`

	// Rules give per-kind CEL expressions over the object (as `self`), like Flux's healthCheckExprs.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	Rules []ReadinessRule `json:"rules,omitempty"`
}

// ReadinessRule decides readiness of one kind with CEL. Expressions see the object as `self`.
// The first of failed, current that is true decides; when neither is, the object is in progress.
type ReadinessRule struct {
	// APIVersion of the kind, for example example.com/v1.
	// +kubebuilder:validation:MinLength=1
	APIVersion string `json:"apiVersion"`
	// Kind, for example Widget.
	// +kubebuilder:validation:MinLength=1
	Kind string `json:"kind"`
	// Current is true when the object is ready.
	// +kubebuilder:validation:MinLength=1
	Current string `json:"current"`
	// Failed is true when the object failed for good.
	// +optional
	Failed string `json:"failed,omitempty"`
}

// GroupDefaults are the settings a group inherits.
type GroupDefaults struct {
	// Timeout bounds how long later groups wait for a group to become ready, from when the group
	// opens. At least 1s.
	// +optional
	// +kubebuilder:default="10m"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s')",message="timeout must be at least 1s (a group with no bound is not supported: use a long timeout with onTimeout: Block)"
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// OnTimeout says what happens to later groups after the timeout.
	// +optional
	// +kubebuilder:default=Block
	OnTimeout OnTimeout `json:"onTimeout,omitempty"`

	// Teardown enforces the reverse order on deletion.
	// +optional
	// +kubebuilder:default=Ordered
	Teardown Teardown `json:"teardown,omitempty"`

	// ForceRemoveFinalizers is the last resort of teardown: when a held member's declared cleanup
	// objects are still there after the timeout, wavegate removes their finalizers (with Warning
	// Events) so that nothing stays stuck. Off by default.
	// +optional
	ForceRemoveFinalizers bool `json:"forceRemoveFinalizers,omitempty"`
}

// GroupSpec is one group of a policy.
type GroupSpec struct {
	// Name is the group, as it appears in the group label. It must be a valid label value.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`
	Name string `json:"name"`

	// Order of the group. The derived Argo CD sync-wave is order x 100 + the component order.
	// +kubebuilder:validation:Minimum=-1000
	// +kubebuilder:validation:Maximum=1000
	Order int32 `json:"order"`

	// Required makes later groups wait for this group even while it has no members, for example
	// when it is applied later or by a separate sync.
	// +optional
	Required bool `json:"required,omitempty"`

	// Timeout overrides defaults.timeout. At least 1s.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s')",message="timeout must be at least 1s (a group with no bound is not supported: use a long timeout with onTimeout: Block)"
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// OnTimeout overrides defaults.onTimeout.
	// +optional
	OnTimeout OnTimeout `json:"onTimeout,omitempty"`

	// Teardown overrides defaults.teardown.
	// +optional
	Teardown Teardown `json:"teardown,omitempty"`

	// ForceRemoveFinalizers overrides defaults.forceRemoveFinalizers.
	// +optional
	ForceRemoveFinalizers *bool `json:"forceRemoveFinalizers,omitempty"`
}

// WavePolicyStatus reports whether the policy is in effect.
type WavePolicyStatus struct {
	// ObservedGeneration is the generation the conditions describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Namespaces lists the opted-in namespaces the policy applies to (at most 100, sorted);
	// NamespaceCount counts them all.
	// +optional
	Namespaces []string `json:"namespaces,omitempty"`
	// +optional
	NamespaceCount int32 `json:"namespaceCount,omitempty"`

	// Conditions: Ready is True when the policy is in effect without conflicts.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// WavePolicy orders groups of resources across the cluster: group names to orders, the label that
// carries the group, timeouts and teardown.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=wp;wavepol
// +kubebuilder:printcolumn:name="Group label",type=string,JSONPath=`.spec.groupLabel`
// +kubebuilder:printcolumn:name="Namespaces",type=integer,JSONPath=`.status.namespaceCount`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type WavePolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   WavePolicySpec   `json:"spec,omitempty"`
	Status WavePolicyStatus `json:"status,omitempty"`
}

// WavePolicyList is a list of WavePolicy.
// +kubebuilder:object:root=true
type WavePolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []WavePolicy `json:"items"`
}

func init() {
	SchemeBuilder.Register(&WavePolicy{}, &WavePolicyList{})
}
