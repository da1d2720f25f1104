// Package readiness decides whether a group member is ready. It starts from kstatus (Flux's
// maintained fork of sigs.k8s.io/cli-utils) and corrects the cases where kstatus would release a
// group early (a started or suspended Job, a Failed pod, an OnDelete StatefulSet whose pods are not
// ready, an APIService that is not Available, a custom resource that reports nothing) or never
// (a PersistentVolumeClaim that waits for its first consumer). A policy can add per-kind CEL rules,
// which replace the built-in rule of their kind. docs/readiness-table.md lists the rule per kind.
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
	loadBalancerIngress          bool
	rules                        map[schema.GroupVersionKind]rule
}

// Option adjusts a Checker beyond the policy's Readiness settings.
type Option func(*Checker)

// WithLoadBalancerIngress makes a Service of type LoadBalancer ready only once
// status.loadBalancer.ingress lists an address. Off, such a Service is ready once it has a cluster
// IP, like any other Service (kstatus).
func WithLoadBalancerIngress(on bool) Option {
	return func(c *Checker) { c.loadBalancerIngress = on }
}

type rule struct {
	current, failed cel.Program
}

// NewChecker compiles a policy's readiness settings. A rule that does not compile is an error
// naming the rule.
func NewChecker(r wavev1.Readiness, opts ...Option) (*Checker, error) {
	c := &Checker{assumeReadyWithoutConditions: r.AssumeReadyWithoutConditions, loadBalancerIngress: r.LoadBalancerIngress,
		rules: map[schema.GroupVersionKind]rule{}}
	for _, o := range opts {
		o(c)
	}
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

// Check returns the readiness of u without reading anything else: CheckIn(u, nil). A Pending
// PersistentVolumeClaim is then in progress, since its StorageClass cannot be read.
func (c *Checker) Check(u *unstructured.Unstructured) Result {
	return c.CheckIn(u, nil)
}

// CheckIn returns the readiness of u, reading what its kind's rule needs from env (today the
// StorageClasses of PersistentVolumeClaims). env may be nil.
func (c *Checker) CheckIn(u *unstructured.Unstructured, env Env) Result {
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
	case schema.GroupKind{Kind: "PersistentVolumeClaim"}:
		return checkClaim(u, env)
	case schema.GroupKind{Group: "apps", Kind: "StatefulSet"}:
		if s, _, _ := unstructured.NestedString(u.Object, "spec", "updateStrategy", "type"); s == "OnDelete" {
			return statefulSetAvailable(u, checkOnDeleteStatefulSet(u))
		}
		return statefulSetAvailable(u, c.computed(u))
	case schema.GroupKind{Kind: "Service"}:
		if t, _, _ := unstructured.NestedString(u.Object, "spec", "type"); t == "LoadBalancer" && c.loadBalancerIngress {
			return checkLoadBalancer(u)
		}
	case schema.GroupKind{Group: "apiregistration.k8s.io", Kind: "APIService"}:
		return checkAPIService(u)
	}
	return c.computed(u)
}

// computed is kstatus's readiness of u, and the policy's for a custom resource kstatus calls Current.
func (c *Checker) computed(u *unstructured.Unstructured) Result {
	res, err := status.Compute(u)
	if err != nil {
		return Result{Status: InProgress, Message: fmt.Sprintf("cannot compute status: %v", err)}
	}
	if res.Message == "" {
		res.Message = describe(u, res.Status)
	}
	switch res.Status {
	case status.CurrentStatus:
		if !builtin(u.GroupVersionKind().Group) {
			return c.checkCustom(u, res.Message)
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

// checkJob: a Job is ready only when Complete (kstatus calls a started Job Current); a suspended
// Job is never ready, whatever its conditions say.
func checkJob(u *unstructured.Unstructured) Result {
	conds := conditions(u)
	if c, ok := findTrue(conds, "Failed"); ok {
		why := c.message
		if why == "" {
			why = c.reason
		}
		return Result{Status: Failed, Message: "failed: " + why, Terminal: true}
	}
	if suspend, _, _ := unstructured.NestedBool(u.Object, "spec", "suspend"); suspend {
		return Result{Status: InProgress, Message: "suspended"}
	}
	if _, ok := findTrue(conds, "Suspended"); ok {
		return Result{Status: InProgress, Message: "suspended"}
	}
	if _, ok := findTrue(conds, "Complete"); ok {
		return Result{Status: Ready, Message: "complete"}
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
		if _, ok := findTrue(conditions(u), "Ready"); ok {
			return Result{Status: Ready, Message: "running and ready"}
		}
	}
	return Result{Status: InProgress, Message: "pod phase " + phase}
}

// checkClaim: a Bound claim is ready and a Lost one failed for good. A Pending claim is ready when
// it waits for its first consumer: its StorageClass binds WaitForFirstConsumer, no node has been
// selected for it yet and it does not name its volume. Kubernetes binds such a claim only once a
// pod that uses it is scheduled, and that pod may be in a later group.
func checkClaim(u *unstructured.Unstructured, env Env) Result {
	phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
	switch phase {
	case "Bound":
		return Result{Status: Ready, Message: "bound"}
	case "Lost":
		return Result{Status: Failed, Message: "lost: its PersistentVolume is gone", Terminal: true}
	case "", "Pending":
	default:
		return Result{Status: InProgress, Message: "phase " + phase}
	}
	if v, _, _ := unstructured.NestedString(u.Object, "spec", "volumeName"); v != "" {
		// The PersistentVolume controller binds a claim that names its volume without waiting.
		return Result{Status: InProgress, Message: fmt.Sprintf("pending: waiting to bind to PersistentVolume %s", v)}
	}
	if node, ok := u.GetAnnotations()[AnnSelectedNode]; ok {
		return Result{Status: InProgress, Message: fmt.Sprintf("pending: being provisioned or bound for node %s", node)}
	}
	class, named := claimClass(u)
	if named && class == "" {
		return Result{Status: InProgress, Message: `pending: requests no StorageClass (storageClassName ""), waiting for a PersistentVolume without one`}
	}
	if env == nil {
		return Result{Status: InProgress, Message: "pending: cannot read its StorageClass"}
	}
	if !named {
		name, found, err := env.DefaultStorageClass()
		switch {
		case err != nil:
			return Result{Status: InProgress, Message: fmt.Sprintf("pending: the default StorageClass could not be read: %v", err)}
		case !found:
			return Result{Status: InProgress, Message: "pending: names no StorageClass and there is no default StorageClass"}
		}
		class = name
	}
	mode, found, err := env.StorageClass(class)
	switch {
	case err != nil:
		return Result{Status: InProgress, Message: fmt.Sprintf("pending: StorageClass %s could not be read: %v", class, err)}
	case !found:
		return Result{Status: InProgress, Message: fmt.Sprintf("pending: StorageClass %s not found", class)}
	case mode == "WaitForFirstConsumer":
		return Result{Status: Ready, Message: fmt.Sprintf("pending: waits for its first consumer (StorageClass %s is WaitForFirstConsumer)", class)}
	default:
		return Result{Status: InProgress, Message: fmt.Sprintf("pending: StorageClass %s binds %s", class, mode)}
	}
}

// claimClass returns the claim's class and whether it names one at all (an empty name is "no
// class"; no name at all is the default class). The beta annotation wins, as in Kubernetes.
func claimClass(u *unstructured.Unstructured) (string, bool) {
	if c, ok := u.GetAnnotations()[AnnBetaStorageClass]; ok {
		return c, true
	}
	c, found, err := unstructured.NestedString(u.Object, "spec", "storageClassName")
	if err != nil {
		// storageClassName: null
		return "", false
	}
	return c, found
}

// checkOnDeleteStatefulSet: kstatus calls every OnDelete StatefulSet Current. Its pods are replaced
// only when deleted, so the update revision is not waited for; but the controller must have
// observed the spec and the replicas must be ready.
func checkOnDeleteStatefulSet(u *unstructured.Unstructured) Result {
	if r, ok := generationNotObserved(u); ok {
		return r
	}
	spec := int64Field(u, 1, "spec", "replicas")
	replicas := int64Field(u, 0, "status", "replicas")
	ready := int64Field(u, 0, "status", "readyReplicas")
	switch {
	case spec > replicas:
		return Result{Status: InProgress, Message: fmt.Sprintf("Replicas: %d/%d", replicas, spec)}
	case spec > ready:
		return Result{Status: InProgress, Message: fmt.Sprintf("Ready: %d/%d", ready, spec)}
	case replicas > spec:
		return Result{Status: InProgress, Message: fmt.Sprintf("Pending termination: %d", replicas-spec)}
	}
	return Result{Status: Ready, Message: fmt.Sprintf("%d/%d ready (OnDelete: pods are updated when deleted)", ready, spec)}
}

// statefulSetAvailable holds a StatefulSet with minReadySeconds until its pods are available, as a
// Deployment's and a DaemonSet's are waited for: kstatus (and the controller's currentRevision)
// count ready pods, which a StatefulSet with minReadySeconds: 60 has a minute before they are
// available.
func statefulSetAvailable(u *unstructured.Unstructured, r Result) Result {
	if r.Status != Ready || int64Field(u, 0, "spec", "minReadySeconds") <= 0 {
		return r
	}
	spec := int64Field(u, 1, "spec", "replicas")
	if available := int64Field(u, 0, "status", "availableReplicas"); available < spec {
		return Result{Status: InProgress, Message: fmt.Sprintf("Available: %d/%d (minReadySeconds)", available, spec)}
	}
	return r
}

// checkLoadBalancer: with WithLoadBalancerIngress, a LoadBalancer Service waits for an address.
func checkLoadBalancer(u *unstructured.Unstructured) Result {
	ingress, _, _ := unstructured.NestedSlice(u.Object, "status", "loadBalancer", "ingress")
	if len(ingress) == 0 {
		return Result{Status: InProgress, Message: "waiting for a load balancer ingress address"}
	}
	var addrs []string
	for _, i := range ingress {
		m, _ := i.(map[string]any)
		for _, k := range []string{"ip", "hostname"} {
			if a, _ := m[k].(string); a != "" {
				addrs = append(addrs, a)
			}
		}
	}
	return Result{Status: Ready, Message: "load balancer ingress " + strings.Join(addrs, ", ")}
}

// checkAPIService: an APIService is ready when Available (kstatus knows only Ready conditions and
// calls every APIService Current).
func checkAPIService(u *unstructured.Unstructured) Result {
	c, ok := find(conditions(u), "Available")
	if !ok {
		return Result{Status: InProgress, Message: "no Available condition yet"}
	}
	if c.status != "True" {
		return Result{Status: InProgress, Message: conditionString(c)}
	}
	return Result{Status: Ready, Message: "available"}
}

// checkCustom refines kstatus's Current for a custom resource. kstatus has already turned away a
// stale status.observedGeneration, Reconciling=True, Stalled=True and Ready other than True. Here:
// a Ready=True or (without Ready) Available=True condition must describe the current generation
// when it says which one it describes; Available other than True is not ready; a resource with no
// conditions at all is not ready unless the policy assumes so; other conditions are left to
// kstatus (Current).
func (c *Checker) checkCustom(u *unstructured.Unstructured, kstatusMessage string) Result {
	conds := conditions(u)
	if len(conds) == 0 {
		if c.assumeReadyWithoutConditions {
			return Result{Status: Ready, Message: "no conditions; the policy assumes ready"}
		}
		return Result{Status: InProgress, Message: "the custom resource reports no conditions yet"}
	}
	cond, ok := find(conds, "Ready")
	if !ok {
		if cond, ok = find(conds, "Available"); ok && cond.status != "True" {
			return Result{Status: InProgress, Message: conditionString(cond)}
		}
	}
	if !ok {
		return Result{Status: Ready, Message: kstatusMessage}
	}
	if cond.status != "True" {
		return Result{Status: InProgress, Message: conditionString(cond)}
	}
	if gen := u.GetGeneration(); cond.hasObservedGeneration && cond.observedGeneration < gen {
		return Result{Status: InProgress, Message: fmt.Sprintf("the %s condition describes generation %d, not %d", cond.typ, cond.observedGeneration, gen)}
	}
	return Result{Status: Ready, Message: cond.typ + "=True"}
}

// describe names the condition kstatus decided on when it gave no message (a condition without
// reason or message).
func describe(u *unstructured.Unstructured, st status.Status) string {
	conds := conditions(u)
	if c, ok := findTrue(conds, "Stalled"); ok {
		return conditionString(c)
	}
	if c, ok := findTrue(conds, "Reconciling"); ok {
		return conditionString(c)
	}
	if c, ok := find(conds, "Ready"); ok && c.status != "True" {
		return conditionString(c)
	}
	return "kstatus: " + st.String()
}

// conditionString is "Type=Status Reason: message".
func conditionString(c condition) string {
	msg := fmt.Sprintf("%s=%s", c.typ, c.status)
	if c.reason != "" {
		msg += " " + c.reason
	}
	if c.message != "" {
		msg += ": " + c.message
	}
	return msg
}

// generationNotObserved is in progress when status.observedGeneration is missing or behind
// metadata.generation.
func generationNotObserved(u *unstructured.Unstructured) (Result, bool) {
	gen := u.GetGeneration()
	observed, found, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
	if !found {
		return Result{Status: InProgress, Message: "status.observedGeneration not reported yet"}, true
	}
	if observed < gen {
		return Result{Status: InProgress, Message: fmt.Sprintf("generation %d not observed yet (observed %d)", gen, observed)}, true
	}
	return Result{}, false
}

func int64Field(u *unstructured.Unstructured, def int64, path ...string) int64 {
	v, found, err := unstructured.NestedFieldNoCopy(u.Object, path...)
	if !found || err != nil {
		return def
	}
	switch n := v.(type) {
	case int64:
		return n
	case int:
		return int64(n)
	case float64:
		return int64(n)
	}
	return def
}

type condition struct {
	typ, status, reason, message string
	observedGeneration           int64
	hasObservedGeneration        bool
}

func conditions(u *unstructured.Unstructured) []condition {
	raw, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	out := make([]condition, 0, len(raw))
	for _, r := range raw {
		m, ok := r.(map[string]any)
		if !ok {
			continue
		}
		var c condition
		c.typ, _ = m["type"].(string)
		c.status, _ = m["status"].(string)
		c.reason, _ = m["reason"].(string)
		c.message, _ = m["message"].(string)
		switch g := m["observedGeneration"].(type) {
		case int64:
			c.observedGeneration, c.hasObservedGeneration = g, true
		case int:
			c.observedGeneration, c.hasObservedGeneration = int64(g), true
		case float64:
			c.observedGeneration, c.hasObservedGeneration = int64(g), true
		}
		out = append(out, c)
	}
	return out
}

// find returns the first condition of a type.
func find(conds []condition, typ string) (condition, bool) {
	for _, c := range conds {
		if c.typ == typ {
			return c, true
		}
	}
	return condition{}, false
}

// findTrue returns the first condition of a type whose status is True.
func findTrue(conds []condition, typ string) (condition, bool) {
	for _, c := range conds {
		if c.typ == typ && c.status == "True" {
			return c, true
		}
	}
	return condition{}, false
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
