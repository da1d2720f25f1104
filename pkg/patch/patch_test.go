package patch

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestPatches(t *testing.T) {
	cases := map[string]struct {
		ops  []Operation
		want string
	}{
		"test and remove a finalizer": {TestAndRemove("/metadata/finalizers", 2, "wavegate.io/ordered-teardown"),
			`[{"op":"test","path":"/metadata/finalizers/2","value":"wavegate.io/ordered-teardown"},{"op":"remove","path":"/metadata/finalizers/2"}]`},
		"test a gate by its object": {TestAndRemove("/spec/schedulingGates", 0, map[string]string{"name": "wavegate.io/ordered"}),
			`[{"op":"test","path":"/spec/schedulingGates/0","value":{"name":"wavegate.io/ordered"}},{"op":"remove","path":"/spec/schedulingGates/0"}]`},
		"test the object's UID first": {TestAndRemoveFrom("6f1c", "/spec/schedulingGates", 1, map[string]string{"name": "wavegate.io/ordered"}),
			`[{"op":"test","path":"/metadata/uid","value":"6f1c"},{"op":"test","path":"/spec/schedulingGates/1","value":{"name":"wavegate.io/ordered"}},` +
				`{"op":"remove","path":"/spec/schedulingGates/1"}]`},
		"add an annotation with an escaped key": {[]Operation{Add(Pointer("/metadata/annotations", "resolved.wavegate.io/wave"), "now")},
			`[{"op":"add","path":"/metadata/annotations/resolved.wavegate.io~1wave","value":"now"}]`},
		"remove a field": {[]Operation{Remove("/spec/activeDeadlineSeconds")}, `[{"op":"remove","path":"/spec/activeDeadlineSeconds"}]`},
		"set entries of a map that is not there": {SetEntries(nil, "/metadata/annotations", nil, map[string]string{"a/b~c": "1"}),
			`[{"op":"add","path":"/metadata/annotations","value":{"a/b~c":"1"}}]`},
		"set entries by escaped key, only those that differ": {SetEntries(nil, "/metadata/annotations",
			map[string]string{"same": "1", "other": "x"}, map[string]string{"a/b~c": "1", "same": "1"}),
			`[{"op":"add","path":"/metadata/annotations/a~1b~0c","value":"1"}]`},
		"tilde before slash": {[]Operation{Add(Pointer("/metadata/labels", "a~b/c"), "v")},
			`[{"op":"add","path":"/metadata/labels/a~0b~1c","value":"v"}]`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := Marshal(tc.ops...)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, string(got)); diff != "" {
				t.Errorf("patch (-want,+got):\n%s", diff)
			}
		})
	}
}
