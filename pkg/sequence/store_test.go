package sequence

import (
	"strings"
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

// TestStoreHearsOnlyASequencesOwnObject: a Sequence object that ObjectName does not name for the
// sequence it records (an earlier version's name for it) clears nothing, and its deletion does not
// take back what the sequence's own object cleared.
func TestStoreHearsOnlyASequencesOwnObject(t *testing.T) {
	seq := "team-" + strings.Repeat("a", 8) // shaped like a hashed name: its object's name is hashed
	object := func(name string, templates ...string) *wavev1.Sequence {
		return &wavev1.Sequence{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: wavev1.SequenceSpec{Sequence: seq},
			Status: wavev1.SequenceStatus{Groups: []wavev1.GroupStatus{{Name: "web", ClearedTemplates: templates}}}}
	}
	s := NewClearedStore(nil)
	own, stray := object(ObjectName(seq), "rs/own"), object(seq, "rs/stray")
	if own.Name == stray.Name {
		t.Fatalf("the test proves nothing: ObjectName(%q) = %q", seq, own.Name)
	}
	s.seen(own, false)
	s.seen(stray, false)
	s.seen(stray, true)
	got := map[string]bool{"rs/own": s.Cleared(seq, "web", "rs/own"), "rs/stray": s.Cleared(seq, "web", "rs/stray")}
	if d := cmp.Diff(map[string]bool{"rs/own": true, "rs/stray": false}, got); d != "" {
		t.Errorf("cleared (-want +got):\n%s", d)
	}
}
