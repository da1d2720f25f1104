// Package metrics holds wavegate's Prometheus metrics, registered with controller-runtime's
// registry and served on the manager's (authenticated) metrics endpoint.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	// GatedPods counts pods still carrying the scheduling gate, per sequence and group.
	GatedPods = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "wavegate_gated_pods", Help: "Pods that carry wavegate's scheduling gate, per sequence and group.",
	}, []string{"sequence", "group"})
	// GroupsWaiting counts the groups of a sequence that are not released.
	GroupsWaiting = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "wavegate_groups_waiting", Help: "Groups of a sequence that are not released yet.",
	}, []string{"sequence"})
	// ReleaseLatency is the time from an earlier group's waiter exiting successfully (or, without
	// its pod, its wait Job completing) to the gates of the next group's pods being removed.
	ReleaseLatency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "wavegate_release_latency_seconds",
		Help:    "Seconds from the waiter that released a group exiting to the removal of the next group's gates.",
		Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30},
	})
	// WaitJobFailures counts wait Jobs that failed, by reason (Failed, TimedOut).
	WaitJobFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wavegate_wait_job_failures_total", Help: "Wait Jobs that failed or timed out.",
	}, []string{"reason"})
	// TeardownHolds counts deleted members held until later groups are gone, per sequence.
	TeardownHolds = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "wavegate_teardown_holds", Help: "Deleted group members held by ordered teardown.",
	}, []string{"sequence"})
)

func init() {
	metrics.Registry.MustRegister(GatedPods, GroupsWaiting, ReleaseLatency, WaitJobFailures, TeardownHolds)
}

// Forget drops the series of a sequence that no longer exists.
func Forget(sequence string) {
	GatedPods.DeletePartialMatch(prometheus.Labels{"sequence": sequence})
	GroupsWaiting.DeleteLabelValues(sequence)
	TeardownHolds.DeleteLabelValues(sequence)
}
