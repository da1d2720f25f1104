// Package manager wires wavegate's webhook, policy store and controllers into a controller-runtime
// manager. It holds no business logic.
package manager

import (
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
	"wavegate.io/wavegate/pkg/mutate"
	"wavegate.io/wavegate/pkg/policy"
	"wavegate.io/wavegate/pkg/webhookconfig"
)

// Scheme knows the built-in kinds and wavegate's API.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(fmt.Sprintf("registering client-go types: %v", err))
	}
	if err := wavev1.AddToScheme(s); err != nil {
		panic(fmt.Sprintf("registering wavegate types: %v", err))
	}
	return s
}

// +kubebuilder:rbac:groups=wavegate.io,resources=wavepolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=wavegate.io,resources=wavepolicies/status,verbs=get;patch;update

// Config is what the manager is told on its command line.
type Config struct {
	// WebhookConfigurationName is wavegate's MutatingWebhookConfiguration.
	WebhookConfigurationName string
}

// DefaultWebhookConfigurationName is the name config/default installs.
const DefaultWebhookConfigurationName = "wavegate-mutating-webhook-configuration"

// CacheOptions restricts the manager's cache to what wavegate manages: its own webhook
// configuration, not every one in the cluster.
func CacheOptions(cfg Config) cache.Options {
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&admissionregistrationv1.MutatingWebhookConfiguration{}: {
			Field: fields.OneTermEqualSelector("metadata.name", cfg.WebhookConfigurationName),
		},
	}}
}

// Wavegate is what Setup added to a manager.
type Wavegate struct {
	// Policies is the compiled WavePolicies every replica serves admission from.
	Policies *policy.Store
}

// Setup adds wavegate's components to mgr.
func Setup(mgr ctrl.Manager, cfg Config) (*Wavegate, error) {
	store := policy.NewStore(mgr.GetCache())
	if err := mgr.Add(store); err != nil {
		return nil, fmt.Errorf("adding the policy store: %w", err)
	}
	mgr.GetWebhookServer().Register(mutate.Path, &mutate.Server{Policies: store})

	if err := (&policy.StatusReconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the WavePolicy status controller: %w", err)
	}
	if err := (&webhookconfig.Reconciler{Client: mgr.GetClient(), Name: cfg.WebhookConfigurationName}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the webhook configuration controller: %w", err)
	}

	if err := mgr.AddReadyzCheck("policies", store.ReadyCheck); err != nil {
		return nil, fmt.Errorf("adding the policies readiness check: %w", err)
	}
	if err := mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
		return nil, fmt.Errorf("adding the webhook readiness check: %w", err)
	}
	if err := mgr.AddHealthzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
		return nil, fmt.Errorf("adding the webhook health check: %w", err)
	}
	return &Wavegate{Policies: store}, nil
}
