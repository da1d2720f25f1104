package mutate

import (
	"sort"

	"gomodules.xyz/jsonpatch/v2"

	"wavegate.io/wavegate/pkg/patch"
)

// setEntries appends the operations that make the map at path hold every entry of want, leaving
// other entries alone. It emits nothing for entries that already hold the wanted value, so a second
// pass over its own output yields no operations. Keys are visited in sorted order: the patch is
// deterministic.
func setEntries(ops []jsonpatch.Operation, path string, have, want map[string]string) []jsonpatch.Operation {
	if have == nil {
		if len(want) == 0 {
			return ops
		}
		return append(ops, jsonpatch.NewOperation("add", path, want))
	}
	ks := make([]string, 0, len(want))
	for k, v := range want {
		if cur, ok := have[k]; !ok || cur != v {
			ks = append(ks, k)
		}
	}
	sort.Strings(ks)
	for _, k := range ks {
		// "add" on an existing member replaces it (RFC 6902 4.1).
		ops = append(ops, patch.Add(patch.Pointer(path, k), want[k]))
	}
	return ops
}
