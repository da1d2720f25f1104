package mutate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/policy"
)

// realisticPodSpec is a pod spec of the size production manifests have: probes, resources,
// env, volumes, security context.
func realisticPodSpec() corev1.PodSpec {
	env := make([]corev1.EnvVar, 0, 12)
	for i := range 12 {
		env = append(env, corev1.EnvVar{Name: fmt.Sprintf("SETTING_%02d", i), Value: fmt.Sprintf("value-%02d-with-some-length", i)})
	}
	probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr8080}},
		PeriodSeconds: 10, FailureThreshold: 3}
	f := false
	return corev1.PodSpec{
		ServiceAccountName: "web",
		Containers: []corev1.Container{{
			Name: "web", Image: "registry.example.com/shop/web:v1.42.7@sha256:" + strings.Repeat("a", 64),
			Args:           []string{"--listen=:8080", "--db=postgres://db:5432/shop", "--log-format=json"},
			Ports:          []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "metrics", ContainerPort: 9090}},
			Env:            env,
			LivenessProbe:  probe,
			ReadinessProbe: probe,
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")},
			},
			VolumeMounts:    []corev1.VolumeMount{{Name: "config", MountPath: "/etc/web"}, {Name: "tmp", MountPath: "/tmp"}},
			SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: &f, ReadOnlyRootFilesystem: new(true)},
		}},
		Volumes: []corev1.Volume{
			{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "web"}}}},
			{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		},
	}
}

var intstr8080 = intOrString(8080)

func benchLabels() map[string]string {
	return map[string]string{
		"app.kubernetes.io/name": "web", "app.kubernetes.io/instance": "shop", "app.kubernetes.io/version": "1.42.7",
		"app.kubernetes.io/part-of": "shop", keys.GroupLabel: "web", keys.OrderLabel: "2",
	}
}

func benchDeployment() *appsv1.Deployment {
	d := &appsv1.Deployment{
		TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", Labels: benchLabels(),
			Annotations: map[string]string{"kubectl.kubernetes.io/last-applied-configuration": strings.Repeat("x", 600)}},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "web"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app.kubernetes.io/name": "web", "app.kubernetes.io/instance": "shop"}},
				Spec:       realisticPodSpec(),
			},
		},
	}
	return d
}

func benchPod() *corev1.Pod {
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{GenerateName: "web-7d9f8c-", Namespace: "shop", Labels: benchLabels()},
		Spec:       realisticPodSpec(),
	}
}

func reviewBody(b *testing.B, obj any, group, version, kind, resource string) []byte {
	b.Helper()
	raw, err := json.Marshal(obj)
	if err != nil {
		b.Fatal(err)
	}
	body := fmt.Sprintf(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"705ab4f5-6393-11e8-b7cc-42010a800002",`+
		`"kind":{"group":%q,"version":%q,"kind":%q},"resource":{"group":%q,"version":%q,"resource":%q},"namespace":"shop",`+
		`"operation":"CREATE","userInfo":{"username":"system:serviceaccount:kube-system:replicaset-controller"},"object":%s}}`,
		group, version, kind, group, version, resource, raw)
	return []byte(body)
}

// BenchmarkReview measures the whole in-process review path: decode the AdmissionReview, resolve,
// build the patch, encode the response.
func BenchmarkReview(b *testing.B) {
	idx := policy.Compile([]wavev1.WavePolicy{{
		ObjectMeta: metav1.ObjectMeta{Name: "shop"},
		Spec:       wavev1.WavePolicySpec{Groups: []wavev1.GroupSpec{{Name: "db", Order: 1}, {Name: "web", Order: 3}}},
	}})
	wh := &Server{Policies: policy.NewStaticStore(idx)}
	for _, bc := range []struct {
		name string
		body func(*testing.B) []byte
	}{
		{"Deployment", func(b *testing.B) []byte {
			return reviewBody(b, benchDeployment(), "apps", "v1", "Deployment", "deployments")
		}},
		{"Pod", func(b *testing.B) []byte { return reviewBody(b, benchPod(), "", "v1", "Pod", "pods") }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			body := bc.body(b)
			rec := httptest.NewRecorder()
			b.ReportAllocs()
			for b.Loop() {
				rec.Body.Reset()
				req, _ := http.NewRequest(http.MethodPost, Path, bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				wh.ServeHTTP(rec, req)
			}
			b.ReportMetric(float64(len(body)), "review-bytes")
			if !bytes.Contains(rec.Body.Bytes(), []byte(`"patch"`)) {
				b.Fatalf("no patch in %s", rec.Body.String())
			}
		})
	}
}

func intOrString(i int32) intstr.IntOrString { return intstr.FromInt32(i) }
