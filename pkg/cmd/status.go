package cmd

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"wavegate.io/wavegate/pkg/manager"
	"wavegate.io/wavegate/pkg/status"
)

func newStatusCommand() *cobra.Command {
	var namespace, output string
	c := &cobra.Command{
		Use:   "status [sequence]",
		Short: "Show sequences, their groups and members: readiness, wait Jobs, gated pods, teardown holds",
		Long: "Shows every sequence (or the one named, or those with members in --namespace) as a tree.\n" +
			"As a kubectl plugin: link the binary as kubectl-wavegate, then run `kubectl wavegate status`.",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := ctrl.GetConfig()
			if err != nil {
				return err
			}
			c, err := client.New(cfg, client.Options{Scheme: manager.Scheme()})
			if err != nil {
				return err
			}
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			col := &status.Collector{Client: c, Dynamic: dynamic.NewForConfigOrDie(cfg), Discovery: discovery.NewDiscoveryClientForConfigOrDie(cfg)}
			seqs, err := col.Collect(cmd.Context(), namespace, name)
			if err != nil {
				return err
			}
			switch output {
			case "json":
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(seqs)
			case "", "tree":
				status.Render(cmd.OutOrStdout(), seqs)
				return nil
			default:
				return fmt.Errorf("--output %q: use tree or json", output)
			}
		},
	}
	c.Flags().StringVarP(&namespace, "namespace", "n", "", "only sequences with members in this namespace")
	c.Flags().StringVarP(&output, "output", "o", "tree", "tree or json")
	return c
}
