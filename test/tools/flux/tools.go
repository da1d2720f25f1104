//go:build tools

// Package tools pins Flux's kustomize-controller, which wavegate's local cluster can run as a real
// GitOps engine (test/tools/dev/flux.sh). test/tools/control-plane.sh builds it into the user cache
// and copies the CRDs it needs from the pinned modules; none of Flux's code lives here.
//
// source-controller does not build with the modules the proxy serves, so it cannot be required here;
// control-plane.sh downloads the version below only for its CRDs (config/crd/bases, ExternalArtifact
// among them). Artifacts are served by test/tools/artifact instead.
//
// source-controller: v1.9.6
package tools

import (
	_ "github.com/fluxcd/kustomize-controller"
)
