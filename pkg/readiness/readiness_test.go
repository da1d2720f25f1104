package readiness

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
)

// toJSON converts a YAML literal (block or flow style) to JSON.
func toJSON(t *testing.T, doc string) []byte {
	t.Helper()
	var raw json.RawMessage
	if err := utilyaml.NewYAMLToJSONDecoder(strings.NewReader(doc)).Decode(&raw); err != nil {
		t.Fatalf("parsing %q: %v", doc, err)
	}
	return raw
}

// parse turns a YAML literal into an object.
func parse(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(toJSON(t, doc)); err != nil {
		t.Fatalf("parsing %q: %v", doc, err)
	}
	return u
}

// classes turns YAML literals into StorageClasses.
func classes(t *testing.T, docs ...string) StorageClasses {
	t.Helper()
	var out StorageClasses
	for _, d := range docs {
		var sc storagev1.StorageClass
		if err := json.Unmarshal(toJSON(t, d), &sc); err != nil {
			t.Fatal(err)
		}
		out = append(out, sc)
	}
	return out
}

const (
	wffcClass = `{apiVersion: storage.k8s.io/v1, kind: StorageClass, metadata: {name: wffc}, provisioner: p, volumeBindingMode: WaitForFirstConsumer}`
	fastClass = `{apiVersion: storage.k8s.io/v1, kind: StorageClass, metadata: {name: fast}, provisioner: p, volumeBindingMode: Immediate}`
	// A class that leaves volumeBindingMode unset binds Immediate.
	unsetClass       = `{apiVersion: storage.k8s.io/v1, kind: StorageClass, metadata: {name: unset}, provisioner: p}`
	defaultWFFCClass = `{apiVersion: storage.k8s.io/v1, kind: StorageClass, provisioner: p, volumeBindingMode: WaitForFirstConsumer,
  metadata: {name: standard, annotations: {storageclass.kubernetes.io/is-default-class: "true"}}}`
	defaultFastClass = `{apiVersion: storage.k8s.io/v1, kind: StorageClass, provisioner: p, volumeBindingMode: Immediate,
  metadata: {name: standard, annotations: {storageclass.kubernetes.io/is-default-class: "true"}}}`
)

// claim is a Pending claim with the given spec and metadata additions.
func claim(meta, spec string) string {
	return `
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data, namespace: ns` + meta + `}
spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}` + spec + `}
status: {phase: Pending}`
}

type checkCase struct {
	name   string
	yaml   string
	policy wavev1.Readiness
	opts   []Option
	// env defaults to the classes wffc, fast and unset, none of them the default.
	env   Env
	noEnv bool
	want  Status
	// terminal is the wanted Result.Terminal.
	terminal bool
	// message, when set, must be part of Result.Message.
	message string
}

func TestCheck(t *testing.T) {
	noDefault := classes(t, wffcClass, fastClass, unsetClass)
	defaultWFFC := classes(t, wffcClass, fastClass, defaultWFFCClass)
	defaultFast := classes(t, wffcClass, fastClass, defaultFastClass)
	forbidden := FuncEnv(func() ([]storagev1.StorageClass, error) {
		return nil, apierrors.NewForbidden(schema.GroupResource{Group: "storage.k8s.io", Resource: "storageclasses"}, "", nil)
	})
	pvcRule := wavev1.Readiness{Rules: []wavev1.ReadinessRule{{APIVersion: "v1", Kind: "PersistentVolumeClaim",
		Current: "self.status.phase == 'Pending'", Failed: "self.status.phase == 'Bound'"}}}
	widgetRule := wavev1.Readiness{Rules: []wavev1.ReadinessRule{{APIVersion: "example.com/v1", Kind: "Widget",
		Current: "self.status.phase == 'Running'", Failed: "self.status.phase == 'Error'"}}}

	cases := []checkCase{
		// PersistentVolumeClaim
		{name: "PersistentVolumeClaim/bound", yaml: `
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data, namespace: ns}
spec: {storageClassName: fast, volumeName: pv-1}
status: {phase: Bound}`, want: Ready},
		{name: "PersistentVolumeClaim/lost", yaml: `
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data, namespace: ns}
spec: {storageClassName: fast, volumeName: pv-1}
status: {phase: Lost}`, want: Failed, terminal: true},
		{name: "PersistentVolumeClaim/pending-WaitForFirstConsumer", yaml: claim("", ", storageClassName: wffc"),
			want: Ready, message: "waits for its first consumer (StorageClass wffc is WaitForFirstConsumer)"},
		{name: "PersistentVolumeClaim/pending-WaitForFirstConsumer-node-selected",
			yaml: claim(", annotations: {volume.kubernetes.io/selected-node: node-1}", ", storageClassName: wffc"),
			want: InProgress, message: "node-1"},
		{name: "PersistentVolumeClaim/pending-WaitForFirstConsumer-names-its-volume", yaml: claim("", ", storageClassName: wffc, volumeName: pv-1"),
			want: InProgress, message: "pv-1"},
		{name: "PersistentVolumeClaim/pending-Immediate", yaml: claim("", ", storageClassName: fast"),
			want: InProgress, message: "StorageClass fast binds Immediate"},
		{name: "PersistentVolumeClaim/pending-binding-mode-unset", yaml: claim("", ", storageClassName: unset"),
			want: InProgress, message: "StorageClass unset binds Immediate"},
		{name: "PersistentVolumeClaim/pending-unknown-class", yaml: claim("", ", storageClassName: nope"),
			want: InProgress, message: "StorageClass nope not found"},
		{name: "PersistentVolumeClaim/pending-beta-annotation-wins",
			yaml: claim(", annotations: {volume.beta.kubernetes.io/storage-class: wffc}", ", storageClassName: fast"),
			want: Ready, message: "StorageClass wffc"},
		{name: "PersistentVolumeClaim/pending-default-class-WaitForFirstConsumer", yaml: claim("", ""), env: defaultWFFC,
			want: Ready, message: "StorageClass standard is WaitForFirstConsumer"},
		{name: "PersistentVolumeClaim/pending-default-class-Immediate", yaml: claim("", ""), env: defaultFast,
			want: InProgress, message: "StorageClass standard binds Immediate"},
		{name: "PersistentVolumeClaim/pending-no-default-class", yaml: claim("", ""),
			want: InProgress, message: "no default StorageClass"},
		{name: "PersistentVolumeClaim/pending-storageClassName-empty", yaml: claim("", `, storageClassName: ""`), env: defaultWFFC,
			want: InProgress, message: "requests no StorageClass"},
		{name: "PersistentVolumeClaim/pending-without-env", yaml: claim("", ", storageClassName: wffc"), noEnv: true,
			want: InProgress, message: "cannot read its StorageClass"},
		{name: "PersistentVolumeClaim/pending-class-forbidden", yaml: claim("", ", storageClassName: wffc"), env: forbidden,
			want: InProgress, message: "StorageClass wffc could not be read"},
		{name: "PersistentVolumeClaim/pending-default-class-forbidden", yaml: claim("", ""), env: forbidden,
			want: InProgress, message: "the default StorageClass could not be read"},
		{name: "PersistentVolumeClaim/no-status-yet", yaml: `
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data, namespace: ns}
spec: {storageClassName: wffc}`, want: Ready},

		// Deployment (kstatus)
		{name: "Deployment/available", yaml: `
apiVersion: apps/v1
kind: Deployment
metadata: {name: d, namespace: ns, generation: 2}
spec: {replicas: 2, progressDeadlineSeconds: 600}
status:
  observedGeneration: 2
  replicas: 2
  updatedReplicas: 2
  readyReplicas: 2
  availableReplicas: 2
  conditions:
  - {type: Available, status: "True", reason: MinimumReplicasAvailable}
  - {type: Progressing, status: "True", reason: NewReplicaSetAvailable}`, want: Ready},
		{name: "Deployment/generation-not-observed", yaml: `
apiVersion: apps/v1
kind: Deployment
metadata: {name: d, namespace: ns, generation: 2}
spec: {replicas: 1}
status:
  observedGeneration: 1
  replicas: 1
  updatedReplicas: 1
  readyReplicas: 1
  availableReplicas: 1
  conditions: [{type: Available, status: "True"}]`, want: InProgress},
		{name: "Deployment/rolling-out", yaml: `
apiVersion: apps/v1
kind: Deployment
metadata: {name: d, namespace: ns, generation: 2}
spec: {replicas: 2, progressDeadlineSeconds: 600}
status:
  observedGeneration: 2
  replicas: 3
  updatedReplicas: 1
  readyReplicas: 2
  availableReplicas: 2
  conditions:
  - {type: Available, status: "True", reason: MinimumReplicasAvailable}
  - {type: Progressing, status: "True", reason: ReplicaSetUpdated}`, want: InProgress, message: "Updated: 1/2"},
		{name: "Deployment/progress-deadline-exceeded", yaml: `
apiVersion: apps/v1
kind: Deployment
metadata: {name: d, namespace: ns, generation: 2}
spec: {replicas: 1, progressDeadlineSeconds: 600}
status:
  observedGeneration: 2
  replicas: 1
  unavailableReplicas: 1
  conditions:
  - {type: Available, status: "False", reason: MinimumReplicasUnavailable}
  - {type: Progressing, status: "False", reason: ProgressDeadlineExceeded}`, want: Failed},

		// StatefulSet
		{name: "StatefulSet/rolled-out", yaml: `
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: s, namespace: ns, generation: 3}
spec: {replicas: 3, updateStrategy: {type: RollingUpdate, rollingUpdate: {partition: 0}}}
status: {observedGeneration: 3, replicas: 3, readyReplicas: 3, currentReplicas: 3, updatedReplicas: 3,
  currentRevision: s-2, updateRevision: s-2}`, want: Ready},
		{name: "StatefulSet/not-all-ready", yaml: `
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: s, namespace: ns, generation: 3}
spec: {replicas: 3, updateStrategy: {type: RollingUpdate, rollingUpdate: {partition: 0}}}
status: {observedGeneration: 3, replicas: 3, readyReplicas: 2, currentReplicas: 3, updatedReplicas: 3,
  currentRevision: s-2, updateRevision: s-2}`, want: InProgress, message: "Ready: 2/3"},
		{name: "StatefulSet/rolling-out", yaml: `
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: s, namespace: ns, generation: 3}
spec: {replicas: 3, updateStrategy: {type: RollingUpdate, rollingUpdate: {partition: 0}}}
status: {observedGeneration: 3, replicas: 3, readyReplicas: 3, currentReplicas: 2, updatedReplicas: 1,
  currentRevision: s-1, updateRevision: s-2}`, want: InProgress},
		{name: "StatefulSet/partition-rolled-out", yaml: `
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: s, namespace: ns, generation: 3}
spec: {replicas: 3, updateStrategy: {type: RollingUpdate, rollingUpdate: {partition: 2}}}
status: {observedGeneration: 3, replicas: 3, readyReplicas: 3, currentReplicas: 2, updatedReplicas: 1,
  currentRevision: s-1, updateRevision: s-2}`, want: Ready},
		{name: "StatefulSet/partition-rolling-out", yaml: `
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: s, namespace: ns, generation: 3}
spec: {replicas: 3, updateStrategy: {type: RollingUpdate, rollingUpdate: {partition: 1}}}
status: {observedGeneration: 3, replicas: 3, readyReplicas: 3, currentReplicas: 2, updatedReplicas: 1,
  currentRevision: s-1, updateRevision: s-2}`, want: InProgress, message: "updated: 1/2"},
		{name: "StatefulSet/ready-not-yet-available", yaml: `
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: s, namespace: ns, generation: 3}
spec: {replicas: 3, minReadySeconds: 60, updateStrategy: {type: RollingUpdate}}
status: {observedGeneration: 3, replicas: 3, readyReplicas: 3, availableReplicas: 1, currentReplicas: 3, updatedReplicas: 3,
  currentRevision: s-2, updateRevision: s-2}`, want: InProgress, message: "Available: 1/3"},
		{name: "StatefulSet/available", yaml: `
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: s, namespace: ns, generation: 3}
spec: {replicas: 3, minReadySeconds: 60, updateStrategy: {type: RollingUpdate}}
status: {observedGeneration: 3, replicas: 3, readyReplicas: 3, availableReplicas: 3, currentReplicas: 3, updatedReplicas: 3,
  currentRevision: s-2, updateRevision: s-2}`, want: Ready},
		{name: "StatefulSet/OnDelete-ready-not-yet-available", yaml: `
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: s, namespace: ns, generation: 3}
spec: {replicas: 3, minReadySeconds: 10, updateStrategy: {type: OnDelete}}
status: {observedGeneration: 3, replicas: 3, readyReplicas: 3, availableReplicas: 2, currentReplicas: 3}`, want: InProgress, message: "Available: 2/3"},
		{name: "StatefulSet/OnDelete-ready-old-revision", yaml: `
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: s, namespace: ns, generation: 3}
spec: {replicas: 3, updateStrategy: {type: OnDelete}}
status: {observedGeneration: 3, replicas: 3, readyReplicas: 3, currentReplicas: 3, updatedReplicas: 0,
  currentRevision: s-1, updateRevision: s-2}`, want: Ready},
		// kstatus calls every OnDelete StatefulSet Current.
		{name: "StatefulSet/OnDelete-not-ready", yaml: `
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: s, namespace: ns, generation: 3}
spec: {replicas: 3, updateStrategy: {type: OnDelete}}
status: {observedGeneration: 3, replicas: 3, readyReplicas: 1, currentReplicas: 3,
  currentRevision: s-1, updateRevision: s-1}`, want: InProgress, message: "Ready: 1/3"},
		{name: "StatefulSet/OnDelete-generation-not-observed", yaml: `
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: s, namespace: ns, generation: 4}
spec: {replicas: 3, updateStrategy: {type: OnDelete}}
status: {observedGeneration: 3, replicas: 3, readyReplicas: 3}`, want: InProgress, message: "generation 4"},
		{name: "StatefulSet/OnDelete-no-status", yaml: `
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: s, namespace: ns, generation: 1}
spec: {replicas: 1, updateStrategy: {type: OnDelete}}`, want: InProgress},

		// DaemonSet (kstatus)
		{name: "DaemonSet/all-scheduled-and-ready", yaml: `
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: ds, namespace: ns, generation: 2}
status: {observedGeneration: 2, desiredNumberScheduled: 3, currentNumberScheduled: 3, updatedNumberScheduled: 3,
  numberAvailable: 3, numberReady: 3}`, want: Ready},
		{name: "DaemonSet/zero-matching-nodes", yaml: `
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: ds, namespace: ns, generation: 1}
status: {observedGeneration: 1, desiredNumberScheduled: 0, currentNumberScheduled: 0, numberMisscheduled: 0, numberReady: 0}`,
			want: Ready},
		{name: "DaemonSet/rolling-out", yaml: `
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: ds, namespace: ns, generation: 2}
status: {observedGeneration: 2, desiredNumberScheduled: 3, currentNumberScheduled: 3, updatedNumberScheduled: 1,
  numberAvailable: 3, numberReady: 3}`, want: InProgress, message: "Updated: 1/3"},
		{name: "DaemonSet/not-observed", yaml: `
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: ds, namespace: ns, generation: 1}`, want: InProgress},

		// ReplicaSet (kstatus)
		{name: "ReplicaSet/available", yaml: `
apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: rs, namespace: ns, generation: 1}
spec: {replicas: 2}
status: {observedGeneration: 1, replicas: 2, fullyLabeledReplicas: 2, readyReplicas: 2, availableReplicas: 2}`, want: Ready},
		{name: "ReplicaSet/not-available", yaml: `
apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: rs, namespace: ns, generation: 1}
spec: {replicas: 2}
status: {observedGeneration: 1, replicas: 2, fullyLabeledReplicas: 2, readyReplicas: 1, availableReplicas: 1}`, want: InProgress},
		{name: "ReplicaSet/replica-failure", yaml: `
apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: rs, namespace: ns, generation: 1}
spec: {replicas: 2}
status:
  observedGeneration: 1
  replicas: 0
  conditions: [{type: ReplicaFailure, status: "True", reason: FailedCreate}]`, want: InProgress},

		// Pod
		{name: "Pod/running-and-ready", yaml: `
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: ns}
status: {phase: Running, conditions: [{type: Ready, status: "True"}]}`, want: Ready},
		{name: "Pod/running-not-ready", yaml: `
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: ns}
status: {phase: Running, conditions: [{type: Ready, status: "False"}]}`, want: InProgress},
		{name: "Pod/pending", yaml: `
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: ns}
status: {phase: Pending}`, want: InProgress},
		{name: "Pod/succeeded", yaml: `
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: ns}
status: {phase: Succeeded}`, want: Ready},
		// kstatus calls a Failed pod Current.
		{name: "Pod/failed", yaml: `
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: ns}
status: {phase: Failed}`, want: Failed, terminal: true},

		// Job
		// kstatus calls a started Job Current.
		{name: "Job/started", yaml: `
apiVersion: batch/v1
kind: Job
metadata: {name: j, namespace: ns, generation: 1}
status: {active: 1, startTime: "2026-01-01T00:00:00Z"}`, want: InProgress, message: "not complete"},
		{name: "Job/complete", yaml: `
apiVersion: batch/v1
kind: Job
metadata: {name: j, namespace: ns, generation: 1}
status:
  succeeded: 1
  conditions: [{type: SuccessCriteriaMet, status: "True"}, {type: Complete, status: "True"}]`, want: Ready},
		{name: "Job/failed", yaml: `
apiVersion: batch/v1
kind: Job
metadata: {name: j, namespace: ns, generation: 1}
status:
  failed: 3
  conditions: [{type: FailureTarget, status: "True"}, {type: Failed, status: "True", reason: BackoffLimitExceeded, message: backoff}]`,
			want: Failed, terminal: true, message: "backoff"},
		{name: "Job/suspended-spec", yaml: `
apiVersion: batch/v1
kind: Job
metadata: {name: j, namespace: ns, generation: 1}
spec: {suspend: true}`, want: InProgress, message: "suspended"},
		{name: "Job/suspended-condition", yaml: `
apiVersion: batch/v1
kind: Job
metadata: {name: j, namespace: ns, generation: 2}
spec: {suspend: false}
status:
  startTime: "2026-01-01T00:00:00Z"
  conditions: [{type: Suspended, status: "True", reason: JobSuspended}]`, want: InProgress, message: "suspended"},
		{name: "Job/suspended-never-ready", yaml: `
apiVersion: batch/v1
kind: Job
metadata: {name: j, namespace: ns, generation: 2}
spec: {suspend: true}
status:
  conditions: [{type: Complete, status: "True"}]`, want: InProgress, message: "suspended"},

		// CronJob (kstatus: always Current)
		{name: "CronJob/exists", yaml: `
apiVersion: batch/v1
kind: CronJob
metadata: {name: cj, namespace: ns, generation: 1}
spec: {schedule: "*/5 * * * *", jobTemplate: {spec: {}}}`, want: Ready},

		// Service
		{name: "Service/ClusterIP", yaml: `
apiVersion: v1
kind: Service
metadata: {name: s, namespace: ns}
spec: {type: ClusterIP, clusterIP: 10.0.0.1}`, want: Ready},
		{name: "Service/ClusterIP-with-ingress-option", opts: []Option{WithLoadBalancerIngress(true)}, yaml: `
apiVersion: v1
kind: Service
metadata: {name: s, namespace: ns}
spec: {clusterIP: 10.0.0.1}`, want: Ready},
		{name: "Service/LoadBalancer-without-ingress", yaml: `
apiVersion: v1
kind: Service
metadata: {name: s, namespace: ns}
spec: {type: LoadBalancer, clusterIP: 10.0.0.1}
status: {loadBalancer: {}}`, want: Ready},
		{name: "Service/LoadBalancer-without-ingress-option-on", opts: []Option{WithLoadBalancerIngress(true)}, yaml: `
apiVersion: v1
kind: Service
metadata: {name: s, namespace: ns}
spec: {type: LoadBalancer, clusterIP: 10.0.0.1}
status: {loadBalancer: {}}`, want: InProgress, message: "ingress"},
		{name: "Service/LoadBalancer-with-ingress-option-on", opts: []Option{WithLoadBalancerIngress(true)}, yaml: `
apiVersion: v1
kind: Service
metadata: {name: s, namespace: ns}
spec: {type: LoadBalancer, clusterIP: 10.0.0.1}
status: {loadBalancer: {ingress: [{ip: 192.0.2.10}]}}`, want: Ready, message: "192.0.2.10"},
		{name: "Service/LoadBalancer-with-ingress-option-off", opts: []Option{WithLoadBalancerIngress(false)}, yaml: `
apiVersion: v1
kind: Service
metadata: {name: s, namespace: ns}
spec: {type: LoadBalancer, clusterIP: 10.0.0.1}`, want: Ready},

		// Ingress (kstatus: Current at once)
		{name: "Ingress/without-status", yaml: `
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: i, namespace: ns, generation: 1}
spec: {rules: [{host: example.com}]}`, want: Ready},

		// CustomResourceDefinition (kstatus)
		{name: "CustomResourceDefinition/established", yaml: `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com, generation: 1}
status:
  conditions:
  - {type: NamesAccepted, status: "True", reason: NoConflicts}
  - {type: Established, status: "True", reason: InitialNamesAccepted}`, want: Ready},
		{name: "CustomResourceDefinition/installing", yaml: `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com, generation: 1}
status:
  conditions:
  - {type: NamesAccepted, status: "True", reason: NoConflicts}
  - {type: Established, status: "False", reason: Installing}`, want: InProgress},
		{name: "CustomResourceDefinition/names-not-accepted", yaml: `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com, generation: 1}
status:
  conditions:
  - {type: NamesAccepted, status: "False", reason: KindConflict, message: taken}
  - {type: Established, status: "False", reason: NotAccepted}`, want: Failed},

		// APIService
		{name: "APIService/available", yaml: `
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1beta1.metrics.k8s.io}
status: {conditions: [{type: Available, status: "True", reason: Passed}]}`, want: Ready},
		// kstatus calls it Current.
		{name: "APIService/not-available", yaml: `
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1beta1.metrics.k8s.io}
status: {conditions: [{type: Available, status: "False", reason: MissingEndpoints}]}`, want: InProgress, message: "MissingEndpoints"},
		{name: "APIService/no-status", yaml: `
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1beta1.metrics.k8s.io}`, want: InProgress},

		// HorizontalPodAutoscaler (kstatus: no rule of its own)
		{name: "HorizontalPodAutoscaler/exists", yaml: `
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: h, namespace: ns, generation: 1}
status:
  currentReplicas: 1
  desiredReplicas: 1
  conditions: [{type: AbleToScale, status: "True"}, {type: ScalingActive, status: "False", reason: FailedGetResourceMetric}]`,
			want: Ready},
		{name: "HorizontalPodAutoscaler/generation-not-observed", yaml: `
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: h, namespace: ns, generation: 2}
status: {observedGeneration: 1, currentReplicas: 1, desiredReplicas: 1}`, want: InProgress},

		// PodDisruptionBudget (kstatus)
		{name: "PodDisruptionBudget/observed", yaml: `
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: pdb, namespace: ns, generation: 2}
status: {observedGeneration: 2, currentHealthy: 0, desiredHealthy: 1, disruptionsAllowed: 0, expectedPods: 1}`, want: Ready},
		{name: "PodDisruptionBudget/generation-not-observed", yaml: `
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: pdb, namespace: ns, generation: 2}
status: {observedGeneration: 1}`, want: InProgress},
		{name: "PodDisruptionBudget/no-status", yaml: `
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: pdb, namespace: ns, generation: 1}`, want: Ready},

		// Kinds without status
		{name: "ConfigMap/exists", yaml: `{apiVersion: v1, kind: ConfigMap, metadata: {name: c, namespace: ns}}`, want: Ready},
		{name: "Secret/exists", yaml: `{apiVersion: v1, kind: Secret, metadata: {name: s, namespace: ns}}`, want: Ready},
		{name: "ServiceAccount/exists", yaml: `{apiVersion: v1, kind: ServiceAccount, metadata: {name: s, namespace: ns}}`, want: Ready},

		// Custom resources
		// kstatus calls a CR without status Current.
		{name: "CustomResource/no-conditions", yaml: `{apiVersion: example.com/v1, kind: Widget, metadata: {name: w, namespace: ns, generation: 1}}`,
			want: InProgress, message: "no conditions"},
		{name: "CustomResource/no-conditions-assumed-ready", policy: wavev1.Readiness{AssumeReadyWithoutConditions: true},
			yaml: `{apiVersion: example.com/v1, kind: Widget, metadata: {name: w, namespace: ns, generation: 1}}`, want: Ready},
		{name: "CustomResource/Ready-True", yaml: `
apiVersion: example.com/v1
kind: Widget
metadata: {name: w, namespace: ns, generation: 1}
status: {conditions: [{type: Ready, status: "True"}]}`, want: Ready},
		{name: "CustomResource/Ready-False", yaml: `
apiVersion: example.com/v1
kind: Widget
metadata: {name: w, namespace: ns, generation: 1}
status: {conditions: [{type: Ready, status: "False"}, {type: Available, status: "True"}]}`, want: InProgress, message: "Ready=False"},
		{name: "CustomResource/Available-True", yaml: `
apiVersion: example.com/v1
kind: Widget
metadata: {name: w, namespace: ns, generation: 1}
status: {conditions: [{type: Available, status: "True"}]}`, want: Ready},
		// kstatus calls it Current: it knows only Ready.
		{name: "CustomResource/Available-False", yaml: `
apiVersion: example.com/v1
kind: Widget
metadata: {name: w, namespace: ns, generation: 1}
status: {conditions: [{type: Available, status: "False", reason: Scaling}]}`, want: InProgress, message: "Available=False Scaling"},
		{name: "CustomResource/status-observedGeneration-behind", yaml: `
apiVersion: example.com/v1
kind: Widget
metadata: {name: w, namespace: ns, generation: 1}
status: {observedGeneration: 0, conditions: [{type: Ready, status: "True"}]}`, want: InProgress},
		{name: "CustomResource/Ready-condition-observedGeneration-behind", yaml: `
apiVersion: example.com/v1
kind: Widget
metadata: {name: w, namespace: ns, generation: 3}
status: {conditions: [{type: Ready, status: "True", observedGeneration: 2}]}`, want: InProgress, message: "generation 2, not 3"},
		{name: "CustomResource/Ready-condition-observedGeneration-current", yaml: `
apiVersion: example.com/v1
kind: Widget
metadata: {name: w, namespace: ns, generation: 3}
status: {observedGeneration: 3, conditions: [{type: Ready, status: "True", observedGeneration: 3}]}`, want: Ready},
		{name: "CustomResource/Available-condition-observedGeneration-behind", yaml: `
apiVersion: example.com/v1
kind: Widget
metadata: {name: w, namespace: ns, generation: 3}
status: {conditions: [{type: Available, status: "True", observedGeneration: 2}]}`, want: InProgress},
		{name: "CustomResource/Reconciling", yaml: `
apiVersion: example.com/v1
kind: Widget
metadata: {name: w, namespace: ns, generation: 1}
status: {conditions: [{type: Reconciling, status: "True"}, {type: Ready, status: "True"}]}`, want: InProgress, message: "Reconciling=True"},
		{name: "CustomResource/Stalled", yaml: `
apiVersion: example.com/v1
kind: Widget
metadata: {name: w, namespace: ns, generation: 1}
status: {conditions: [{type: Stalled, status: "True"}]}`, want: Failed, message: "Stalled=True"},
		// Neither Ready nor Available: kstatus decides (Current).
		{name: "CustomResource/other-conditions-only", yaml: `
apiVersion: example.com/v1
kind: Widget
metadata: {name: w, namespace: ns, generation: 1}
status: {conditions: [{type: Synced, status: "True"}]}`, want: Ready},

		// Policy CEL rules replace the built-in rule of their kind.
		{name: "CEL/current", policy: widgetRule, yaml: `
apiVersion: example.com/v1
kind: Widget
metadata: {name: w, namespace: ns, generation: 1}
status: {phase: Running}`, want: Ready},
		{name: "CEL/failed", policy: widgetRule, yaml: `
apiVersion: example.com/v1
kind: Widget
metadata: {name: w, namespace: ns, generation: 1}
status: {phase: Error}`, want: Failed},
		{name: "CEL/missing-field-is-not-ready", policy: widgetRule,
			yaml: `{apiVersion: example.com/v1, kind: Widget, metadata: {name: w, namespace: ns, generation: 1}}`, want: InProgress},
		{name: "CEL/overrides-PersistentVolumeClaim-current", policy: pvcRule, yaml: claim("", ", storageClassName: fast"), want: Ready,
			message: "the policy's current expression is true"},
		{name: "CEL/overrides-PersistentVolumeClaim-failed", policy: pvcRule, yaml: `
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data, namespace: ns}
status: {phase: Bound}`, want: Failed},
		{name: "CEL/overrides-Deployment", yaml: `
apiVersion: apps/v1
kind: Deployment
metadata: {name: d, namespace: ns, generation: 1}
spec: {replicas: 3}
status: {observedGeneration: 1, replicas: 3, updatedReplicas: 3, readyReplicas: 1, availableReplicas: 1}`,
			policy: wavev1.Readiness{Rules: []wavev1.ReadinessRule{{APIVersion: "apps/v1", Kind: "Deployment",
				Current: "self.status.readyReplicas >= 1"}}},
			want: Ready},
		// The rule is per apiVersion: another version of the kind keeps the built-in rule.
		{name: "CEL/other-apiVersion-keeps-built-in-rule", yaml: `
apiVersion: example.com/v2
kind: Widget
metadata: {name: w, namespace: ns, generation: 1}
status: {phase: Running}`, policy: widgetRule, want: InProgress},

		// Any kind
		{name: "any/being-deleted", yaml: `
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data, namespace: ns, deletionTimestamp: "2026-01-01T00:00:00Z"}
status: {phase: Bound}`, want: InProgress, message: "being deleted"},
	}
	seen := map[string]bool{}
	for _, tc := range cases {
		if seen[tc.name] {
			t.Fatalf("two cases named %s", tc.name)
		}
		seen[tc.name] = true
		t.Run(tc.name, func(t *testing.T) {
			c, err := NewChecker(tc.policy, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			env := tc.env
			if env == nil && !tc.noEnv {
				env = noDefault
			}
			u := parse(t, tc.yaml)
			got := c.CheckIn(u, env)
			type verdict struct {
				Status   Status
				Terminal bool
			}
			if diff := cmp.Diff(verdict{tc.want, tc.terminal}, verdict{got.Status, got.Terminal}); diff != "" {
				t.Errorf("CheckIn() (-want,+got):\n%s(message %q)", diff, got.Message)
			}
			if !strings.Contains(got.Message, tc.message) {
				t.Errorf("CheckIn() message = %q, want it to contain %q", got.Message, tc.message)
			}
		})
	}
}

// Check is CheckIn without an Env.
func TestCheckIsCheckInWithoutEnv(t *testing.T) {
	c, err := NewChecker(wavev1.Readiness{})
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range []string{
		claim("", ", storageClassName: wffc"),
		`{apiVersion: v1, kind: PersistentVolumeClaim, metadata: {name: data, namespace: ns}, status: {phase: Bound}}`,
		`{apiVersion: batch/v1, kind: Job, metadata: {name: j, namespace: ns}, status: {conditions: [{type: Complete, status: "True"}]}}`,
	} {
		u := parse(t, doc)
		if diff := cmp.Diff(c.CheckIn(u, nil), c.Check(u)); diff != "" {
			t.Errorf("Check(%s) differs from CheckIn(u, nil) (-CheckIn,+Check):\n%s", u.GetKind(), diff)
		}
	}
	if got := c.Check(parse(t, claim("", ", storageClassName: wffc"))); got.Status != InProgress {
		t.Errorf("Check(pending claim) = %+v, want InProgress", got)
	}
}

func TestBadRulesAreErrorsNamingTheRule(t *testing.T) {
	_, err := NewChecker(wavev1.Readiness{Rules: []wavev1.ReadinessRule{
		{APIVersion: "example.com/v1", Kind: "Widget", Current: "self.status.phase == 'Running'"},
		{APIVersion: "example.com/v1", Kind: "Gadget", Current: "self.status.("},
	}})
	if err == nil || !strings.HasPrefix(err.Error(), "readiness.rules[1].current") {
		t.Errorf("err = %v, want one naming readiness.rules[1].current", err)
	}
}
