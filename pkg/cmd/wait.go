package cmd

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/client-go/dynamic"
	ctrl "sigs.k8s.io/controller-runtime"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
	"wavegate.io/wavegate/pkg/readiness"
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
	var (
		o         waiter.Options
		members   []string
		readyJSON string
	)
	c := &cobra.Command{
		Use:   "wait --sequence S --group G --member group/version/resource/namespace/name ...",
		Short: "Wait until every member of a group is ready (what a group's wait Job runs)",
		Long: "Exit codes: 0 ready, 2 timed out, 3 a member failed for good (a failed Job or pod), 1 any other error.\n" +
			"Progress is printed one line per change.",
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, m := range members {
				parsed, err := waiter.ParseMember(m)
				if err != nil {
					return &exitError{waiter.ExitError, err}
				}
				o.Members = append(o.Members, parsed)
			}
			var r wavev1.Readiness
			if readyJSON != "" {
				if err := json.Unmarshal([]byte(readyJSON), &r); err != nil {
					return &exitError{waiter.ExitError, fmt.Errorf("--readiness: %w", err)}
				}
			}
			checker, err := readiness.NewChecker(r)
			if err != nil {
				return &exitError{waiter.ExitError, err}
			}
			o.Checker, o.Out = checker, out
			client, err := newClient()
			if err != nil {
				return &exitError{waiter.ExitError, err}
			}
			if err := waiter.Wait(cmd.Context(), client, o); err != nil {
				return &exitError{waiter.ExitCode(err), err}
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&o.Sequence, "sequence", "", "the sequence")
	f.StringVar(&o.Group, "group", "", "the group")
	f.StringArrayVar(&members, "member", nil, "a member to wait for: group/version/resource/namespace/name (repeatable)")
	f.StringVar(&readyJSON, "readiness", "", "the policy's readiness settings as JSON")
	f.DurationVar(&o.Timeout, "timeout", 0, "give up after this long (exit 2)")
	return c
}
