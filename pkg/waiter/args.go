package waiter

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/readiness"
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
	// NamespaceReadiness overrides Readiness for the members of a namespace: in a shared sequence
	// each member is judged by the settings of its own namespace's policy.
	NamespaceReadiness map[string]wavev1.Readiness
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
	for _, ns := range slices.Sorted(maps.Keys(a.NamespaceReadiness)) {
		if rd, err := json.Marshal(a.NamespaceReadiness[ns]); err == nil {
			out = append(out, "--namespace-readiness", ns+"="+string(rd))
		}
	}
	if a.Timeout > 0 {
		out = append(out, "--timeout", a.Timeout.String())
	}
	return out
}

// Fingerprint identifies what a waiter judges: its members and the readiness settings it judges
// them by. The waiter marks its Job with it beside the time (keys.WaiterCheckedAnnotation), and
// the manager counts the mark only when it is the fingerprint of the Job's own arguments: a Job
// replaced under the same name (its group's readiness settings changed while it waited) may
// still have the replaced Job's waiter running for a moment, judging by the old settings.
func (a Args) Fingerprint() string {
	h := sha256.New()
	for _, m := range a.Members {
		fmt.Fprintf(h, "member %s\n", m)
	}
	rd, _ := json.Marshal(a.Readiness)
	fmt.Fprintf(h, "readiness %s\n", rd)
	for _, ns := range slices.Sorted(maps.Keys(a.NamespaceReadiness)) {
		rd, _ := json.Marshal(a.NamespaceReadiness[ns])
		fmt.Fprintf(h, "namespace %s %s\n", ns, rd)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// RawArgs holds the flag values that Complete decodes.
type RawArgs struct {
	members            []string
	readiness          string
	namespaceReadiness []string
}

// AddFlags binds the flags of `wavegate wait` to a; call Complete after parsing.
func (a *Args) AddFlags(fs *pflag.FlagSet) *RawArgs {
	raw := &RawArgs{}
	fs.StringVar(&a.Sequence, "sequence", "", "the sequence")
	fs.StringVar(&a.Group, "group", "", "the group")
	fs.StringVar(&a.Job, "job", "", "the wait Job running this waiter (namespace/name), annotated "+keys.WaiterReadyAnnotation+" once the group is ready")
	fs.StringArrayVar(&raw.members, "member", nil, "a member to wait for: group/version/resource/namespace/name, then /uid/generation of the planned object (repeatable)")
	fs.StringVar(&raw.readiness, "readiness", "", "the policy's readiness settings as JSON")
	fs.StringArrayVar(&raw.namespaceReadiness, "namespace-readiness", nil, "namespace=JSON: the readiness settings of the members of that namespace, when its policy's differ from --readiness (repeatable)")
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
	a.NamespaceReadiness = nil
	for _, v := range raw.namespaceReadiness {
		ns, rd, ok := strings.Cut(v, "=")
		if !ok {
			return fmt.Errorf("--namespace-readiness %q is not namespace=JSON", v)
		}
		var parsed wavev1.Readiness
		if err := json.Unmarshal([]byte(rd), &parsed); err != nil {
			return fmt.Errorf("--namespace-readiness %s: %w", ns, err)
		}
		if a.NamespaceReadiness == nil {
			a.NamespaceReadiness = map[string]wavev1.Readiness{}
		}
		a.NamespaceReadiness[ns] = parsed
	}
	return nil
}

// Checkers compiles the readiness settings: the checker of the members of namespaces without
// their own, and those of the namespaces that have them.
func (a Args) Checkers() (*readiness.Checker, map[string]*readiness.Checker, error) {
	def, err := readiness.NewChecker(a.Readiness)
	if err != nil {
		return nil, nil, fmt.Errorf("--readiness: %w", err)
	}
	var byNamespace map[string]*readiness.Checker
	for ns, rd := range a.NamespaceReadiness {
		c, err := readiness.NewChecker(rd)
		if err != nil {
			return nil, nil, fmt.Errorf("--namespace-readiness %s: %w", ns, err)
		}
		if byNamespace == nil {
			byNamespace = map[string]*readiness.Checker{}
		}
		byNamespace[ns] = c
	}
	return def, byNamespace, nil
}

// ParseReadiness parses only the readiness settings of container arguments (Encode's output),
// as ParseArgs would: what the manager compares with its plan on every pass, without parsing one
// --member per member (no flag value starts with "--": names and label values cannot).
func ParseReadiness(args []string) (Args, error) {
	if len(args) == 0 || args[0] != Command {
		return Args{}, fmt.Errorf("not a %q command: %v", Command, args)
	}
	kept := []string{Command}
	for i := 1; i < len(args); i++ {
		switch a := args[i]; {
		case (a == "--readiness" || a == "--namespace-readiness") && i+1 < len(args):
			kept = append(kept, a, args[i+1])
			i++
		case strings.HasPrefix(a, "--readiness=") || strings.HasPrefix(a, "--namespace-readiness="):
			kept = append(kept, a)
		}
	}
	return ParseArgs(kept)
}

// ParseArgs parses container arguments (Encode's output) back. Flags it does not know are
// skipped: a Job made by a newer manager (before a rollback, or beside it during a rolling update)
// still gets its waiter's access and is resumed. The waiter itself refuses them.
func ParseArgs(args []string) (Args, error) {
	if len(args) == 0 || args[0] != Command {
		return Args{}, fmt.Errorf("not a %q command: %v", Command, args)
	}
	var a Args
	fs := pflag.NewFlagSet(Command, pflag.ContinueOnError)
	fs.ParseErrorsAllowlist.UnknownFlags = true
	raw := a.AddFlags(fs)
	if err := fs.Parse(args[1:]); err != nil {
		return Args{}, err
	}
	return a, a.Complete(raw)
}
