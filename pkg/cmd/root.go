// Package cmd holds wavegate's command line: the manager and its subcommands.
package cmd

import (
	"errors"
	"flag"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
)

// New returns the wavegate root command.
func New() *cobra.Command {
	root := &cobra.Command{
		Use:           "wavegate",
		Short:         "Deployment ordering for any GitOps tool: admission webhook and controllers",
		SilenceUsage:  true,
		SilenceErrors: false,
	}
	// --kubeconfig, as controller-runtime reads it (else $KUBECONFIG, in-cluster, ~/.kube/config).
	gfs := flag.NewFlagSet("kube", flag.ContinueOnError)
	config.RegisterFlags(gfs)
	root.PersistentFlags().AddGoFlagSet(gfs)
	root.AddCommand(newManagerCommand(), newWaitCommand(), newUninstallCommand(), newStatusCommand(), newRenderCommand())
	return root
}

// ExitCode is the process exit code for an error returned by the root command.
func ExitCode(err error) int {
	var e *exitError
	if errors.As(err, &e) {
		return e.code
	}
	return 1
}
