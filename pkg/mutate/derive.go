package mutate

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/valyala/fastjson"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"wavegate.io/wavegate/pkg/policy"
)

// Derive applies to a JSON object exactly what admission would stamp on it at CREATE (waves,
// wavegate's annotations, pod-template identity), without scheduling gates or finalizers: those
// belong to the live object, not to Git. It is the same code path as admission, so `wavegate
// render` writes byte-for-byte the annotations the webhook adds, given the labels the namespace
// has (policies and shared sequences select namespaces by them).
func Derive(raw []byte, gk schema.GroupKind, namespace string, namespaceLabels map[string]string, idx *policy.Index) ([]byte, []string, error) {
	var parser fastjson.Parser
	v, err := parseDeep(&parser, raw)
	if err != nil {
		return nil, nil, err
	}
	obj, err := decodeObject(v, gk)
	if err != nil {
		return nil, nil, err
	}
	resp := Mutate(obj, Request{GroupKind: gk, Namespace: namespace, NamespaceLabels: namespaceLabels}, idx)
	if !resp.Allowed {
		return nil, nil, errors.New(resp.Result.Message)
	}
	if len(resp.Patches) == 0 {
		return raw, resp.Warnings, nil
	}
	ops, err := json.Marshal(resp.Patches)
	if err != nil {
		return nil, nil, err
	}
	p, err := jsonpatch.DecodePatch(ops)
	if err != nil {
		return nil, nil, err
	}
	out, err := p.Apply(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("applying wavegate's patch: %w", err)
	}
	return out, resp.Warnings, nil
}
