package teardown

import (
	"context"
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

// TestUninstallSaysWhenAGateMayStay: a pod uninstall cannot read (the API server throttles, times
// out) may keep wavegate's gate, and would stay Pending for good once wavegate is gone: uninstall
// fails and says which, instead of reporting success. A pod that is gone has no gate to remove.
func TestUninstallSaysWhenAGateMayStay(t *testing.T) {
	kube := fake.NewClientset()
	kube.PrependReactor("get", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.(clienttesting.GetAction).GetName() == "unread" {
			return true, nil, apierrors.NewInternalError(errors.New("etcd timed out"))
		}
		return false, nil, nil
	})
	u := &Uninstall{Kube: kube}
	pod := func(name string) metav1.PartialObjectMetadata {
		return metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name}}
	}
	if _, err := u.ungate(context.Background(), []metav1.PartialObjectMetadata{pod("gone")}); err != nil {
		t.Errorf("a pod that is gone: %v", err)
	}
	if _, err := u.ungate(context.Background(), []metav1.PartialObjectMetadata{pod("gone"), pod("unread")}); !apierrors.IsInternalError(err) {
		t.Errorf("a pod that could not be read: %v, want its error", err)
	}
}
