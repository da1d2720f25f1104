// Package cmd holds wavegate's command line: the manager and its subcommands.
package cmd

import (
	"errors"

	"github.com/spf13/cobra"
)

// New returns the wavegate root command.
func New() *cobra.Command {
	root := &cobra.Command{
		Use:           "wavegate",
		Short:         "Deployment ordering for any GitOps tool: admission webhook and controllers",
		SilenceUsage:  true,
		SilenceErrors: false,
	}
	root.AddCommand(newManagerCommand(), newWaitCommand(), newUninstallCommand())
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
