// Package patch builds the JSON patches (RFC 6902) wavegate's admission and controllers write:
// JSON pointers with one escaper, and "test, then remove" for list elements, so that a concurrent
// change of a list fails the patch instead of removing another element.
package patch

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"gomodules.xyz/jsonpatch/v2"
	"k8s.io/apimachinery/pkg/types"
)

// Operation is one JSON patch operation.
type Operation = jsonpatch.Operation

var escaper = strings.NewReplacer("~", "~0", "/", "~1")

// Escape escapes one reference token of a JSON pointer (RFC 6901): "~" then "/".
func Escape(token string) string { return escaper.Replace(token) }

// Pointer joins a JSON pointer and reference tokens, escaping the tokens.
func Pointer(base string, tokens ...string) string {
	var b strings.Builder
	b.WriteString(base)
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(Escape(t))
	}
	return b.String()
}

// Add sets path to value (on an existing object member it replaces the value).
func Add(path string, value any) Operation { return jsonpatch.NewOperation("add", path, value) }

// Remove removes the value at path (the patch fails when there is none).
func Remove(path string) Operation { return jsonpatch.NewOperation("remove", path, nil) }

// test makes the patch fail (422) unless the value at path equals value.
func test(path string, value any) Operation { return jsonpatch.NewOperation("test", path, value) }

// TestAndRemove tests that element i of the list at path equals value, then removes it.
func TestAndRemove(path string, i int, value any) []Operation {
	at := path + "/" + strconv.Itoa(i)
	return []Operation{test(at, value), Remove(at)}
}

// TestAndRemoveFrom is TestAndRemove on the object of that UID only: one deleted and created again
// under its name since it was read fails the patch (422) instead of losing the element.
func TestAndRemoveFrom(uid types.UID, path string, i int, value any) []Operation {
	return append([]Operation{test("/metadata/uid", uid)}, TestAndRemove(path, i, value)...)
}

// Marshal encodes operations as a JSON patch document.
func Marshal(ops ...Operation) ([]byte, error) {
	b, err := json.Marshal(ops)
	if err != nil {
		return nil, fmt.Errorf("encoding a JSON patch: %w", err)
	}
	return b, nil
}

// SetEntries appends the operations that make the map at path hold every entry of want, leaving
// other entries alone. It emits nothing for entries that already hold the wanted value, so a second
// pass over its own output yields no operations. Keys are visited in sorted order: the patch is
// deterministic.
func SetEntries(ops []Operation, path string, have, want map[string]string) []Operation {
	if have == nil {
		if len(want) == 0 {
			return ops
		}
		return append(ops, Add(path, want))
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
		ops = append(ops, Add(Pointer(path, k), want[k]))
	}
	return ops
}
