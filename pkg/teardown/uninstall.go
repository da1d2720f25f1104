package teardown

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"

	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/members"
	"wavegate.io/wavegate/pkg/patch"
)

// Uninstall makes wavegate safe to remove: it deletes wavegate's webhook configurations, so that
// no new gate or finalizer is added, then removes the teardown finalizer from every object and the
// scheduling gate from every pod. Run it before deleting wavegate's manifests; it is idempotent.
type Uninstall struct {
	Kube      kubernetes.Interface
	Metadata  metadata.Interface
	Discovery discovery.DiscoveryInterface
	// WebhookConfigurations are the names of wavegate's webhook configurations.
	WebhookConfigurations []string
	// GroupLabels are the labels that carry groups (wavegate.io/group and policy group labels).
	GroupLabels []string
	Out         io.Writer
}

// Run performs the uninstall.
func (u *Uninstall) Run(ctx context.Context) error {
	for _, name := range u.WebhookConfigurations {
		if err := u.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting MutatingWebhookConfiguration %s: %w", name, err)
		}
		if err := u.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting ValidatingWebhookConfiguration %s: %w", name, err)
		}
	}
	fmt.Fprintf(u.Out, "deleted webhook configurations %s\n", strings.Join(u.WebhookConfigurations, ", "))

	// Every kind (pods for their gates, and any kind an older wavegate may have finalized). Not only
	// those discovery says can be patched: the custom resources of a CRD being deleted are served
	// without patch in discovery, yet their finalizers can (and must) be removed, else the CRD stays
	// terminating for good. A kind that truly refuses patches holds no finalizer of ours.
	kinds, failed, err := members.DiscoverAll(u.Discovery, "list")
	if err != nil {
		return err
	}
	for _, group := range slices.Sorted(maps.Keys(failed)) {
		fmt.Fprintf(u.Out, "warning: could not discover API group %q (%v); run uninstall again once it is served, if its objects hold wavegate's finalizer\n", group, failed[group])
	}
	patchable, _, err := members.DiscoverAll(u.Discovery, "list", "patch")
	if err != nil {
		return err
	}
	writable := map[schema.GroupVersionResource]bool{}
	for _, k := range patchable {
		writable[k.GVR] = true
	}
	finalizers, gates := 0, 0
	for _, k := range kinds {
		gvr := k.GVR
		for _, label := range u.GroupLabels {
			req, _ := labels.NewRequirement(label, selection.Exists, nil)
			list, err := u.Metadata.Resource(gvr).List(ctx, metav1.ListOptions{LabelSelector: labels.NewSelector().Add(*req).String()})
			if err != nil {
				if apierrors.IsNotFound(err) || apierrors.IsMethodNotSupported(err) {
					continue
				}
				if !writable[gvr] {
					// A read-only kind (metrics, an aggregated API that is down) or a CRD being deleted
					// whose objects do not list: it is reported, not fatal (the webhooks are gone already).
					fmt.Fprintf(u.Out, "warning: could not list %s (%v); run uninstall again once it lists, if it holds wavegate's finalizer\n", gvr, err)
					continue
				}
				return fmt.Errorf("listing %s: %w", gvr, err)
			}
			for _, o := range list.Items {
				if i := slices.Index(o.Finalizers, keys.TeardownFinalizer); i >= 0 {
					if err := u.remove(ctx, gvr, o.Namespace, o.Name, "/metadata/finalizers", i, keys.TeardownFinalizer); err != nil {
						return err
					}
					finalizers++
				}
			}
			if gvr.Group == "" && gvr.Resource == "pods" {
				n, err := u.ungate(ctx, list.Items)
				if err != nil {
					return err
				}
				gates += n
			}
		}
	}
	fmt.Fprintf(u.Out, "removed %d teardown finalizers and %d scheduling gates; wavegate's manifests can now be deleted\n", finalizers, gates)
	return nil
}

func (u *Uninstall) ungate(ctx context.Context, pods []metav1.PartialObjectMetadata) (int, error) {
	n := 0
	for _, p := range pods {
		pod, err := u.Kube.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			// Left gated, the pod would stay Pending for good once wavegate is gone: say so.
			return n, fmt.Errorf("reading pod %s/%s to remove its scheduling gate: %w", p.Namespace, p.Name, err)
		}
		for i, g := range pod.Spec.SchedulingGates {
			if g.Name == keys.SchedulingGate {
				if err := u.remove(ctx, schema.GroupVersionResource{Version: "v1", Resource: "pods"}, p.Namespace, p.Name, "/spec/schedulingGates", i,
					map[string]string{"name": keys.SchedulingGate}); err != nil {
					return n, err
				}
				n++
			}
		}
	}
	return n, nil
}

// remove deletes element i of the list at path with a JSON patch that first tests the element is
// still test (a JSON value), so a concurrent change fails the patch instead of removing another.
func (u *Uninstall) remove(ctx context.Context, gvr schema.GroupVersionResource, ns, name, path string, i int, test any) error {
	body, err := patch.Marshal(patch.TestAndRemove(path, i, test)...)
	if err != nil {
		return err
	}
	_, err = u.Metadata.Resource(gvr).Namespace(ns).Patch(ctx, name, types.JSONPatchType, body, metav1.PatchOptions{FieldManager: keys.FieldManager})
	return ignoreGone(err, name)
}

func ignoreGone(err error, name string) error {
	if err == nil || apierrors.IsNotFound(err) {
		return nil
	}
	return fmt.Errorf("patching %s: %w", name, err)
}
