//go:build tools

// Package tools pins the Kubernetes control-plane commands that wavegate's tests run.
// The Makefile builds them into a per-version user cache directory, never into git.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
