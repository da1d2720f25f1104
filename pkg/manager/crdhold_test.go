package manager

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

func TestCRDHold(t *testing.T) {
	type step struct {
		at time.Duration
		ev crdEvent
	}
	every := func(from, to, d time.Duration, ev crdEvent) []step {
		var out []step
		for at := from; at <= to; at += d {
			out = append(out, step{at, ev})
		}
		return out
	}
	cat := func(parts ...[]step) []step {
		var out []step
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		steps []step
		// discoveredAt is when the first discovery is done; refreshesFrom when refreshes succeed.
		discoveredAt, refreshesFrom time.Duration
		// want is when the sequences were held and released.
		want []string
	}{{
		name:  "a CRD created and Established a moment later holds until a refresh after its last change",
		steps: []step{{0, crdServed}, {0, crdChanged}, {time.Second, crdChanged}},
		want:  []string{"hold 0s", "release 3s"},
	}, {
		name:  "a CRD deleted holds",
		steps: []step{{5 * time.Second, crdServed}},
		want:  []string{"hold 5s", "release 7s"},
	}, {
		name:  "status changes alone hold nothing",
		steps: every(0, 20*time.Second, time.Second, crdChanged),
	}, {
		name:  "a spec change holds",
		steps: []step{{0, crdRespec}, {0, crdChanged}},
		want:  []string{"hold 0s", "release 2s"},
	}, {
		name: "specs that keep changing hold for crdHoldMax, then nothing for crdCooldown, then again",
		steps: cat(every(0, 15*time.Second, time.Second, crdRespec),
			[]step{{69 * time.Second, crdRespec}, {71 * time.Second, crdRespec}}),
		want: []string{"hold 0s", "release 10s", "hold 1m11s", "release 1m13s"},
	}, {
		name: "a CRD created during the cool-down still holds",
		steps: cat(every(0, 12*time.Second, time.Second, crdRespec),
			[]step{{20 * time.Second, crdServed}, {21 * time.Second, crdRespec}}),
		want: []string{"hold 0s", "release 10s", "hold 20s", "release 23s"},
	}, {
		name:          "a hold waits for a refresh after the first discovery",
		steps:         []step{{0, crdServed}},
		discoveredAt:  5 * time.Second,
		refreshesFrom: 5 * time.Second,
		want:          []string{"hold 0s", "release 6s"},
	}, {
		name:         "a CRD status change while the first discovery runs is refreshed after it",
		steps:        []step{{0, crdChanged}},
		discoveredAt: 5 * time.Second,
	}, {
		name:          "a hold waits for a refresh that succeeds",
		steps:         []step{{0, crdServed}, {time.Second, crdChanged}},
		refreshesFrom: 4 * time.Second,
		want:          []string{"hold 0s", "release 5s"},
	}, {
		name:          "a hold that runs into crdHoldMax ends without the first discovery",
		steps:         []step{{0, crdServed}},
		discoveredAt:  time.Hour,
		refreshesFrom: time.Hour,
		want:          []string{"hold 0s", "release 10s"},
	}, {
		name:          "a hold that runs into crdHoldMax ends while refreshes fail, and they are not retried",
		steps:         []step{{0, crdServed}},
		refreshesFrom: time.Hour,
		want:          []string{"hold 0s", "release 10s"},
	}, {
		name:          "a failed refresh without a hold is not retried",
		steps:         []step{{0, crdChanged}},
		refreshesFrom: time.Hour,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t0 := time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)
			var h crdHold
			var got []string
			// handle is one turn of refreshOnCRDs' loop.
			handle := func(ev crdEvent, now time.Time) {
				if h.on(ev, now) {
					got = append(got, fmt.Sprint("hold ", now.Sub(t0)))
				}
				r := refreshMade
				switch {
				case now.Sub(t0) < tc.discoveredAt:
					r = refreshPending
				case now.Sub(t0) < tc.refreshesFrom:
					r = refreshFailed
				}
				if h.settled(r, now) {
					got = append(got, fmt.Sprint("release ", now.Sub(t0)))
				}
			}
			timersUntil := func(end time.Time) {
				for n := h.next(); !n.IsZero() && !n.After(end); n = h.next() {
					handle(crdTimer, n)
				}
			}
			for _, s := range tc.steps {
				timersUntil(t0.Add(s.at))
				handle(s.ev, t0.Add(s.at))
			}
			timersUntil(t0.Add(2 * time.Hour))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("holds (-want +got):\n%s", diff)
			}
			if !h.next().IsZero() {
				t.Errorf("a timer is left at %s", h.next().Sub(t0))
			}
		})
	}
}

func TestUnservedCRD(t *testing.T) {
	crd := func(name string, age time.Duration, deleting bool) *metav1.PartialObjectMetadata {
		o := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(time.Now().Add(-age))}}
		o.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
		if deleting {
			o.DeletionTimestamp = ptr.To(metav1.Now())
			o.Finalizers = []string{"customresourcecleanup.apiextensions.k8s.io"}
		}
		return o
	}
	served := map[schema.GroupResource]bool{{Group: "example.com", Resource: "widgets"}: true}
	serves := func(gr schema.GroupResource) bool { return served[gr] }
	for _, tc := range []struct {
		name string
		crds []client.Object
		want string
	}{
		{name: "every CRD served", crds: []client.Object{crd("widgets.example.com", time.Second, false)}},
		{name: "a new CRD not served yet", crds: []client.Object{crd("widgets.example.com", time.Second, false), crd("gadgets.example.com", time.Second, false)},
			want: "gadgets.example.com"},
		{name: "an old CRD never served is not waited for", crds: []client.Object{crd("gadgets.example.com", time.Hour, false)}},
		{name: "a CRD being deleted is not waited for", crds: []client.Object{crd("gadgets.example.com", time.Second, true)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(Scheme()).WithObjects(tc.crds...).Build()
			got, err := unservedCRD(context.Background(), c, serves)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("unservedCRD = %q, want %q", got, tc.want)
			}
		})
	}
}
