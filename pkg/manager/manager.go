// Package manager wires wavegate's webhook, policy store and controllers into a controller-runtime
// manager. It holds no business logic.
package manager

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/flowcontrol"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmanager "sigs.k8s.io/controller-runtime/pkg/manager"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/members"
	"wavegate.io/wavegate/pkg/mutate"
	"wavegate.io/wavegate/pkg/policy"
	"wavegate.io/wavegate/pkg/sequence"
	"wavegate.io/wavegate/pkg/teardown"
	"wavegate.io/wavegate/pkg/webhookconfig"
)

// strangerQPS and strangerBurst bound the stranger-pods controller's requests (a live read of the
// WavePolicies, of a namespace and a gate removal per pod it releases), apart from the manager's.
const (
	strangerQPS   = 10
	strangerBurst = 20
)

// Scheme knows the built-in kinds and wavegate's API.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(fmt.Sprintf("registering client-go types: %v", err))
	}
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		panic(fmt.Sprintf("registering apiextensions types: %v", err))
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
	// Namespace is wavegate's own namespace.
	Namespace string
	// WaiterImage is the image wait Jobs run (wavegate's own).
	WaiterImage string
	// SettleMax bounds how long members that keep changing hold their sequence's groups closed
	// (0: sequence.MembershipSettleMax). Tests shorten it.
	SettleMax time.Duration
}

// DefaultWebhookConfigurationName is the name config/default installs.
const DefaultWebhookConfigurationName = "wavegate-mutating-webhook-configuration"

// ValidatingName is the name of the ValidatingWebhookConfiguration installed beside a
// MutatingWebhookConfiguration: config/ names them <prefix>mutating-... and <prefix>validating-....
func ValidatingName(mutating string) string {
	return strings.Replace(mutating, "mutating", "validating", 1)
}

// CacheOptions restricts the manager's cache to what wavegate manages: its own webhook
// configuration, not every one in the cluster.
func CacheOptions(cfg Config) cache.Options {
	exists := func(key string) labels.Selector {
		req, _ := labels.NewRequirement(key, selection.Exists, nil)
		return labels.NewSelector().Add(*req)
	}
	waiterRBAC := labels.SelectorFromSet(labels.Set{keys.WaiterRBACLabel: "true"})
	return cache.Options{
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&admissionregistrationv1.MutatingWebhookConfiguration{}: {
				Field: fields.OneTermEqualSelector("metadata.name", cfg.WebhookConfigurationName),
			},
			&admissionregistrationv1.ValidatingWebhookConfiguration{}: {
				Field: fields.OneTermEqualSelector("metadata.name", ValidatingName(cfg.WebhookConfigurationName)),
			},
			// Only member pods and wait Jobs are cached, never the cluster's other pods and Jobs.
			&corev1.Pod{}:                {Label: exists(keys.GroupLabel), Transform: slimPod},
			&batchv1.Job{}:               {Label: labels.SelectorFromSet(labels.Set{keys.WaitJobLabel: "true"})},
			&corev1.ServiceAccount{}:     {Label: waiterRBAC},
			&rbacv1.Role{}:               {Label: waiterRBAC},
			&rbacv1.RoleBinding{}:        {Label: waiterRBAC},
			&rbacv1.ClusterRole{}:        {Label: waiterRBAC},
			&rbacv1.ClusterRoleBinding{}: {Label: waiterRBAC},
		},
	}
}

// slimPod keeps of a cached pod only what wavegate reads: metadata (labels, owners, deletion),
// its scheduling gates and node, and its phase. At 50k member pods the containers, volumes and
// status conditions would dominate the manager's memory.
func slimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	p.ManagedFields = nil
	delete(p.Annotations, keys.LastAppliedAnnotation)
	p.Spec = corev1.PodSpec{SchedulingGates: p.Spec.SchedulingGates, NodeName: p.Spec.NodeName}
	p.Status = corev1.PodStatus{Phase: p.Status.Phase}
	return p, nil
}

// Wavegate is what Setup added to a manager.
type Wavegate struct {
	// Policies is the compiled WavePolicies every replica serves admission from.
	Policies *policy.Store
	// Cleared is the pod templates admission lets start without a gate.
	Cleared *sequence.ClearedStore
	// Members tracks the group members (on the leader).
	Members *members.Tracker
	// Permissions says which kinds may carry the teardown finalizer.
	Permissions *teardown.Permissions

	namespaces *cachedNamespaces
}

// Ready reports whether everything admission reads from memory is loaded.
func (w *Wavegate) Ready() bool {
	return w.Policies.Synced() && w.Cleared.Synced() && w.Permissions.Ready() && w.namespaces.synced.Load()
}

// Setup adds wavegate's components to mgr.
func Setup(mgr ctrl.Manager, cfg Config) (*Wavegate, error) {
	store := policy.NewStore(mgr.GetCache())
	if err := mgr.Add(store); err != nil {
		return nil, fmt.Errorf("adding the policy store: %w", err)
	}
	later := &teardown.LaterStore{}
	cleared := sequence.NewClearedStore(mgr.GetCache(), later.Observe)
	if err := mgr.Add(cleared); err != nil {
		return nil, fmt.Errorf("adding the cleared-templates store: %w", err)
	}
	perms := &teardown.Permissions{Client: kubernetes.NewForConfigOrDie(mgr.GetConfig())}
	if err := mgr.Add(perms); err != nil {
		return nil, fmt.Errorf("adding the permission review: %w", err)
	}
	namespaces := &cachedNamespaces{cache: mgr.GetCache(), live: mgr.GetAPIReader()}
	if err := mgr.Add(namespaces); err != nil {
		return nil, fmt.Errorf("adding the namespace store: %w", err)
	}
	mgr.GetWebhookServer().Register(mutate.Path, &mutate.Server{Policies: store, Gates: cleared, Permissions: perms, Namespaces: namespaces})
	tracker, err := newTracker(mgr, store)
	if err != nil {
		return nil, err
	}
	mgr.GetWebhookServer().Register(mutate.DeletePath, &mutate.DeleteServer{Policies: store,
		Check: &teardown.Check{Later: later, Namespaces: namespaces, Metadata: tracker.Metadata}})
	tracker.CanWatch, tracker.Ready = perms.CanWatch, perms.Ready
	tracker.InScope = func(ns string) bool { return namespaces.optedIn(ns, cfg.Namespace) }
	namespaces.onOptIn = tracker.Rescope
	// A new CRD is a new kind whose objects may be members, and a new grant a kind the manager may
	// now watch: rediscover at once.
	if err := mgr.Add(crmanager.RunnableFunc(func(ctx context.Context) error {
		return refreshOnCRDs(ctx, mgr, perms, tracker)
	})); err != nil {
		return nil, err
	}
	if err := mgr.Add(tracker); err != nil {
		return nil, fmt.Errorf("adding the member tracker: %w", err)
	}
	if err := sequence.IndexPods(context.Background(), mgr); err != nil {
		return nil, err
	}
	// Wait Jobs' pods, in a cache of their own (the manager's pod cache holds member pods only).
	waitPods, err := cache.New(mgr.GetConfig(), cache.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(),
		ByObject: map[client.Object]cache.ByObject{&corev1.Pod{}: {
			Label: labels.SelectorFromSet(labels.Set{keys.WaitJobLabel: "true"}), Transform: slimPod}}})
	if err != nil {
		return nil, fmt.Errorf("creating the wait-Job pod cache: %w", err)
	}
	if err := mgr.Add(waitPods); err != nil {
		return nil, fmt.Errorf("adding the wait-Job pod cache: %w", err)
	}
	sequences := &sequence.Reconciler{
		Client: mgr.GetClient(), Tracker: tracker, Policies: store, Recorder: mgr.GetEventRecorder("wavegate"),
		Image: cfg.WaiterImage, Namespace: cfg.Namespace, WaitPods: waitPods, APIReader: mgr.GetAPIReader(),
		Cleared: cleared, SettleMax: cfg.SettleMax,
	}
	if err := sequences.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the sequence controller: %w", err)
	}
	// The stranger-pods controller's requests go through a client with a rate limit of its own: a
	// tenant's flood of such pods must not spend the budget of every sequence's gate removals.
	strangersConfig := rest.CopyConfig(mgr.GetConfig())
	strangersConfig.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(strangerQPS, strangerBurst)
	strangersClient, err := client.New(strangersConfig, client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper()})
	if err != nil {
		return nil, fmt.Errorf("creating the stranger pod controller's client: %w", err)
	}
	strangers := &sequence.StrangerReconciler{Client: mgr.GetClient(), APIReader: strangersClient, Writer: strangersClient,
		Policies: store, Recorder: mgr.GetEventRecorder("wavegate"), Namespace: cfg.Namespace}
	if err := strangers.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the stranger pod controller: %w", err)
	}
	// A policy's new group label is tracked at once: its members exist for the plan. And every
	// sequence is planned again on the new policies (a waiting group's new timeout, say), and
	// every gated pod that may be a stranger judged again.
	store.OnChange = func() {
		tracker.Relabel()
		sequences.PoliciesChanged()
		strangers.PoliciesChanged()
	}
	if err := (&sequence.StrayReconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the stray Sequence controller: %w", err)
	}
	if err := (&sequence.RBACReconciler{Client: mgr.GetClient(), Policies: store, Namespace: cfg.Namespace, APIReader: mgr.GetAPIReader()}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the waiter RBAC controller: %w", err)
	}

	if err := (&policy.StatusReconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the WavePolicy status controller: %w", err)
	}
	if err := (&webhookconfig.Reconciler{Client: mgr.GetClient(), Name: cfg.WebhookConfigurationName,
		ValidatingName: ValidatingName(cfg.WebhookConfigurationName)}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the webhook configuration controller: %w", err)
	}

	if err := mgr.AddReadyzCheck("policies", store.ReadyCheck); err != nil {
		return nil, fmt.Errorf("adding the policies readiness check: %w", err)
	}
	if err := mgr.AddReadyzCheck("sequences", func(*http.Request) error {
		if !cleared.Synced() {
			return errors.New("Sequences not loaded yet")
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("adding the sequences readiness check: %w", err)
	}
	if err := mgr.AddReadyzCheck("namespaces", func(*http.Request) error {
		if !namespaces.synced.Load() {
			return errors.New("namespaces not loaded yet")
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("adding the namespaces readiness check: %w", err)
	}
	if err := mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
		return nil, fmt.Errorf("adding the webhook readiness check: %w", err)
	}
	if err := mgr.AddHealthzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
		return nil, fmt.Errorf("adding the webhook health check: %w", err)
	}
	return &Wavegate{Policies: store, Cleared: cleared, Members: tracker, Permissions: perms, namespaces: namespaces}, nil
}

// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=get;list;watch

// refreshOnCRDs refreshes the permission review and the tracked kinds whenever a CRD comes or goes,
// or a ClusterRole that grants the manager kinds changes.
func refreshOnCRDs(ctx context.Context, mgr ctrl.Manager, perms *teardown.Permissions, tracker *members.Tracker) error {
	crds := &metav1.PartialObjectMetadata{}
	crds.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
	inf, err := mgr.GetCache().GetInformer(ctx, crds)
	if err != nil {
		return fmt.Errorf("watching CRDs: %w", err)
	}
	changed, served, respec := make(chan struct{}, 1), make(chan struct{}, 1), make(chan struct{}, 1)
	notify := func(c chan struct{}) {
		select {
		case c <- struct{}{}:
		default:
		}
	}
	// A new CRD is served only once it is Established, a moment after it is created: refresh on
	// every change of a CRD (its status included), and once more shortly after. A CRD created or
	// deleted, or whose spec changed (its generation: the versions or names it serves), also holds
	// the sequences (Tracker.KindsChanging) until that later refresh has tracked what it serves.
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { notify(changed); notify(served) },
		UpdateFunc: func(o, n any) {
			notify(changed)
			if om, ok := o.(metav1.Object); !ok || om.GetGeneration() != n.(metav1.Object).GetGeneration() {
				notify(respec)
			}
		},
		DeleteFunc: func(any) { notify(changed); notify(served) },
	}); err != nil {
		return err
	}
	// A ClusterRole labeled wavegate.io/aggregate-to-manager grants the manager the kinds of a user's
	// custom resources: a new grant is reviewed at once and once more crdSettle later (the role
	// aggregation controller updates the manager's role a moment after), not at the next periodic
	// review, up to 30 s later, while the new kind's members are admitted as not ordered. Its own
	// informer: the cache's ClusterRoles are only the waiters'.
	md, err := metadata.NewForConfig(mgr.GetConfig())
	if err != nil {
		return fmt.Errorf("watching the ClusterRoles that grant wavegate kinds: %w", err)
	}
	grants := metadatainformer.NewFilteredMetadataInformer(md, rbacv1.SchemeGroupVersion.WithResource("clusterroles"), "", 0, toolscache.Indexers{},
		func(o *metav1.ListOptions) { o.LabelSelector = keys.AggregateToManagerLabel + "=true" }).Informer()
	if _, err := grants.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { notify(changed) },
		UpdateFunc: func(any, any) { notify(changed) },
		DeleteFunc: func(any) { notify(changed) },
	}); err != nil {
		return err
	}
	go grants.RunWithContext(ctx)
	var h crdHold
	for {
		var timer <-chan time.Time
		if t := h.next(); !t.IsZero() {
			timer = time.After(time.Until(t))
		}
		var ev crdEvent
		select {
		case <-ctx.Done():
			tracker.KindsChanging(false)
			return nil
		case <-served:
			ev = crdServed
		case <-respec:
			ev = crdRespec
		case <-changed:
			ev = crdChanged
		case <-timer:
			ev = crdTimer
		}
		if h.on(ev, time.Now()) {
			tracker.KindsChanging(true)
		}
		refreshed := refreshPending
		if tracker.Discovered() {
			refreshed = refreshFailed
			if err := perms.Refresh(ctx); err != nil {
				ctrl.LoggerFrom(ctx).Error(err, "Reviewing permissions after a CRD change")
			}
			if err := tracker.Refresh(ctx); err != nil {
				ctrl.LoggerFrom(ctx).Error(err, "Refreshing tracked kinds after a CRD change")
			} else if crd, err := unservedCRD(ctx, mgr.GetCache(), tracker.Serves); err != nil {
				ctrl.LoggerFrom(ctx).Error(err, "Listing CRDs after a refresh of the tracked kinds")
			} else if crd != "" {
				ctrl.LoggerFrom(ctx).V(1).Info("A CRD is not served by discovery yet", "crd", crd)
			} else {
				refreshed = refreshMade
			}
		}
		if h.settled(refreshed, time.Now()) {
			tracker.KindsChanging(false)
		}
	}
}

// unservedCRD returns the name of a CRD created in the last minute whose resource the tracker's
// last refresh did not find in discovery ("" when there is none): discovery serves a new CRD a
// moment after it is Established, and a refresh made before then does not track its kind. A new
// CRD that is never served (its names conflict with another's) holds the sequences for crdHoldMax
// at most; older ones are not looked at.
func unservedCRD(ctx context.Context, c client.Reader, serves func(schema.GroupResource) bool) (string, error) {
	crds := &metav1.PartialObjectMetadataList{}
	crds.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinitionList"))
	if err := c.List(ctx, crds); err != nil {
		return "", fmt.Errorf("listing CRDs: %w", err)
	}
	for _, crd := range crds.Items {
		// A CRD's name is its plural and its group: "widgets.example.com".
		resource, group, _ := strings.Cut(crd.Name, ".")
		if crd.DeletionTimestamp == nil && time.Since(crd.CreationTimestamp.Time) < crdCooldown && !serves(schema.GroupResource{Group: group, Resource: resource}) {
			return crd.Name, nil
		}
	}
	return "", nil
}

// crdSettle is how long after a CRD change discovery is given to serve what it serves (discovery
// can lag behind the CRD's Established condition), and so how long the sequences are held after
// the last change; crdHoldMax bounds a hold.
const (
	crdSettle   = 2 * time.Second
	crdHoldMax  = 10 * time.Second
	crdCooldown = time.Minute
)

func newTracker(mgr ctrl.Manager, store *policy.Store) (*members.Tracker, error) {
	cfg := mgr.GetConfig()
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	md, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	disco, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &members.Tracker{
		Dynamic: dyn, Metadata: md, Discovery: disco,
		GroupLabels: func() []string { return store.Index().GroupLabels() },
	}, nil
}

// cachedNamespaces answers admission's questions about namespaces (being deleted? which labels?)
// from the manager's Namespace cache, which it loads on every replica before the webhook is ready.
// A namespace created a moment ago (kubectl apply of a namespace and its objects in one command)
// may not be cached yet: its labels are then read once from the API server.
type cachedNamespaces struct {
	cache  cache.Cache
	live   client.Reader
	synced atomic.Bool
	// onOptIn is called when a namespace opts in.
	onOptIn func()
}

// optedIn reports whether wavegate acts on a namespace's objects.
func (n *cachedNamespaces) optedIn(name, own string) bool {
	if name == "kube-system" || name == own {
		return false
	}
	ns := &corev1.Namespace{}
	if err := n.cache.Get(context.Background(), client.ObjectKey{Name: name}, ns); err != nil {
		return true // unknown (not cached yet): keep the whole object, as before this filter
	}
	return ns.Labels[keys.EnabledLabel] == "true"
}

// Labels returns a namespace's labels.
func (n *cachedNamespaces) Labels(name string) (map[string]string, error) {
	ns := &corev1.Namespace{}
	err := n.cache.Get(context.Background(), client.ObjectKey{Name: name}, ns)
	if apierrors.IsNotFound(err) || err == nil && !n.synced.Load() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		err = n.live.Get(ctx, client.ObjectKey{Name: name}, ns)
	}
	if err != nil {
		return nil, fmt.Errorf("reading namespace %s: %w", name, err)
	}
	return ns.Labels, nil
}

// NeedLeaderElection is false: every replica serves admission.
func (n *cachedNamespaces) NeedLeaderElection() bool { return false }

// Start loads the Namespace cache.
func (n *cachedNamespaces) Start(ctx context.Context) error {
	inf, err := n.cache.GetInformer(ctx, &corev1.Namespace{})
	if err != nil {
		return fmt.Errorf("watching namespaces: %w", err)
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{UpdateFunc: func(oldObj, newObj any) {
		o, okO := oldObj.(*corev1.Namespace)
		c, okN := newObj.(*corev1.Namespace)
		if okO && okN && n.onOptIn != nil && o.Labels[keys.EnabledLabel] != "true" && c.Labels[keys.EnabledLabel] == "true" {
			n.onOptIn()
		}
	}}); err != nil {
		return fmt.Errorf("watching namespaces: %w", err)
	}
	if !toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return errors.New("the Namespace cache did not sync")
	}
	n.synced.Store(true)
	<-ctx.Done()
	return nil
}

// Terminating reports whether a namespace is being deleted; unknown namespaces are not.
func (n *cachedNamespaces) Terminating(name string) bool {
	if !n.synced.Load() {
		return false
	}
	ns := &corev1.Namespace{}
	if err := n.cache.Get(context.Background(), client.ObjectKey{Name: name}, ns); err != nil {
		return false
	}
	return ns.DeletionTimestamp != nil
}
