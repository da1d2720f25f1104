package cmd

import (
	"io"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/client-go/dynamic"
	ctrl "sigs.k8s.io/controller-runtime"

	"wavegate.io/wavegate/pkg/waiter"
)

// exitError carries a process exit code through cobra.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }

func newWaitCommand() *cobra.Command {
	return NewWaitCommand(func() (dynamic.Interface, error) {
		cfg, err := ctrl.GetConfig()
		if err != nil {
			return nil, err
		}
		return dynamic.NewForConfig(cfg)
	}, os.Stdout)
}

// NewWaitCommand returns `wavegate wait` with the client it watches through and where it prints;
// a test harness runs wait Jobs in-process with it.
func NewWaitCommand(newClient func() (dynamic.Interface, error), out io.Writer) *cobra.Command {
	var a waiter.Args
	var raw *waiter.RawArgs
	c := &cobra.Command{
		Use:   "wait --sequence S --group G --member group/version/resource/namespace/name ...",
		Short: "Wait until every member of a group is ready (what a group's wait Job runs)",
		Long: "Exit codes: 0 ready, 2 timed out, 3 a member failed for good (a failed Job or pod), 1 any other error.\n" +
			"Progress is printed one line per change.",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.Complete(raw); err != nil {
				return &exitError{waiter.ExitError, err}
			}
			checker, byNamespace, err := a.Checkers()
			if err != nil {
				return &exitError{waiter.ExitError, err}
			}
			client, err := newClient()
			if err != nil {
				return &exitError{waiter.ExitError, err}
			}
			o := waiter.Options{Sequence: a.Sequence, Group: a.Group, Job: a.Job, Fingerprint: a.Fingerprint(), Members: a.Members, Checker: checker, NamespaceCheckers: byNamespace, Timeout: a.Timeout, Out: out}
			if err := waiter.Wait(cmd.Context(), client, o); err != nil {
				return &exitError{waiter.ExitCode(err), err}
			}
			return nil
		},
	}
	raw = a.AddFlags(c.Flags())
	return c
}
