//go:build tools

// The Helm CLI is built from this module (helm.sh/helm/v4/cmd/helm), pinned by its go.mod, into
// the user cache by test/tools/control-plane.sh: this import keeps the CLI's dependencies in go.sum.
package helm

import _ "helm.sh/helm/v4/pkg/cmd"
