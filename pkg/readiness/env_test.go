package readiness

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
)

type lookup struct {
	Mode, Default string
	Found, HasDef bool
	Err           bool
}

func lookUp(env Env, name string) lookup {
	var l lookup
	var err1, err2 error
	l.Mode, l.Found, err1 = env.StorageClass(name)
	l.Default, l.HasDef, err2 = env.DefaultStorageClass()
	l.Err = err1 != nil || err2 != nil
	return l
}

func TestStorageClasses(t *testing.T) {
	cases := []struct {
		name    string
		classes []string
		lookFor string
		want    lookup
	}{
		{name: "WaitForFirstConsumer", classes: []string{wffcClass, fastClass}, lookFor: "wffc",
			want: lookup{Mode: "WaitForFirstConsumer", Found: true}},
		{name: "binding-mode-unset-is-Immediate", classes: []string{unsetClass}, lookFor: "unset",
			want: lookup{Mode: "Immediate", Found: true}},
		{name: "not-found", classes: []string{wffcClass}, lookFor: "nope", want: lookup{}},
		{name: "default", classes: []string{wffcClass, defaultWFFCClass}, lookFor: "standard",
			want: lookup{Mode: "WaitForFirstConsumer", Found: true, Default: "standard", HasDef: true}},
		{name: "default-beta-annotation", lookFor: "old", classes: []string{
			`{apiVersion: storage.k8s.io/v1, kind: StorageClass, provisioner: p, metadata: {name: old, annotations: {storageclass.beta.kubernetes.io/is-default-class: "true"}}}`},
			want: lookup{Mode: "Immediate", Found: true, Default: "old", HasDef: true}},
		{name: "default-annotation-false", lookFor: "notdefault", classes: []string{
			`{apiVersion: storage.k8s.io/v1, kind: StorageClass, provisioner: p, metadata: {name: notdefault, annotations: {storageclass.kubernetes.io/is-default-class: "false"}}}`},
			want: lookup{Mode: "Immediate", Found: true}},
		{name: "several-defaults-newest-wins", lookFor: "b", classes: []string{
			`{apiVersion: storage.k8s.io/v1, kind: StorageClass, provisioner: p, metadata: {name: a, creationTimestamp: "2026-01-01T00:00:00Z", annotations: {storageclass.kubernetes.io/is-default-class: "true"}}}`,
			`{apiVersion: storage.k8s.io/v1, kind: StorageClass, provisioner: p, metadata: {name: b, creationTimestamp: "2026-02-01T00:00:00Z", annotations: {storageclass.kubernetes.io/is-default-class: "true"}}}`,
			`{apiVersion: storage.k8s.io/v1, kind: StorageClass, provisioner: p, metadata: {name: c, creationTimestamp: "2026-02-01T00:00:00Z", annotations: {storageclass.kubernetes.io/is-default-class: "true"}}}`,
		}, want: lookup{Mode: "Immediate", Found: true, Default: "b", HasDef: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := classes(t, tc.classes...)
			if diff := cmp.Diff(tc.want, lookUp(l, tc.lookFor)); diff != "" {
				t.Errorf("StorageClasses (-want,+got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.want, lookUp(FuncEnv(func() ([]storagev1.StorageClass, error) { return l, nil }), tc.lookFor)); diff != "" {
				t.Errorf("FuncEnv (-want,+got):\n%s", diff)
			}
			objs := make([]client.Object, len(l))
			for i := range l {
				objs[i] = &l[i]
			}
			c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(objs...).Build()
			if diff := cmp.Diff(tc.want, lookUp(ClientEnv{Reader: c, Ctx: context.Background()}, tc.lookFor)); diff != "" {
				t.Errorf("ClientEnv (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestFuncEnvError(t *testing.T) {
	env := FuncEnv(func() ([]storagev1.StorageClass, error) { return nil, errors.New("not listed yet") })
	if diff := cmp.Diff(lookup{Err: true}, lookUp(env, "wffc")); diff != "" {
		t.Errorf("(-want,+got):\n%s", diff)
	}
}

// A Forbidden read is an error, not a missing class, and a pending claim stays in progress
// with a message saying so.
func TestClientEnvForbidden(t *testing.T) {
	gr := schema.GroupResource{Group: "storage.k8s.io", Resource: "storageclasses"}
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(&classes(t, wffcClass)[0]).
		WithInterceptorFuncs(interceptor.Funcs{
			Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
				return apierrors.NewForbidden(gr, "wffc", errors.New("RBAC"))
			},
			List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
				return apierrors.NewForbidden(gr, "", errors.New("RBAC"))
			},
		}).Build()
	env := ClientEnv{Reader: c}
	if diff := cmp.Diff(lookup{Err: true}, lookUp(env, "wffc")); diff != "" {
		t.Errorf("(-want,+got):\n%s", diff)
	}
	checker, err := NewChecker(wavev1.Readiness{})
	if err != nil {
		t.Fatal(err)
	}
	got := checker.CheckIn(parse(t, claim("", ", storageClassName: wffc")), env)
	want := Result{Status: InProgress, Message: `pending: StorageClass wffc could not be read: storageclasses.storage.k8s.io "wffc" is forbidden: RBAC`}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("CheckIn (-want,+got):\n%s", diff)
	}
}

// The claim rule through a controller-runtime client, end to end.
func TestCheckInWithClientEnv(t *testing.T) {
	sc := classes(t, wffcClass, defaultFastClass)
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(&sc[0], &sc[1]).Build()
	checker, err := NewChecker(wavev1.Readiness{})
	if err != nil {
		t.Fatal(err)
	}
	env := ClientEnv{Reader: c, Ctx: context.Background()}
	for _, tc := range []struct {
		spec string
		want Result
	}{
		{", storageClassName: wffc", Result{Status: Ready, Message: "pending: waits for its first consumer (StorageClass wffc is WaitForFirstConsumer)"}},
		{"", Result{Status: InProgress, Message: "pending: StorageClass standard binds Immediate"}},
		{", storageClassName: missing", Result{Status: InProgress, Message: "pending: StorageClass missing not found"}},
	} {
		if diff := cmp.Diff(tc.want, checker.CheckIn(parse(t, claim("", tc.spec)), env)); diff != "" {
			t.Errorf("claim with spec %q (-want,+got):\n%s", tc.spec, diff)
		}
	}
}
