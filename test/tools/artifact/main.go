// Command artifact stands in for Flux's source-controller on wavegate's local cluster: it packs a
// directory of manifests into a .tar.gz, serves it over HTTP on a loopback address, and publishes
// it as the status.artifact of a Flux ExternalArtifact (source.toolkit.fluxcd.io/v1), which a
// Kustomization names as its sourceRef (kustomize-controller runs with
// --feature-gates=ExternalArtifact=true). kustomize-controller downloads the URL, verifies the
// sha256 digest and applies what it finds; it reconciles again when the revision changes.
//
//	artifact -dir DIR -namespace NS -name NAME [-listen 127.0.0.1:0] [-kubeconfig FILE] [-watch 2s]
//
// The archive is deterministic (sorted entries, no timestamps or owners), so its digest, and the
// revision "latest@sha256:<hex>", change only when the directory's content does. With -watch the
// directory is packed again at that interval and a change is published at once; without it, run
// the command again (the object is server-side applied, so a rerun updates it). It serves until
// SIGINT or SIGTERM and leaves the ExternalArtifact in place.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
)

var gvr = schema.GroupVersionResource{Group: "source.toolkit.fluxcd.io", Version: "v1", Resource: "externalartifacts"}

const fieldManager = "wavegate-artifact"

func main() {
	dir := flag.String("dir", "", "directory of manifests to serve (required)")
	namespace := flag.String("namespace", "default", "namespace of the ExternalArtifact")
	name := flag.String("name", "", "name of the ExternalArtifact (required)")
	listen := flag.String("listen", "127.0.0.1:0", "loopback address to serve the archive on")
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the cluster")
	watch := flag.Duration("watch", 0, "pack the directory again at this interval and publish changes (0: once)")
	flag.Parse()
	if *dir == "" || *name == "" || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *dir, *namespace, *name, *listen, *kubeconfig, *watch); err != nil {
		fmt.Fprintln(os.Stderr, "artifact:", err)
		os.Exit(1)
	}
}

// archive is one packed version of the directory.
type archive struct {
	data     []byte
	hex      string // sha256 of data
	modified time.Time
}

// server serves the archives published so far by their digest (the current one and the one
// before, so that a download started before a change still succeeds).
type server struct {
	prefix string // URL path prefix: /<namespace>/<name>/
	mu     sync.Mutex
	recent []*archive
}

func (s *server) add(a *archive) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recent = append(s.recent, a)
	if len(s.recent) > 2 {
		s.recent = s.recent[len(s.recent)-2:]
	}
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	file, ok := strings.CutPrefix(r.URL.Path, s.prefix)
	if !ok || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
		http.NotFound(w, r)
		return
	}
	s.mu.Lock()
	var found *archive
	for _, a := range s.recent {
		if file == a.hex+".tar.gz" {
			found = a
		}
	}
	s.mu.Unlock()
	if found == nil {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/gzip")
	http.ServeContent(w, r, file, found.modified, bytes.NewReader(found.data))
}

func run(ctx context.Context, dir, namespace, name, listen, kubeconfig string, watch time.Duration) error {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("-listen %s: only loopback addresses are allowed", listen)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	client := dyn.Resource(gvr).Namespace(namespace)

	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	srv := &server{prefix: "/" + namespace + "/" + name + "/"}
	httpServer := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	serveErr := make(chan error, 1)
	go func() { serveErr <- httpServer.Serve(ln) }()
	defer httpServer.Close()
	base := "http://" + ln.Addr().String() + srv.prefix
	fmt.Printf("serving %s on %s\n", dir, "http://"+ln.Addr().String())

	var current string // digest published to the cluster
	publish := func(ctx context.Context) error {
		a, err := pack(dir)
		if err != nil {
			return err
		}
		if a.hex == current {
			return nil
		}
		srv.add(a)
		revision := "latest@sha256:" + a.hex
		if err := apply(ctx, client, namespace, name, base+a.hex+".tar.gz", revision, a); err != nil {
			return err
		}
		current = a.hex
		fmt.Printf("published %s/%s revision %s (%d bytes)\n", namespace, name, revision, len(a.data))
		return nil
	}

	// The first publication must succeed; retry briefly in case the CRD was just created.
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := publish(ctx)
		if err == nil {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		fmt.Fprintln(os.Stderr, "artifact: retrying:", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}

	var tick <-chan time.Time
	if watch > 0 {
		t := time.NewTicker(watch)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-serveErr:
			return err
		case <-tick:
			if err := publish(ctx); err != nil && ctx.Err() == nil {
				fmt.Fprintln(os.Stderr, "artifact:", err) // retried at the next tick
			}
		}
	}
}

// apply creates or updates the ExternalArtifact and writes its status (server-side apply).
func apply(ctx context.Context, client dynamic.ResourceInterface, namespace, name, url, revision string, a *archive) error {
	opts := metav1.ApplyOptions{FieldManager: fieldManager, Force: true}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": gvr.GroupVersion().String(),
		"kind":       "ExternalArtifact",
		"metadata":   map[string]any{"name": name, "namespace": namespace},
		"spec":       map[string]any{},
	}}
	live, err := client.Apply(ctx, name, obj, opts)
	if err != nil {
		return fmt.Errorf("apply ExternalArtifact %s/%s: %w", namespace, name, err)
	}
	now := metav1.Now().Rfc3339Copy().Format(time.RFC3339)
	obj.Object["status"] = map[string]any{
		"artifact": map[string]any{
			"url":            url,
			"digest":         "sha256:" + a.hex,
			"revision":       revision,
			"path":           "externalartifact/" + namespace + "/" + name + "/" + a.hex + ".tar.gz",
			"size":           int64(len(a.data)),
			"lastUpdateTime": now,
		},
		"conditions": []any{map[string]any{
			"type":               "Ready",
			"status":             "True",
			"reason":             "Succeeded",
			"message":            "stored artifact for revision '" + revision + "'",
			"lastTransitionTime": now,
			"observedGeneration": live.GetGeneration(),
		}},
	}
	delete(obj.Object, "spec")
	if _, err := client.ApplyStatus(ctx, name, obj, opts); err != nil {
		return fmt.Errorf("apply status of ExternalArtifact %s/%s: %w", namespace, name, err)
	}
	return nil
}

// pack writes dir's directories and regular files into a deterministic .tar.gz. Other file types
// (symbolic links, sockets) are left out.
func pack(dir string) (*archive, error) {
	info, err := os.Stat(dir)
	if err != nil {
		return nil, err
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("%s is not a directory", dir)
	}
	var paths []string
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir && (d.IsDir() || d.Type().IsRegular()) {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf) // no name, no modification time in the header
	tw := tar.NewWriter(gz)
	var modified time.Time
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if fi.ModTime().After(modified) {
			modified = fi.ModTime()
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return nil, err
		}
		hdr := &tar.Header{Name: filepath.ToSlash(rel)}
		if fi.IsDir() {
			hdr.Typeflag, hdr.Name, hdr.Mode = tar.TypeDir, hdr.Name+"/", 0o755
			if err := tw.WriteHeader(hdr); err != nil {
				return nil, err
			}
			continue
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeReg, 0o644, int64(len(data))
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := errors.Join(tw.Close(), gz.Close()); err != nil {
		return nil, err
	}
	sum := sha256.Sum256(buf.Bytes())
	return &archive{data: buf.Bytes(), hex: hex.EncodeToString(sum[:]), modified: modified}, nil
}
