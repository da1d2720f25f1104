// Package render is `wavegate render`: admission's derivation applied offline to a manifest stream,
// so that teams who want Argo CD's native create order can write the derived waves into Git. It
// also runs as a kustomize KRM function (a ResourceList on stdin).
package render

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
	"wavegate.io/wavegate/pkg/mutate"
	"wavegate.io/wavegate/pkg/policy"
)

// clusterScoped are built-in kinds without a namespace.
var clusterScoped = map[string]bool{
	"Namespace": true, "CustomResourceDefinition": true, "ClusterRole": true, "ClusterRoleBinding": true,
	"PersistentVolume": true, "StorageClass": true, "PriorityClass": true, "MutatingWebhookConfiguration": true,
	"ValidatingWebhookConfiguration": true, "APIService": true, "IngressClass": true, "RuntimeClass": true,
	"WavePolicy": true, "Sequence": true, "Node": true,
}

// Options control rendering.
type Options struct {
	// Namespace is used for namespaced objects whose manifest names none.
	Namespace string
	// ClusterScopedKinds adds kinds (custom resources) that have no namespace.
	ClusterScopedKinds []string
	// Policies are WavePolicies to derive with, besides those in the stream itself.
	Policies []wavev1.WavePolicy
	// NamespaceLabels are the labels of namespaces that are not in the stream (a Namespace in the
	// stream brings its own), for policies and shared sequences that select namespaces.
	NamespaceLabels map[string]map[string]string
	// Warnings receives admission's warnings.
	Warnings io.Writer
}

// Render reads manifests (a YAML stream, or a KRM ResourceList) and writes them with the derived
// waves. A manifest admission would deny is an error naming it and the field to fix.
func Render(in io.Reader, out io.Writer, o Options) error {
	docs, list, err := read(in)
	if err != nil {
		return err
	}
	policies := append([]wavev1.WavePolicy(nil), o.Policies...)
	for _, d := range docs {
		if d.kind == "WavePolicy" {
			var p wavev1.WavePolicy
			if err := yaml.Unmarshal(d.json, &p); err != nil {
				return fmt.Errorf("reading WavePolicy: %w", err)
			}
			policies = append(policies, p)
		}
	}
	idx := policy.Compile(policies)
	nsLabels := namespaceLabels(docs, o.NamespaceLabels)
	unknown := map[string]bool{}
	cluster := map[string]bool{}
	for k, v := range clusterScoped {
		cluster[k] = v
	}
	for _, k := range o.ClusterScopedKinds {
		cluster[k] = true
	}
	for i, d := range docs {
		ns := d.namespace
		if cluster[d.kind] {
			ns = ""
		} else if ns == "" {
			if o.Namespace == "" {
				return fmt.Errorf("%s %s has no namespace: set metadata.namespace, pass --namespace, or list the kind in --cluster-scoped-kinds", d.kind, d.name)
			}
			ns = o.Namespace
		}
		labels, known := nsLabels[ns]
		if ns != "" && !known {
			// The API server labels every namespace with its name.
			labels = map[string]string{corev1.LabelMetadataName: ns}
			if idx.NeedsNamespaceLabels() && !unknown[ns] && o.Warnings != nil {
				unknown[ns] = true
				fmt.Fprintf(o.Warnings, "Warning: namespace %s is not in the manifests: policies and shared sequences that select namespaces by label "+
					"see only %s=%s (add the Namespace to the manifests, or pass --namespace-labels)\n", ns, corev1.LabelMetadataName, ns)
			}
		}
		derived, warnings, err := mutate.Derive(d.json, d.gk, ns, labels, idx)
		if err != nil {
			return fmt.Errorf("%s %s: %w", d.kind, d.name, err)
		}
		for _, w := range warnings {
			if o.Warnings != nil {
				fmt.Fprintf(o.Warnings, "Warning: %s %s: %s\n", d.kind, d.name, w)
			}
		}
		docs[i].json = derived
	}
	return write(out, docs, list)
}

// namespaceLabels returns the labels of the stream's Namespaces, then those given, each with the
// name label the API server sets.
func namespaceLabels(docs []doc, given map[string]map[string]string) map[string]map[string]string {
	out := map[string]map[string]string{}
	for ns, l := range given {
		out[ns] = maps.Clone(l)
	}
	for _, d := range docs {
		if d.kind != "Namespace" || d.gk.Group != "" {
			continue
		}
		var n struct {
			Metadata struct {
				Labels map[string]string `json:"labels"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(d.json, &n); err == nil {
			out[d.name] = n.Metadata.Labels
		}
	}
	for ns, l := range out {
		if l == nil {
			l = map[string]string{}
		}
		l[corev1.LabelMetadataName] = ns
		out[ns] = l
	}
	return out
}

type doc struct {
	json       []byte
	gk         schema.GroupKind
	kind, name string
	namespace  string
}

type header struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Items []map[string]any `json:"items"`
}

// read returns the documents and, for a ResourceList, the list itself (to write back).
func read(in io.Reader) ([]doc, map[string]any, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(in))
	var docs []doc
	for {
		raw, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, err
		}
		if len(bytes.TrimSpace(raw)) == 0 {
			continue
		}
		j, err := yaml.YAMLToJSON(raw)
		if err != nil {
			return nil, nil, fmt.Errorf("not YAML: %w", err)
		}
		if string(j) == "null" {
			continue
		}
		var h header
		if err := yaml.Unmarshal(j, &h); err != nil {
			return nil, nil, err
		}
		if h.Kind == "ResourceList" {
			var list map[string]any
			if err := yaml.Unmarshal(j, &list); err != nil {
				return nil, nil, err
			}
			for _, it := range h.Items {
				b, err := yaml.Marshal(it)
				if err != nil {
					return nil, nil, err
				}
				sub, _, err := read(bytes.NewReader(b))
				if err != nil {
					return nil, nil, err
				}
				docs = append(docs, sub...)
			}
			return docs, list, nil
		}
		gv, err := schema.ParseGroupVersion(h.APIVersion)
		if err != nil || h.Kind == "" {
			return nil, nil, fmt.Errorf("a document without apiVersion and kind: %.60s", raw)
		}
		docs = append(docs, doc{json: j, gk: schema.GroupKind{Group: gv.Group, Kind: h.Kind}, kind: h.Kind, name: h.Metadata.Name, namespace: h.Metadata.Namespace})
	}
	return docs, nil, nil
}

func write(out io.Writer, docs []doc, list map[string]any) error {
	if list != nil {
		items := make([]any, 0, len(docs))
		for _, d := range docs {
			var m map[string]any
			if err := yaml.Unmarshal(d.json, &m); err != nil {
				return err
			}
			items = append(items, m)
		}
		list["items"] = items
		b, err := yaml.Marshal(list)
		if err != nil {
			return err
		}
		_, err = out.Write(b)
		return err
	}
	var sb strings.Builder
	for i, d := range docs {
		if i > 0 {
			sb.WriteString("---\n")
		}
		b, err := yaml.JSONToYAML(d.json)
		if err != nil {
			return err
		}
		sb.Write(b)
	}
	_, err := io.WriteString(out, sb.String())
	return err
}
