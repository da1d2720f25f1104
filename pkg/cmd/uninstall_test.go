package cmd

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/manager"
)

// TestUninstallGroupLabels: uninstall finds what wavegate holds by the group labels, the policies'
// included. A WavePolicy CRD already gone leaves only wavegate.io/group; any other failure to list
// the policies stops the uninstall before it removes anything (it reported success before, and the
// objects grouped by a policy's label kept wavegate's finalizer).
func TestUninstallGroupLabels(t *testing.T) {
	component := &wavev1.WavePolicy{ObjectMeta: metav1.ObjectMeta{Name: "default"},
		Spec: wavev1.WavePolicySpec{GroupLabel: "app.kubernetes.io/component"}}
	failing := func(err error) interceptor.Funcs {
		return interceptor.Funcs{List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error { return err }}
	}
	gr := schema.GroupResource{Group: keys.Domain, Resource: "wavepolicies"}
	for name, tc := range map[string]struct {
		funcs   interceptor.Funcs
		want    []string
		wantErr bool
	}{
		"policies listed":   {want: []string{keys.GroupLabel, "app.kubernetes.io/component"}},
		"CRD gone":          {funcs: failing(&meta.NoKindMatchError{GroupKind: schema.GroupKind{Group: keys.Domain, Kind: "WavePolicy"}}), want: []string{keys.GroupLabel}},
		"resource gone":     {funcs: failing(apierrors.NewNotFound(gr, "")), want: []string{keys.GroupLabel}},
		"list forbidden":    {funcs: failing(apierrors.NewForbidden(gr, "", errors.New("no"))), wantErr: true},
		"API server failed": {funcs: failing(apierrors.NewServiceUnavailable("etcd")), wantErr: true},
	} {
		t.Run(name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(manager.Scheme()).WithObjects(component).WithInterceptorFuncs(tc.funcs).Build()
			got, err := uninstallGroupLabels(context.Background(), c)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error = %v, want an error: %v", err, tc.wantErr)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("group labels (-want +got):\n%s", d)
			}
		})
	}
}
