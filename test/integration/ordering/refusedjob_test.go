package ordering

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/sequence"
)

// TestRefusedWaitJobIsReported: a policy engine (here a ValidatingAdmissionPolicy) that refuses
// wavegate's wait Jobs in a namespace keeps its groups from opening, and the group's timeout from
// counting. The manager says so with a Warning Event on the Sequence that names the refusal and the
// fix, not only in its log.
func TestRefusedWaitJobIsReported(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t)
	denyByPolicy(t, "test-deny-wait-jobs-"+ns, "batch", []string{"jobs"},
		"object.metadata.namespace != '"+ns+"' || !has(object.metadata.labels) || !('"+keys.WaitJobLabel+"' in object.metadata.labels)",
		"test: jobs need resource limits",
		func() error {
			return env.Client.Create(ctx, job(ns, "probe", map[string]string{keys.WaitJobLabel: "true"}), client.DryRunAll)
		})
	g.Expect(env.Client.Create(ctx, deployment(ns, "db", member("db", 1)))).To(Succeed())
	g.Eventually(func(g Gomega) []string {
		var evs eventsv1.EventList
		g.Expect(env.Client.List(ctx, &evs)).To(Succeed())
		var msgs []string
		for _, e := range evs.Items {
			if e.Regarding.Kind == "Sequence" && e.Regarding.Name == sequence.ObjectName(ns) && e.Type == corev1.EventTypeWarning &&
				e.Reason == sequence.ReasonWaitJobRefused {
				msgs = append(msgs, e.Note)
			}
		}
		return msgs
	}).WithTimeout(30 * time.Second).Should(ContainElement(And(ContainSubstring("group db cannot open"),
		ContainSubstring("test: jobs need resource limits"), ContainSubstring("allow wavegate's wait Jobs"))))
}
