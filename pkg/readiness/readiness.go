// Package readiness decides whether a group member is ready. It starts from kstatus (Flux's
// maintained fork of sigs.k8s.io/cli-utils) and corrects the cases where kstatus would release a
// group early: a started Job, a Failed pod, a custom resource that reports nothing. A policy can add
// per-kind CEL rules.
package readiness

import (
	"fmt"
	"strings"

	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	"github.com/google/cel-go/cel"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
)

// Status is a member's readiness.
type Status string

const (
	// Ready members let their group be released.
	Ready Status = "Ready"
	// InProgress members may still become ready.
	InProgress Status = "InProgress"
	// Failed members will not become ready without a change.
	Failed Status = "Failed"
)

// Result is the readiness of one member and why.
type Result struct {
	Status  Status
	Message string
	// Terminal is true for failures that no amount of waiting can fix (a failed Job or pod). Other
	// failures (a Deployment past its progress deadline, a Stalled CR) may still recover.
	Terminal bool
}

// Checker evaluates readiness. It is safe for concurrent use.
type Checker struct {
	assumeReadyWithoutConditions bool
	rules                        map[schema.GroupVersionKind]rule
}

type rule struct {
	current, failed cel.Program
}

// NewChecker compiles a policy's readiness settings. A rule that does not compile is an error
// naming the rule.
func NewChecker(r wavev1.Readiness) (*Checker, error) {
	c := &Checker{assumeReadyWithoutConditions: r.AssumeReadyWithoutConditions, rules: map[schema.GroupVersionKind]rule{}}
	env, err := cel.NewEnv(cel.Variable("self", cel.DynType))
	if err != nil {
		return nil, fmt.Errorf("creating the CEL environment: %w", err)
	}
	for i, rr := range r.Rules {
		gv, err := schema.ParseGroupVersion(rr.APIVersion)
		if err != nil {
			return nil, fmt.Errorf("readiness.rules[%d].apiVersion: %w", i, err)
		}
		var compiled rule
		if compiled.current, err = program(env, rr.Current); err != nil {
			return nil, fmt.Errorf("readiness.rules[%d].current: %w", i, err)
		}
		if rr.Failed != "" {
			if compiled.failed, err = program(env, rr.Failed); err != nil {
				return nil, fmt.Errorf("readiness.rules[%d].failed: %w", i, err)
			}
		}
		c.rules[gv.WithKind(rr.Kind)] = compiled
	}
	return c, nil
}

func program(env *cel.Env, expr string) (cel.Program, error) {
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, iss.Err()
	}
	if ast.OutputType() != cel.BoolType && ast.OutputType() != cel.DynType {
		return nil, fmt.Errorf("%q is a %s, not a bool", expr, ast.OutputType())
	}
	return env.Program(ast)
}

// Check returns the readiness of u.
func (c *Checker) Check(u *unstructured.Unstructured) Result {
	if u.GetDeletionTimestamp() != nil {
		return Result{Status: InProgress, Message: "being deleted"}
	}
	gvk := u.GroupVersionKind()
	if r, ok := c.rules[gvk]; ok {
		return r.check(u)
	}
	switch gvk.GroupKind() {
	case schema.GroupKind{Group: "batch", Kind: "Job"}:
		return checkJob(u)
	case schema.GroupKind{Kind: "Pod"}:
		return checkPod(u)
	}
	res, err := status.Compute(u)
	if err != nil {
		return Result{Status: InProgress, Message: fmt.Sprintf("cannot compute status: %v", err)}
	}
	switch res.Status {
	case status.CurrentStatus:
		if !builtin(gvk.Group) && !c.assumeReadyWithoutConditions && !hasConditions(u) {
			return Result{Status: InProgress, Message: "the custom resource reports no conditions yet"}
		}
		return Result{Status: Ready, Message: res.Message}
	case status.FailedStatus:
		return Result{Status: Failed, Message: res.Message}
	default:
		return Result{Status: InProgress, Message: res.Message}
	}
}

func (r rule) check(u *unstructured.Unstructured) Result {
	vars := map[string]any{"self": u.Object}
	if r.failed != nil {
		if ok, err := eval(r.failed, vars); err != nil {
			return Result{Status: InProgress, Message: err.Error()}
		} else if ok {
			return Result{Status: Failed, Message: "the policy's failed expression is true"}
		}
	}
	ok, err := eval(r.current, vars)
	switch {
	case err != nil:
		return Result{Status: InProgress, Message: err.Error()}
	case ok:
		return Result{Status: Ready, Message: "the policy's current expression is true"}
	default:
		return Result{Status: InProgress, Message: "the policy's current expression is false"}
	}
}

func eval(p cel.Program, vars map[string]any) (bool, error) {
	out, _, err := p.Eval(vars)
	if err != nil {
		// A missing field (status not reported yet) is not ready, not an error worth failing for.
		return false, fmt.Errorf("evaluating the readiness rule: %w", err)
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, fmt.Errorf("the readiness rule returned %T, not a bool", out.Value())
	}
	return b, nil
}

// checkJob: a Job is ready only when Complete (kstatus calls a started Job Current).
func checkJob(u *unstructured.Unstructured) Result {
	for _, c := range conditions(u) {
		if c.status != "True" {
			continue
		}
		switch c.typ {
		case "Complete":
			return Result{Status: Ready, Message: "complete"}
		case "Failed":
			return Result{Status: Failed, Message: "failed: " + c.message, Terminal: true}
		}
	}
	return Result{Status: InProgress, Message: "not complete"}
}

// checkPod: a Failed pod is never ready (kstatus calls it Current); a Succeeded pod is done.
func checkPod(u *unstructured.Unstructured) Result {
	phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
	switch phase {
	case "Failed":
		return Result{Status: Failed, Message: "the pod failed", Terminal: true}
	case "Succeeded":
		return Result{Status: Ready, Message: "the pod succeeded"}
	case "Running":
		for _, c := range conditions(u) {
			if c.typ == "Ready" && c.status == "True" {
				return Result{Status: Ready, Message: "running and ready"}
			}
		}
	}
	return Result{Status: InProgress, Message: "pod phase " + phase}
}

type condition struct{ typ, status, message string }

func conditions(u *unstructured.Unstructured) []condition {
	raw, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	out := make([]condition, 0, len(raw))
	for _, r := range raw {
		m, ok := r.(map[string]any)
		if !ok {
			continue
		}
		t, _ := m["type"].(string)
		s, _ := m["status"].(string)
		msg, _ := m["message"].(string)
		out = append(out, condition{t, s, msg})
	}
	return out
}

func hasConditions(u *unstructured.Unstructured) bool {
	raw, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	return len(raw) > 0
}

// builtin reports whether an API group is served by Kubernetes itself rather than a CRD.
func builtin(group string) bool {
	switch group {
	case "", "apps", "batch", "policy", "autoscaling", "rbac.authorization.k8s.io", "networking.k8s.io",
		"storage.k8s.io", "apiextensions.k8s.io", "admissionregistration.k8s.io", "scheduling.k8s.io",
		"coordination.k8s.io", "certificates.k8s.io", "discovery.k8s.io", "node.k8s.io",
		"flowcontrol.apiserver.k8s.io", "apiregistration.k8s.io", "resource.k8s.io", "events.k8s.io",
		"internal.apiserver.k8s.io", "storagemigration.k8s.io":
		return true
	}
	return strings.HasSuffix(group, ".internal.k8s.io")
}
