// Package webhookconfig keeps wavegate's MutatingWebhookConfiguration in step with the policies:
// a WavePolicy may name an existing label (for example app.kubernetes.io/component) that carries
// the group, and objects with that label must reach the webhook too. Object selectors cannot
// express "label A or label B", so each such label gets its own webhook entry, a copy of the
// generated base entry with its own object selector.
package webhookconfig

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/policy"
)

// BaseWebhookName and BaseValidatingWebhookName are the generated webhook entries that the label
// entries copy.
const (
	BaseWebhookName           = "objects.wavegate.io"
	BaseValidatingWebhookName = "teardown.wavegate.io"
)

// labelWebhookSuffix ends the name of every entry this controller owns.
const labelWebhookSuffix = ".labels.wavegate.io"

// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations,verbs=get;list;watch
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations,verbs=patch;update,resourceNames=wavegate-mutating-webhook-configuration
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingwebhookconfigurations,verbs=get;list;watch
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingwebhookconfigurations,verbs=patch;update,resourceNames=wavegate-validating-webhook-configuration

// Reconciler maintains the label entries of wavegate's mutating and validating webhook
// configurations.
type Reconciler struct {
	Client client.Client
	// Name of wavegate's MutatingWebhookConfiguration; ValidatingName of its
	// ValidatingWebhookConfiguration ("" maintains only the mutating one).
	Name, ValidatingName string
}

// SetupWithManager registers the controller: any policy change or change of the configurations
// themselves reconciles both.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	toConfig := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: r.Name}}}
	})
	ours := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() == r.Name || o.GetName() == r.ValidatingName })
	b := ctrl.NewControllerManagedBy(mgr).
		Named("webhookconfig").
		For(&admissionregistrationv1.MutatingWebhookConfiguration{}, builder.WithPredicates(ours)).
		Watches(&wavev1.WavePolicy{}, toConfig)
	if r.ValidatingName != "" {
		b = b.Watches(&admissionregistrationv1.ValidatingWebhookConfiguration{}, toConfig, builder.WithPredicates(ours))
	}
	return b.Complete(r)
}

// Reconcile implements reconcile.Reconciler.
func (r *Reconciler) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	var policies wavev1.WavePolicyList
	if err := r.Client.List(ctx, &policies); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing WavePolicies: %w", err)
	}
	labels := policy.Compile(policies.Items).GroupLabels()[1:]
	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: r.Name}, mutating); client.IgnoreNotFound(err) != nil {
		return ctrl.Result{}, err
	} else if err == nil {
		want, err := Webhooks(mutating.Webhooks, labels)
		if err != nil {
			return ctrl.Result{}, err
		}
		if res, err := r.update(ctx, mutating, func() bool {
			changed := !equality.Semantic.DeepEqual(want, mutating.Webhooks)
			mutating.Webhooks = want
			return changed
		}); err != nil || res.Requeue {
			return res, err
		}
	}
	if r.ValidatingName == "" {
		return ctrl.Result{}, nil
	}
	validating := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: r.ValidatingName}, validating); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	want, err := ValidatingWebhooks(validating.Webhooks, labels)
	if err != nil {
		return ctrl.Result{}, err
	}
	return r.update(ctx, validating, func() bool {
		changed := !equality.Semantic.DeepEqual(want, validating.Webhooks)
		validating.Webhooks = want
		return changed
	})
}

// update patches a configuration with optimistic locking when set changes it.
func (r *Reconciler) update(ctx context.Context, cfg client.Object, set func() bool) (ctrl.Result, error) {
	patch := client.MergeFromWithOptions(cfg.DeepCopyObject().(client.Object), client.MergeFromWithOptimisticLock{})
	if !set() {
		return ctrl.Result{}, nil
	}
	if err := r.Client.Patch(ctx, cfg, patch); err != nil {
		if apierrors.IsConflict(err) {
			return ctrl.Result{Requeue: true}, nil
		}
		return ctrl.Result{}, fmt.Errorf("patching %s: %w", klog.KObj(cfg), err)
	}
	ctrl.LoggerFrom(ctx).Info("Updated the webhook entries for policy group labels", "configuration", klog.KObj(cfg))
	return ctrl.Result{}, nil
}

// Webhooks returns the mutating webhook list with exactly one label entry per group label, in label
// order, after the entries this controller does not own. It is pure.
func Webhooks(current []admissionregistrationv1.MutatingWebhook, groupLabels []string) ([]admissionregistrationv1.MutatingWebhook, error) {
	return withLabelEntries(current, groupLabels, BaseWebhookName, func(w admissionregistrationv1.MutatingWebhook) string { return w.Name },
		func(w admissionregistrationv1.MutatingWebhook, name string, sel *metav1.LabelSelector) admissionregistrationv1.MutatingWebhook {
			c := *w.DeepCopy()
			c.Name, c.ObjectSelector = name, sel
			c.MatchConditions = append(c.MatchConditions, namesItsSequenceIfClusterScoped)
			return c
		})
}

// namesItsSequenceIfClusterScoped keeps a policy's group label from bringing cluster-scoped objects
// to the webhook: the API server applies no namespace selector to them, and charts set labels such
// as app.kubernetes.io/component on their ClusterRoles and CRDs for their own reasons. Such an
// object joins a sequence only by naming it (pkg/resolve), so only then is it worth a call, and a
// wavegate outage (the mutating entries fail closed) blocks no other cluster-scoped write.
var namesItsSequenceIfClusterScoped = admissionregistrationv1.MatchCondition{
	Name: "namespaced-or-names-its-sequence",
	Expression: `has(request.namespace) && request.namespace != "" || ` +
		`(object != null && has(object.metadata.labels) && "` + keys.SequenceLabel + `" in object.metadata.labels) || ` +
		`(oldObject != null && has(oldObject.metadata.labels) && "` + keys.SequenceLabel + `" in oldObject.metadata.labels)`,
}

// ValidatingWebhooks is Webhooks for the validating configuration (the DELETE check).
func ValidatingWebhooks(current []admissionregistrationv1.ValidatingWebhook, groupLabels []string) ([]admissionregistrationv1.ValidatingWebhook, error) {
	return withLabelEntries(current, groupLabels, BaseValidatingWebhookName, func(w admissionregistrationv1.ValidatingWebhook) string { return w.Name },
		func(w admissionregistrationv1.ValidatingWebhook, name string, sel *metav1.LabelSelector) admissionregistrationv1.ValidatingWebhook {
			c := *w.DeepCopy()
			c.Name, c.ObjectSelector = name, sel
			c.MatchConditions = append(c.MatchConditions, namesItsSequenceIfClusterScoped)
			return c
		})
}

// withLabelEntries keeps the entries this controller does not own and appends, per group label, a
// copy of the base entry that selects objects carrying that label.
func withLabelEntries[W any](current []W, groupLabels []string, base string, name func(W) string,
	derive func(W, string, *metav1.LabelSelector) W) ([]W, error) {
	var out []W
	var b *W
	for i := range current {
		if isLabelEntry(name(current[i])) {
			continue
		}
		out = append(out, current[i])
		if name(current[i]) == base {
			b = &current[i]
		}
	}
	if b == nil {
		return nil, fmt.Errorf("the webhook configuration has no entry %q to copy", base)
	}
	labels := slices.Clone(groupLabels)
	slices.Sort(labels)
	for _, l := range slices.Compact(labels) {
		out = append(out, derive(*b, EntryName(l), &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: l, Operator: metav1.LabelSelectorOpExists},
			// Objects with wavegate.io/group already reach the base entry.
			{Key: keys.GroupLabel, Operator: metav1.LabelSelectorOpDoesNotExist},
			{Key: keys.WaitJobLabel, Operator: metav1.LabelSelectorOpDoesNotExist},
		}}))
	}
	return out, nil
}

// EntryName is the webhook entry name for a group label: deterministic and a valid DNS name.
func EntryName(label string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(label))
	return fmt.Sprintf("g%08x%s", h.Sum32(), labelWebhookSuffix)
}

func isLabelEntry(name string) bool {
	return len(name) > len(labelWebhookSuffix) && name[len(name)-len(labelWebhookSuffix):] == labelWebhookSuffix
}
