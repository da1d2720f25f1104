package waiter

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
	"wavegate.io/wavegate/pkg/keys"
)

// Command is the subcommand a wait Job runs.
const Command = "wait"

// Args are the arguments of `wavegate wait`, the one encoding of what a wait Job waits for: the
// controller encodes them into the Job's container, the command and the waiter RBAC controller
// parse them back with ParseArgs.
type Args struct {
	Sequence, Group string
	// Job is the wait Job running the waiter (namespace/name), which it marks ready
	// (keys.WaiterReadyAnnotation) before it exits; empty when run by hand.
	Job       string
	Members   []Member
	Readiness wavev1.Readiness
	// Timeout bounds the wait when run by hand; wait Jobs leave it to activeDeadlineSeconds.
	Timeout time.Duration
}

// Encode returns the container arguments: the subcommand, then the flags.
func (a Args) Encode() []string {
	out := []string{Command, "--sequence", a.Sequence, "--group", a.Group}
	if a.Job != "" {
		out = append(out, "--job", a.Job)
	}
	for _, m := range a.Members {
		out = append(out, "--member", m.String())
	}
	if rd, err := json.Marshal(a.Readiness); err == nil && string(rd) != "{}" {
		out = append(out, "--readiness", string(rd))
	}
	if a.Timeout > 0 {
		out = append(out, "--timeout", a.Timeout.String())
	}
	return out
}

// RawArgs holds the flag values that Complete decodes.
type RawArgs struct {
	members   []string
	readiness string
}

// AddFlags binds the flags of `wavegate wait` to a; call Complete after parsing.
func (a *Args) AddFlags(fs *pflag.FlagSet) *RawArgs {
	raw := &RawArgs{}
	fs.StringVar(&a.Sequence, "sequence", "", "the sequence")
	fs.StringVar(&a.Group, "group", "", "the group")
	fs.StringVar(&a.Job, "job", "", "the wait Job running this waiter (namespace/name), annotated "+keys.WaiterReadyAnnotation+" once the group is ready")
	fs.StringArrayVar(&raw.members, "member", nil, "a member to wait for: group/version/resource/namespace/name, then /uid/generation of the planned object (repeatable)")
	fs.StringVar(&raw.readiness, "readiness", "", "the policy's readiness settings as JSON")
	fs.DurationVar(&a.Timeout, "timeout", 0, "give up after this long (exit 2)")
	return raw
}

// Complete decodes the members and readiness settings into a.
func (a *Args) Complete(raw *RawArgs) error {
	if a.Job != "" {
		if ns, name, ok := strings.Cut(a.Job, "/"); !ok || ns == "" || name == "" || strings.Contains(name, "/") {
			return fmt.Errorf("--job %q is not namespace/name", a.Job)
		}
	}
	a.Members = nil
	for _, m := range raw.members {
		parsed, err := ParseMember(m)
		if err != nil {
			return err
		}
		a.Members = append(a.Members, parsed)
	}
	a.Readiness = wavev1.Readiness{}
	if raw.readiness != "" {
		if err := json.Unmarshal([]byte(raw.readiness), &a.Readiness); err != nil {
			return fmt.Errorf("--readiness: %w", err)
		}
	}
	return nil
}

// ParseArgs parses container arguments (Encode's output) back.
func ParseArgs(args []string) (Args, error) {
	if len(args) == 0 || args[0] != Command {
		return Args{}, fmt.Errorf("not a %q command: %v", Command, args)
	}
	var a Args
	fs := pflag.NewFlagSet(Command, pflag.ContinueOnError)
	raw := a.AddFlags(fs)
	if err := fs.Parse(args[1:]); err != nil {
		return Args{}, err
	}
	return a, a.Complete(raw)
}
