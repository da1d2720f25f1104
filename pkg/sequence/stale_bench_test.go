package sequence

import (
	"fmt"
	"testing"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
)

// BenchmarkStaleWaiter: what a pass pays to tell whether a running wait Job judges by its group's
// readiness settings (deleteStaleJobs), or to read a marked Job's fingerprint (succeededWaiters):
// parsing the Job's arguments, one --member per member.
func BenchmarkStaleWaiter(b *testing.B) {
	for _, n := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			ms := make([]Member, n)
			for i := range ms {
				ms[i] = m("db", 1, "shop", fmt.Sprintf("db-%d", i), 1)
			}
			g := &Group{Name: "db", JobNamespace: "shop", JobName: "wj", Members: ms, Readiness: wavev1.Readiness{LoadBalancerIngress: true}}
			j := (&Reconciler{Image: "wavegate:test"}).waitJob("shop", g)
			b.ReportAllocs()
			for b.Loop() {
				if staleWaiter(j, g) {
					b.Fatal("stale")
				}
			}
		})
	}
}
