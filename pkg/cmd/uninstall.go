package cmd

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
	"wavegate.io/wavegate/pkg/manager"
	"wavegate.io/wavegate/pkg/policy"
	"wavegate.io/wavegate/pkg/teardown"
)

func newUninstallCommand() *cobra.Command {
	var names []string
	c := &cobra.Command{
		Use:   "uninstall",
		Short: "Release every wavegate finalizer and gate so that wavegate can be removed safely",
		Long: "Deletes wavegate's webhook configurations, then removes the teardown finalizer from every object\n" +
			"and the scheduling gate from every pod. Run it before `kubectl delete -k config/default`.",
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := ctrl.GetConfig()
			if err != nil {
				return err
			}
			kube, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return err
			}
			md, err := metadata.NewForConfig(cfg)
			if err != nil {
				return err
			}
			disco, err := discovery.NewDiscoveryClientForConfig(cfg)
			if err != nil {
				return err
			}
			c, err := client.New(cfg, client.Options{Scheme: manager.Scheme()})
			if err != nil {
				return err
			}
			groupLabels, err := uninstallGroupLabels(cmd.Context(), c)
			if err != nil {
				return err
			}
			return (&teardown.Uninstall{Kube: kube, Metadata: md, Discovery: disco, WebhookConfigurations: names,
				GroupLabels: groupLabels, Out: cmd.OutOrStdout()}).Run(cmd.Context())
		},
	}
	c.Flags().StringSliceVar(&names, "webhook-configurations", []string{
		manager.DefaultWebhookConfigurationName, "wavegate-validating-webhook-configuration"}, "wavegate's webhook configurations")
	return c
}

// uninstallGroupLabels returns the labels that group objects: wavegate.io/group and the policies'
// group labels. The CRD may already be gone: then only wavegate.io/group groups objects. Any other
// failure stops the uninstall before anything is removed: without the policies' group labels, the
// objects grouped by one (app.kubernetes.io/component, say) would keep wavegate's finalizer while
// the uninstall reported success.
func uninstallGroupLabels(ctx context.Context, c client.Reader) ([]string, error) {
	var policies wavev1.WavePolicyList
	if err := c.List(ctx, &policies); err != nil && !apierrors.IsNotFound(err) && !meta.IsNoMatchError(err) {
		return nil, fmt.Errorf("listing WavePolicies (their group labels find what wavegate holds): %w", err)
	}
	return policy.Compile(policies.Items).GroupLabels(), nil
}
