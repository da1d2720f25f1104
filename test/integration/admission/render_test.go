package admission

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"wavegate.io/wavegate/pkg/render"
	"wavegate.io/wavegate/test/framework"
)

// TestRenderMatchesAdmission: `wavegate render` writes byte-for-byte the annotations and template
// labels the webhook adds through the real API server.
func TestRenderMatchesAdmission(t *testing.T) {
	g := NewWithT(t)
	root, err := framework.RepoRoot()
	g.Expect(err).NotTo(HaveOccurred())
	ns := namespace(t, true)
	raw, err := os.ReadFile(filepath.Join(root, "examples", "shop", "web.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	manifest := strings.ReplaceAll(string(raw), "namespace: shop", "namespace: "+ns)

	var out bytes.Buffer
	g.Expect(render.Render(strings.NewReader(manifest), &out, render.Options{})).To(Succeed())
	rendered := &appsv1.Deployment{}
	g.Expect(yaml.Unmarshal(out.Bytes(), rendered)).To(Succeed())

	admitted := &appsv1.Deployment{}
	g.Expect(yaml.Unmarshal([]byte(manifest), admitted)).To(Succeed())
	g.Expect(env.Client.Create(context.Background(), admitted, client.DryRunAll)).To(Succeed())

	g.Expect(rendered.Annotations).To(Equal(admitted.Annotations))
	g.Expect(rendered.Spec.Template.Labels).To(Equal(admitted.Spec.Template.Labels))
}
