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

// BaseWebhookName is the generated webhook entry that the label entries copy.
const BaseWebhookName = "objects.wavegate.io"

// labelWebhookSuffix ends the name of every entry this controller owns.
const labelWebhookSuffix = ".labels.wavegate.io"

// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations,verbs=get;list;watch
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations,verbs=patch;update,resourceNames=wavegate-mutating-webhook-configuration

// Reconciler maintains the label entries of one MutatingWebhookConfiguration.
type Reconciler struct {
	Client client.Client
	// Name of wavegate's MutatingWebhookConfiguration.
	Name string
}

// SetupWithManager registers the controller: any policy change or change of the configuration
// itself reconciles the one configuration.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	toConfig := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: r.Name}}}
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("webhookconfig").
		For(&admissionregistrationv1.MutatingWebhookConfiguration{}, builder.WithPredicates(
			predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() == r.Name }))).
		Watches(&wavev1.WavePolicy{}, toConfig).
		Complete(r)
}

// Reconcile implements reconcile.Reconciler.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := r.Client.Get(ctx, req.NamespacedName, cfg); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	var policies wavev1.WavePolicyList
	if err := r.Client.List(ctx, &policies); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing WavePolicies: %w", err)
	}
	want, err := Webhooks(cfg.Webhooks, policy.Compile(policies.Items).GroupLabels()[1:])
	if err != nil {
		return ctrl.Result{}, err
	}
	if equality.Semantic.DeepEqual(want, cfg.Webhooks) {
		return ctrl.Result{}, nil
	}
	patch := client.MergeFromWithOptions(cfg.DeepCopy(), client.MergeFromWithOptimisticLock{})
	cfg.Webhooks = want
	if err := r.Client.Patch(ctx, cfg, patch); err != nil {
		if apierrors.IsConflict(err) {
			return ctrl.Result{Requeue: true}, nil
		}
		return ctrl.Result{}, fmt.Errorf("patching %s: %w", klog.KObj(cfg), err)
	}
	log.Info("Updated the webhook entries for policy group labels", "configuration", klog.KObj(cfg), "labels", len(want)-1)
	return ctrl.Result{}, nil
}

// Webhooks returns the webhook list with exactly one label entry per group label, in label order,
// after the entries this controller does not own. It is pure.
func Webhooks(current []admissionregistrationv1.MutatingWebhook, groupLabels []string) ([]admissionregistrationv1.MutatingWebhook, error) {
	var out []admissionregistrationv1.MutatingWebhook
	var base *admissionregistrationv1.MutatingWebhook
	for i := range current {
		if isLabelEntry(current[i].Name) {
			continue
		}
		out = append(out, current[i])
		if current[i].Name == BaseWebhookName {
			base = &current[i]
		}
	}
	if base == nil {
		return nil, fmt.Errorf("the webhook configuration has no entry %q to copy", BaseWebhookName)
	}
	labels := slices.Clone(groupLabels)
	slices.Sort(labels)
	for _, l := range slices.Compact(labels) {
		w := *base.DeepCopy()
		w.Name = EntryName(l)
		w.ObjectSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: l, Operator: metav1.LabelSelectorOpExists},
			// Objects with wavegate.io/group already reach the base entry.
			{Key: keys.GroupLabel, Operator: metav1.LabelSelectorOpDoesNotExist},
			{Key: keys.WaitJobLabel, Operator: metav1.LabelSelectorOpDoesNotExist},
		}}
		out = append(out, w)
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
