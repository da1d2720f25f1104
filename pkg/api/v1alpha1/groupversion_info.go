// Package v1alpha1 contains the wavegate.io/v1alpha1 API: the cluster-scoped WavePolicy.
// +kubebuilder:object:generate=true
// +groupName=wavegate.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of wavegate's API.
	GroupVersion = schema.GroupVersion{Group: "wavegate.io", Version: "v1alpha1"}

	// SchemeBuilder registers wavegate's types.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds wavegate's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
