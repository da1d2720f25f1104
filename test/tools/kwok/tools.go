//go:build tools

// Package tools pins kwok, which simulates nodes and pods for wavegate's local cluster.
package tools

import (
	_ "sigs.k8s.io/kwok/cmd/kwok"
	_ "sigs.k8s.io/kwok/cmd/kwokctl"
)
