package cmd

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"wavegate.io/wavegate/pkg/render"
)

func newRenderCommand() *cobra.Command {
	var o render.Options
	var files []string
	var nsLabels map[string]string
	c := &cobra.Command{
		Use:   "render [-f file|dir|-]...",
		Short: "Write the waves wavegate derives into manifests, offline (also a kustomize KRM function)",
		Long: "Reads manifests (files, directories, or stdin; WavePolicies in the stream are used) and writes them with the\n" +
			"argocd.argoproj.io/sync-wave and resolved.wavegate.io annotations admission would add. A ResourceList on stdin\n" +
			"is answered with a ResourceList, so the command works as a kustomize KRM function.",
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Warnings = cmd.ErrOrStderr()
			if len(nsLabels) > 0 {
				if o.Namespace == "" {
					return errors.New("--namespace-labels are the labels of --namespace: pass --namespace too")
				}
				o.NamespaceLabels = map[string]map[string]string{o.Namespace: nsLabels}
			}
			var readers []io.Reader
			if len(files) == 0 {
				files = []string{"-"}
			}
			for _, f := range files {
				rs, err := open(f, cmd.InOrStdin())
				if err != nil {
					return err
				}
				readers = append(readers, rs...)
			}
			return render.Render(io.MultiReader(readers...), cmd.OutOrStdout(), o)
		},
	}
	c.Flags().StringArrayVarP(&files, "filename", "f", nil, "a manifest file, a directory of them, or - for stdin (repeatable)")
	c.Flags().StringVarP(&o.Namespace, "namespace", "n", "", "namespace of namespaced objects whose manifests name none")
	c.Flags().StringSliceVar(&o.ClusterScopedKinds, "cluster-scoped-kinds", nil, "custom resource kinds without a namespace")
	c.Flags().StringToStringVar(&nsLabels, "namespace-labels", nil, "labels of --namespace, when the manifests do not hold the Namespace (policies and shared sequences select namespaces by them)")
	return c
}

// open returns readers for a file, every .yaml/.yml/.json file of a directory, or stdin, each
// followed by a document separator.
func open(path string, stdin io.Reader) ([]io.Reader, error) {
	sep := func() io.Reader { return strings.NewReader("\n---\n") }
	if path == "-" {
		return []io.Reader{stdin, sep()}, nil
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		return []io.Reader{bytes.NewReader(b), sep()}, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		if ext := filepath.Ext(e.Name()); !e.IsDir() && (ext == ".yaml" || ext == ".yml" || ext == ".json") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	var out []io.Reader
	for _, n := range names {
		rs, err := open(filepath.Join(path, n), stdin)
		if err != nil {
			return nil, err
		}
		out = append(out, rs...)
	}
	return out, nil
}
