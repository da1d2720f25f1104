package status

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRender(t *testing.T) {
	var b bytes.Buffer
	Render(&b, []Sequence{{Name: "shop", Reason: "Waiting", Groups: []Group{
		{Name: "database", Order: 1, Phase: "Released", Ready: 1, Members: 1, WaitJob: "shop/wavegate-wait-database-1",
			Objects: []Object{{Kind: "StatefulSet", Namespace: "shop", Name: "db", Ready: "Ready"}}},
		{Name: "web", Order: 3, Phase: "Pending", Members: 1, GatedPods: 2, Message: "waiting for group database",
			Objects: []Object{{Kind: "Deployment", Namespace: "shop", Name: "web", Ready: "InProgress", Message: "Deployment not available"}}},
	}}})
	want := `sequence shop  NotReady (Waiting)
├─ database (order 1)  Released  1/1 ready  [wait Job shop/wavegate-wait-database-1]
│  └─ StatefulSet shop/db  Ready
└─ web (order 3)  Pending  0/1 ready  [2 pods gated]
      waiting for group database
   └─ Deployment shop/web  InProgress: Deployment not available
`
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("Render (-want,+got):\n%s", diff)
	}
}
