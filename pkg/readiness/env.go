package readiness

import (
	"context"
	"sort"

	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Annotations and values readiness reads on PersistentVolumeClaims and StorageClasses.
const (
	// AnnSelectedNode is set on a claim by the scheduler once a pod that uses it is scheduled: the
	// claim is then provisioned or bound for that node.
	AnnSelectedNode = "volume.kubernetes.io/selected-node"
	// AnnBetaStorageClass is the legacy way to name a claim's class; it wins over
	// spec.storageClassName, as in Kubernetes.
	AnnBetaStorageClass = "volume.beta.kubernetes.io/storage-class"
	// AnnDefaultStorageClass marks the default StorageClass ("true").
	AnnDefaultStorageClass = "storageclass.kubernetes.io/is-default-class"
	// AnnBetaDefaultStorageClass is the legacy form of AnnDefaultStorageClass.
	AnnBetaDefaultStorageClass = "storageclass.beta.kubernetes.io/is-default-class"
)

// Env is what readiness reads besides the object itself: the StorageClasses that decide whether a
// Pending PersistentVolumeClaim waits for its first consumer. A nil Env is allowed: a Pending claim
// is then in progress.
type Env interface {
	// StorageClass returns the volumeBindingMode of the named StorageClass ("Immediate" when the
	// class leaves it unset). found is false when there is no such class; err is set when the
	// classes cannot be read (Forbidden, not listed yet), and then found is meaningless.
	StorageClass(name string) (bindingMode string, found bool, err error)
	// DefaultStorageClass returns the name of the default StorageClass: the one annotated
	// storageclass.kubernetes.io/is-default-class: "true", the newest if several are (as
	// Kubernetes chooses). found is false when there is none.
	DefaultStorageClass() (name string, found bool, err error)
}

// StorageClasses is an Env over StorageClasses already read: a fixture in tests, or a snapshot of
// a cache.
type StorageClasses []storagev1.StorageClass

// StorageClass implements Env.
func (l StorageClasses) StorageClass(name string) (string, bool, error) {
	for i := range l {
		if l[i].Name == name {
			return bindingMode(&l[i]), true, nil
		}
	}
	return "", false, nil
}

// DefaultStorageClass implements Env. Like Kubernetes, it picks the newest default class, and by
// name among classes created in the same second.
func (l StorageClasses) DefaultStorageClass() (string, bool, error) {
	var defaults []*storagev1.StorageClass
	for i := range l {
		if isDefault(&l[i]) {
			defaults = append(defaults, &l[i])
		}
	}
	if len(defaults) == 0 {
		return "", false, nil
	}
	sort.Slice(defaults, func(i, j int) bool {
		ti, tj := defaults[i].CreationTimestamp.UnixNano(), defaults[j].CreationTimestamp.UnixNano()
		if ti == tj {
			return defaults[i].Name < defaults[j].Name
		}
		return ti > tj
	})
	return defaults[0].Name, true, nil
}

// FuncEnv is an Env over a function that lists every StorageClass (a typed client, an informer's
// store). An error from the function is the error of every lookup.
type FuncEnv func() ([]storagev1.StorageClass, error)

// StorageClass implements Env.
func (f FuncEnv) StorageClass(name string) (string, bool, error) {
	l, err := f()
	if err != nil {
		return "", false, err
	}
	return StorageClasses(l).StorageClass(name)
}

// DefaultStorageClass implements Env.
func (f FuncEnv) DefaultStorageClass() (string, bool, error) {
	l, err := f()
	if err != nil {
		return "", false, err
	}
	return StorageClasses(l).DefaultStorageClass()
}

// ClientEnv is an Env that reads storage.k8s.io/v1 StorageClasses through a controller-runtime
// reader: a manager's cached client or its API reader. A cached reader starts an informer on first
// use and blocks until it syncs, so Ctx should carry a deadline when access may be missing.
type ClientEnv struct {
	Reader client.Reader
	// Ctx bounds each read; nil means context.Background().
	Ctx context.Context
}

func (e ClientEnv) ctx() context.Context {
	if e.Ctx == nil {
		return context.Background()
	}
	return e.Ctx
}

// StorageClass implements Env. NotFound is found == false; any other error (Forbidden) is err.
func (e ClientEnv) StorageClass(name string) (string, bool, error) {
	var sc storagev1.StorageClass
	if err := e.Reader.Get(e.ctx(), client.ObjectKey{Name: name}, &sc); err != nil {
		if apierrors.IsNotFound(err) {
			return "", false, nil
		}
		return "", false, err
	}
	return bindingMode(&sc), true, nil
}

// DefaultStorageClass implements Env.
func (e ClientEnv) DefaultStorageClass() (string, bool, error) {
	var l storagev1.StorageClassList
	if err := e.Reader.List(e.ctx(), &l); err != nil {
		return "", false, err
	}
	return StorageClasses(l.Items).DefaultStorageClass()
}

func bindingMode(sc *storagev1.StorageClass) string {
	if sc.VolumeBindingMode == nil || *sc.VolumeBindingMode == "" {
		return string(storagev1.VolumeBindingImmediate)
	}
	return string(*sc.VolumeBindingMode)
}

func isDefault(sc *storagev1.StorageClass) bool {
	return sc.Annotations[AnnDefaultStorageClass] == "true" || sc.Annotations[AnnBetaDefaultStorageClass] == "true"
}
