package sequence

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
)

// TestClearedBeforeTheStatus: the templates a pass released are cleared for admission on this
// replica at once, before the status that says so arrives; the sequence's next status replaces
// them, so a status that no longer clears a template (its pods are gone, or an earlier group
// changed) gates it again.
func TestClearedBeforeTheStatus(t *testing.T) {
	s := NewClearedStore(nil)
	status := func(groups ...wavev1.GroupStatus) *wavev1.Sequence {
		return &wavev1.Sequence{ObjectMeta: metav1.ObjectMeta{Name: "shop"}, Status: wavev1.SequenceStatus{Groups: groups}}
	}
	cleared := func() map[string]bool {
		out := map[string]bool{}
		for _, k := range []struct{ seq, group, template string }{
			{"shop", "web", "rs-a/a"}, {"shop", "web", "rs-b/b"}, {"shop", "db", "sts/1"}, {"other", "web", "rs-a/a"},
		} {
			out[k.seq+"/"+k.group+"/"+k.template] = s.Cleared(k.seq, k.group, k.template)
		}
		return out
	}
	steps := []struct {
		name string
		do   func()
		want []string
	}{
		{"status clears db's template", func() { s.set("shop", status(wavev1.GroupStatus{Name: "db", ClearedTemplates: []string{"sts/1"}})) },
			[]string{"shop/db/sts/1"}},
		{"a pass releases web's templates", func() { s.Clear("shop", map[string][]string{"web": {"rs-a/a", "rs-b/b"}}) },
			[]string{"shop/db/sts/1", "shop/web/rs-a/a", "shop/web/rs-b/b"}},
		{"its status arrives", func() {
			s.set("shop", status(wavev1.GroupStatus{Name: "db", ClearedTemplates: []string{"sts/1"}}, wavev1.GroupStatus{Name: "web", ClearedTemplates: []string{"rs-a/a", "rs-b/b"}}))
		}, []string{"shop/db/sts/1", "shop/web/rs-a/a", "shop/web/rs-b/b"}},
		// A status replaces what this replica was told: a template pruned there is forgotten here.
		{"web's rs-a/a pods are all gone", func() {
			s.set("shop", status(wavev1.GroupStatus{Name: "db", ClearedTemplates: []string{"sts/1"}}, wavev1.GroupStatus{Name: "web", ClearedTemplates: []string{"rs-b/b"}}))
		}, []string{"shop/db/sts/1", "shop/web/rs-b/b"}},
		{"db changed: web is not open any more", func() { s.set("shop", status(wavev1.GroupStatus{Name: "db"}, wavev1.GroupStatus{Name: "web"})) },
			nil},
		{"a sequence it has no status of yet", func() { s.Clear("other", map[string][]string{"web": {"rs-a/a"}}) },
			[]string{"other/web/rs-a/a"}},
	}
	for _, st := range steps {
		st.do()
		want := cleared()
		for k := range want {
			want[k] = false
		}
		for _, k := range st.want {
			want[k] = true
		}
		if d := cmp.Diff(want, cleared()); d != "" {
			t.Errorf("%s: cleared (-want +got):\n%s", st.name, d)
		}
	}
}
