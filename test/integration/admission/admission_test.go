package admission

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/mutate"
)

func deployment(ns, name string, l map[string]string) *appsv1.Deployment {
	sel := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: l},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: sel},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}},
			},
		},
	}
}

func TestCreateStampsWavesAndTemplateIdentity(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t, true)

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: ns,
		Labels: labels(keys.GroupLabel, "database", keys.GroupOrderLabel, "1", keys.OrderLabel, "3")}}
	g.Expect(env.Client.Create(ctx, cm)).To(Succeed())
	g.Expect(cm.Annotations).To(Equal(resolvedAnnotations(ns, "database", "1", "103")))

	// An independent sequence of the namespace: <namespace>.<name>.
	shop := ns + ".shop"
	d := deployment(ns, "web", labels(keys.GroupLabel, "web", keys.GroupOrderLabel, "2", keys.SequenceLabel, shop))
	g.Expect(env.Client.Create(ctx, d)).To(Succeed())
	got := &appsv1.Deployment{}
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(d), got)).To(Succeed())
	g.Expect(got.Annotations).To(Equal(resolvedAnnotations(shop, "web", "2", "200")))
	g.Expect(got.Spec.Template.Labels).To(Equal(labels("app", "web",
		keys.GroupLabel, "web", keys.GroupOrderLabel, "2", keys.SequenceLabel, shop)))
}

func TestExplicitSyncWaveIsKeptWithAWarning(t *testing.T) {
	g := NewWithT(t)
	c, w := clientWithWarnings(t)
	ns := namespace(t, true)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "explicit", Namespace: ns,
		Labels:      labels(keys.GroupLabel, "db", keys.GroupOrderLabel, "1"),
		Annotations: map[string]string{keys.ArgoCDSyncWaveAnnotation: "-5"}}}
	g.Expect(c.Create(context.Background(), cm)).To(Succeed())
	g.Expect(cm.Annotations).To(HaveKeyWithValue(keys.ArgoCDSyncWaveAnnotation, "-5"))
	g.Expect(cm.Annotations).To(HaveKeyWithValue(keys.ResolvedWaveAnnotation, "100"))
	g.Expect(w.all()).To(ContainElement(ContainSubstring(`keeping the explicit sync-wave "-5"; wavegate derived 100 from group "db"`)))
}

func TestObjectsOutsideOptedInNamespacesAreUntouched(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	member := labels(keys.GroupLabel, "db", keys.GroupOrderLabel, "1")

	// kube-system is excluded even when someone labels it.
	ks := &corev1.Namespace{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: "kube-system"}, ks)).To(Succeed())
	patch := client.MergeFrom(ks.DeepCopy())
	ks.Labels[keys.EnabledLabel] = "true"
	g.Expect(env.Client.Patch(ctx, ks, patch)).To(Succeed())
	t.Cleanup(func() {
		patch := client.MergeFrom(ks.DeepCopy())
		delete(ks.Labels, keys.EnabledLabel)
		_ = env.Client.Patch(ctx, ks, patch)
	})

	for _, ns := range []string{namespace(t, false), "kube-system"} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "untouched-", Namespace: ns, Labels: member}}
		g.Expect(env.Client.Create(ctx, cm)).To(Succeed())
		t.Cleanup(func() { _ = env.Client.Delete(ctx, cm) })
		g.Expect(cm.Annotations).To(BeEmpty(), "namespace %s", ns)
	}
	// Bad labels are not even looked at outside opted-in namespaces.
	bad := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bad", Namespace: namespace(t, false),
		Labels: labels(keys.GroupLabel, "db", keys.OrderLabel, "nope")}}
	g.Expect(env.Client.Create(ctx, bad)).To(Succeed())

	// Unlabeled objects in opted-in namespaces never reach the webhook either.
	plain := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: namespace(t, true)}}
	g.Expect(env.Client.Create(ctx, plain)).To(Succeed())
	g.Expect(plain.Annotations).To(BeEmpty())
}

func TestBadInputIsDeniedNamingTheFieldAndTheFix(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, true)
	strict := &wavev1.WavePolicy{ObjectMeta: metav1.ObjectMeta{Name: "strict-" + ns}, Spec: wavev1.WavePolicySpec{
		RequireKnownGroups: true,
		Groups:             []wavev1.GroupSpec{{Name: "known-" + ns, Order: 4}},
	}}
	cases := map[string]struct {
		labels map[string]string
		want   string
	}{
		"non-integer order": {
			labels: labels(keys.GroupLabel, "db", keys.GroupOrderLabel, "1", keys.OrderLabel, "first"),
			want:   `metadata.labels[wavegate.io/order]: Invalid value: "first": must be an integer from 0 to 49`,
		},
		"order out of range": {
			labels: labels(keys.GroupLabel, "db", keys.GroupOrderLabel, "1", keys.OrderLabel, "50"),
			want:   `metadata.labels[wavegate.io/order]: Invalid value: "50"`,
		},
		"group order out of range": {
			labels: labels(keys.GroupLabel, "db", keys.GroupOrderLabel, "5000"),
			want:   `metadata.labels[wavegate.io/group-order]: Invalid value: "5000": must be an integer from -1000 to 1000`,
		},
		"unknown group while a policy requires known groups": {
			labels: labels(keys.GroupLabel, "stranger", keys.GroupOrderLabel, "1"),
			want:   `metadata.labels[wavegate.io/group]: Invalid value: "stranger": WavePolicy strict-` + ns + ` requires known groups`,
		},
		"label order conflicting with the policy": {
			labels: labels(keys.GroupLabel, "known-"+ns, keys.GroupOrderLabel, "1"),
			want:   `WavePolicy "` + strict.Name + `" gives group "known-` + ns + `" order 4: remove the label or make it 4`,
		},
	}
	g := NewWithT(t)
	t.Run("group without any order", func(t *testing.T) {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "bad-", Namespace: ns, Labels: labels(keys.GroupLabel, "db")}}
		NewWithT(t).Expect(env.Client.Create(ctx, cm)).To(MatchError(ContainSubstring(
			`group "db" has no order: add it to a WavePolicy or set the label wavegate.io/group-order`)))
	})

	g.Expect(env.Client.Create(ctx, strict)).To(Succeed())
	t.Cleanup(func() {
		// The policy requires known groups cluster-wide: wait until it is gone before other tests run.
		_ = env.Client.Delete(ctx, strict)
		waitForPolicy(t, ns, "after-strict", "100", keys.GroupOrderLabel, "1")
	})
	waitForPolicy(t, ns, "known-"+ns, "400")

	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "bad-", Namespace: ns, Labels: tc.labels}}
			err := env.Client.Create(ctx, cm)
			g.Expect(err).To(HaveOccurred())
			g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
			g.Expect(err.Error()).To(ContainSubstring(`admission webhook "objects.wavegate.io" denied the request`))
			g.Expect(err.Error()).To(ContainSubstring(tc.want))
		})
	}

	t.Run("cluster-scoped object without a sequence", func(t *testing.T) {
		g := NewWithT(t)
		cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{GenerateName: "no-sequence-",
			Labels: labels(keys.GroupLabel, "known-"+ns)}}
		err := env.Client.Create(ctx, cr)
		g.Expect(err).To(MatchError(ContainSubstring(
			"metadata.labels[wavegate.io/sequence]: Required value: a cluster-scoped object must name the sequence it joins")))
		cr.Labels[keys.SequenceLabel] = ns
		g.Expect(env.Client.Create(ctx, cr)).To(MatchError(ContainSubstring(
			"a cluster-scoped object may join only a sequence that a WavePolicy declares for cluster-scoped members: " +
				"ask a platform team to add {name: " + ns + ", clusterScoped: true} to a WavePolicy's spec.sequences")))
		decl := &wavev1.WavePolicy{ObjectMeta: metav1.ObjectMeta{Name: "declares-" + ns},
			Spec: wavev1.WavePolicySpec{Sequences: []wavev1.SharedSequence{{Name: ns, ClusterScoped: true}}}}
		g.Expect(env.Client.Create(ctx, decl)).To(Succeed())
		t.Cleanup(func() { _ = env.Client.Delete(ctx, decl) })
		g.Eventually(func() error { return env.Client.Create(ctx, cr) }).WithTimeout(10 * time.Second).Should(Succeed())
		t.Cleanup(func() {
			// Gone before the next test: its teardown finalizer's release is a write the next
			// tests' webhook counts would see.
			_ = env.Client.Delete(ctx, cr)
			NewWithT(t).Eventually(func() bool {
				return apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKeyFromObject(cr), &rbacv1.ClusterRole{}))
			}).WithTimeout(30*time.Second).Should(BeTrue(), "the ClusterRole was not released")
		})
		g.Expect(cr.Annotations).To(Equal(resolvedAnnotations(ns, "known-"+ns, "4", "400")))
	})
}

// waitForPolicy waits until admission resolves group to wave, i.e. the policy store has the policy.
func waitForPolicy(t *testing.T, ns, group, wave string, extraLabels ...string) {
	t.Helper()
	NewWithT(t).Eventually(func(g Gomega) {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-", Namespace: ns,
			Labels: labels(append([]string{keys.GroupLabel, group}, extraLabels...)...)}}
		g.Expect(env.Client.Create(context.Background(), cm, client.DryRunAll)).To(Succeed())
		g.Expect(cm.Annotations).To(HaveKeyWithValue(keys.ResolvedWaveAnnotation, wave))
	}).WithTimeout(10 * time.Second).WithPolling(20 * time.Millisecond).Should(Succeed())
}

func TestPolicyOrdersGroupsAndPolicyChangesApplyOnUpdate(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t, true)
	group := "api-" + ns
	p := &wavev1.WavePolicy{ObjectMeta: metav1.ObjectMeta{Name: "orders-" + ns}, Spec: wavev1.WavePolicySpec{
		Groups: []wavev1.GroupSpec{{Name: group, Order: 7}},
	}}
	g.Expect(env.Client.Create(ctx, p)).To(Succeed())
	t.Cleanup(func() { _ = env.Client.Delete(ctx, p) })
	waitForPolicy(t, ns, group, "700")

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: ns, Labels: labels(keys.GroupLabel, group, keys.OrderLabel, "2")}}
	g.Expect(env.Client.Create(ctx, cm)).To(Succeed())
	g.Expect(cm.Annotations).To(Equal(resolvedAnnotations(ns, group, "7", "702")))

	// The platform team moves the group; the next update of the object follows.
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error { // the status controller writes it too
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
			return err
		}
		p.Spec.Groups[0].Order = 8
		return env.Client.Update(ctx, p)
	})).To(Succeed())
	waitForPolicy(t, ns, group, "800")
	cm.Data = map[string]string{"k": "v"}
	g.Expect(env.Client.Update(ctx, cm)).To(Succeed())
	g.Expect(cm.Annotations).To(Equal(resolvedAnnotations(ns, group, "8", "802")))
}

func TestPolicyValidationByTheAPIServer(t *testing.T) {
	ctx := context.Background()
	cases := map[string]struct {
		spec wavev1.WavePolicySpec
		want string
	}{
		"group name that is not a label value": {
			spec: wavev1.WavePolicySpec{Groups: []wavev1.GroupSpec{{Name: "not a label", Order: 1}}},
			want: "spec.groups[0].name",
		},
		"order out of range": {
			spec: wavev1.WavePolicySpec{Groups: []wavev1.GroupSpec{{Name: "db", Order: 5000}}},
			want: "spec.groups[0].order",
		},
		"duplicate group": {
			spec: wavev1.WavePolicySpec{Groups: []wavev1.GroupSpec{{Name: "db", Order: 1}, {Name: "db", Order: 2}}},
			want: "spec.groups[1]: Duplicate value",
		},
		"requireKnownGroups without groups": {
			spec: wavev1.WavePolicySpec{RequireKnownGroups: true},
			want: "requireKnownGroups needs at least one entry in groups",
		},
		"group label that is another wavegate label": {
			spec: wavev1.WavePolicySpec{GroupLabel: keys.OrderLabel},
			want: "groupLabel must not be one of wavegate's other labels",
		},
		// A label selector on it would not parse (the tracker, uninstall and status select by it).
		"group label that is not a label key": {
			spec: wavev1.WavePolicySpec{GroupLabel: "app component"},
			want: "groupLabel must be a label key",
		},
		// A zero timeout would give the wait Job a deadline of a second (the waiter's --timeout 0 means
		// no bound, which a user may expect here too).
		"zero default timeout": {
			spec: wavev1.WavePolicySpec{Defaults: wavev1.GroupDefaults{Timeout: &metav1.Duration{}}},
			want: `spec.defaults.timeout: Invalid value: "0s": timeout must be at least 1s`,
		},
		"negative group timeout": {
			spec: wavev1.WavePolicySpec{Groups: []wavev1.GroupSpec{{Name: "db", Order: 1, Timeout: &metav1.Duration{Duration: -time.Minute}}}},
			want: "timeout must be at least 1s",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := &wavev1.WavePolicy{ObjectMeta: metav1.ObjectMeta{GenerateName: "invalid-"}, Spec: tc.spec}
			err := env.Client.Create(ctx, p)
			NewWithT(t).Expect(err).To(MatchError(ContainSubstring(tc.want)))
		})
	}
}

func TestServerSideDryRunMutatesAndPersistsNothing(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t, true)
	d := deployment(ns, "dry", labels(keys.GroupLabel, "web", keys.GroupOrderLabel, "3"))
	g.Expect(env.Client.Create(ctx, d, client.DryRunAll)).To(Succeed())
	g.Expect(d.Annotations).To(Equal(resolvedAnnotations(ns, "web", "3", "300")))
	g.Expect(d.Spec.Template.Labels).To(HaveKeyWithValue(keys.GroupLabel, "web"))
	err := env.Client.Get(ctx, client.ObjectKeyFromObject(d), &appsv1.Deployment{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "dry-run persisted the object: %v", err)

	var all metav1.PartialObjectMetadataList
	all.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind("DeploymentList"))
	g.Expect(env.Client.List(ctx, &all, client.InNamespace(ns))).To(Succeed())
	g.Expect(all.Items).To(BeEmpty())
}

// TestServerSideApplyIsIdempotent applies the same manifest twice with server-side apply, the way
// Argo CD and Flux do: the webhook's fields belong to the applier, and the second apply (and a
// second webhook pass) changes nothing.
func TestServerSideApplyIsIdempotent(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t, true)
	manifest := func() *unstructuredDeployment {
		return newUnstructuredDeployment(ns, "applied", labels(keys.GroupLabel, "web", keys.GroupOrderLabel, "2", keys.OrderLabel, "5"))
	}
	first := manifest()
	g.Expect(env.Client.Patch(ctx, first.Obj(), client.Apply, client.FieldOwner("gitops"), client.ForceOwnership)).To(Succeed())
	g.Expect(first.Obj().GetAnnotations()).To(Equal(resolvedAnnotations(ns, "web", "2", "205")))
	rv := first.Obj().GetResourceVersion()

	// Server-side dry-run of the same apply returns the same mutation.
	dry := manifest()
	g.Expect(env.Client.Patch(ctx, dry.Obj(), client.Apply, client.FieldOwner("gitops"), client.ForceOwnership, client.DryRunAll)).To(Succeed())
	g.Expect(dry.Obj().GetAnnotations()).To(Equal(first.Obj().GetAnnotations()))

	second := manifest()
	g.Expect(env.Client.Patch(ctx, second.Obj(), client.Apply, client.FieldOwner("gitops"), client.ForceOwnership)).To(Succeed())
	g.Expect(second.Obj().GetResourceVersion()).To(Equal(rv), "re-applying the same manifest changed the object")

	// Admission is not a writer of its own: no field manager but the applier's appears, so tools
	// that compare managed fields see no foreign owner.
	for _, mf := range second.Obj().GetManagedFields() {
		g.Expect(mf.Manager).To(Equal("gitops"))
	}

	// A plain update that sends the stored object back (a second webhook pass) is a no-op too.
	got := &appsv1.Deployment{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "applied"}, got)).To(Succeed())
	g.Expect(env.Client.Update(ctx, got)).To(Succeed())
	g.Expect(got.ResourceVersion).To(Equal(rv), "a second webhook pass changed the object")
}

// TestMalformedReviewsAreDeniedWith4xx sends garbage straight to the webhook server the API server
// uses, over its TLS.
func TestMalformedReviewsAreDeniedWith4xx(t *testing.T) {
	url, tlsConfig := env.WebhookURL(mutate.Path)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig}, Timeout: 5 * time.Second}
	for name, body := range map[string]string{
		"not json":        "{{{",
		"empty":           "",
		"no request":      `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`,
		"object not json": `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","operation":"CREATE","kind":{"kind":"ConfigMap"},"object":[1,2]}}`,
		"huge":            `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","object":{"x":"` + strings.Repeat("a", 8<<20) + `"}}}`,
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			resp, err := hc.Post(url, "application/json", bytes.NewBufferString(body))
			g.Expect(err).NotTo(HaveOccurred())
			defer resp.Body.Close()
			raw, _ := io.ReadAll(resp.Body)
			var review admissionv1.AdmissionReview
			g.Expect(json.Unmarshal(raw, &review)).To(Succeed(), "answer %q", raw)
			g.Expect(review.Response.Allowed).To(BeFalse())
			g.Expect(review.Response.Result.Code).To(BeNumerically(">=", 400))
			g.Expect(review.Response.Result.Code).To(BeNumerically("<", 500))
		})
	}
}
