package sequence

import (
	"context"
	"errors"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// TestCreateJobInTerminatingNamespace: a namespace being deleted takes no new wait Job, and that
// is not an error to retry (its groups are being torn down); any other refusal is.
func TestCreateJobInTerminatingNamespace(t *testing.T) {
	refuse := errors.New("quota exceeded")
	for _, tc := range []struct {
		name    string
		refusal func(client.Object) error
		wantErr bool
	}{
		{"terminating", func(o client.Object) error {
			return namespaceTerminating(schema.GroupResource{Group: "batch", Resource: "jobs"}, o)
		}, false},
		{"other refusal", func(client.Object) error { return refuse }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := interceptor.NewClient(fake.NewClientBuilder().WithScheme(scheme.Scheme).Build(), interceptor.Funcs{
				Create: func(_ context.Context, _ client.WithWatch, obj client.Object, _ ...client.CreateOption) error {
					if _, ok := obj.(*batchv1.Job); ok {
						return tc.refusal(obj)
					}
					return nil
				},
			})
			r := &Reconciler{Client: c, Image: "wavegate:test", Namespace: "wavegate-system"}
			g := &Group{Name: "web", JobName: "wavegate-wait-web-0123456789", JobNamespace: "shop"}
			if err := r.createJob(context.Background(), "shop", g, true); (err != nil) != tc.wantErr {
				t.Errorf("createJob() = %v, want error: %v", err, tc.wantErr)
			}
		})
	}
}
