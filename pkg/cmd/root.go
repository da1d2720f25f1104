// Package cmd holds wavegate's command line: the manager and its subcommands.
package cmd

import (
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
	root.AddCommand(newManagerCommand())
	return root
}
