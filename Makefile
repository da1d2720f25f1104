# wavegate: `make help` lists the targets.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec
export GOTOOLCHAIN := local

# Tools and the Kubernetes binaries are built once per version into a user cache directory.
CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/wavegate
CONTROLLER_TOOLS_VERSION ?= v0.23.0
KUSTOMIZE_VERSION ?= v5.8.1
KUBE_VERSION := $(shell test/tools/version.sh kube k8s.io/kubernetes)
ETCD_VERSION := $(shell test/tools/version.sh etcd go.etcd.io/etcd/server/v3)
ifeq ($(KUBE_VERSION)$(ETCD_VERSION),)
$(error cannot read the pinned Kubernetes and etcd versions from test/tools)
endif
CONTROLLER_GEN ?= $(CACHE)/tools/controller-gen-$(CONTROLLER_TOOLS_VERSION)/controller-gen
KUBE_BIN ?= $(CACHE)/k8s-$(KUBE_VERSION)_etcd-$(ETCD_VERSION)
# Test binaries run one at a time (-exec flock): every integration package starts its own
# kube-apiserver and etcd, and on 2 cores timing-sensitive tests must not compete with another
# package's. They are linked two at a time (-p 2), so that the next package's link (up to 17 s)
# overlaps the current package's run instead of adding to it.
GO_TEST_FLAGS ?= -timeout 20m -count=1 -p 2 -exec "flock $(CACHE)/test.lock"
# Engines the local cluster runs beside wavegate, built once into the cache when asked for: any of
# "argocd flux certmanager" (certmanager: the webhook serves the certificate cert-manager issues, as
# config/default does). `make dev-up` runs none unless told; `make test-e2e` proves wavegate with them all.
ENGINES ?=

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate the CRD, RBAC and webhook manifests under config/ from markers.
	$(CONTROLLER_GEN) rbac:roleName=manager-role crd webhook paths="./pkg/..." \
		output:crd:artifacts:config=config/crd/bases \
		output:rbac:artifacts:config=config/rbac \
		output:webhook:artifacts:config=config/webhook
	$(CONTROLLER_GEN) rbac:roleName=certs-role paths="./certs/..." output:rbac:artifacts:config=config/self-managed/rbac

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate the API's DeepCopy methods.
	$(CONTROLLER_GEN) object paths="./pkg/api/..."

.PHONY: fmt
fmt: ## Run gofmt.
	gofmt -l -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## Run go vet.
	go vet ./...

.PHONY: verify
verify: manifests generate ## Regenerate everything and fail if it differs from what is committed.
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed: $$(gofmt -l $$(git ls-files '*.go'))"; exit 1; }
	@git diff --exit-code -- config pkg || { echo "generated files are stale: run 'make manifests generate' and commit"; exit 1; }
	@test -z "$$(git status --porcelain -- config pkg)" || { echo "untracked generated files:"; git status --porcelain -- config pkg; exit 1; }

.PHONY: test
test: vet envtest-assets ## Run unit and integration tests against a real kube-apiserver and etcd.
	KUBEBUILDER_ASSETS="$(KUBE_BIN)" go test $(GO_TEST_FLAGS) ./...

.PHONY: bench
bench: ## Run the in-process benchmarks (record the figures in docs/benchmarks.md).
	go test -run '^$$' -bench . -benchmem -count 10 ./pkg/... | tee bench.txt

.PHONY: bench-webhook
bench-webhook: ## Load the webhook server over TLS on loopback: 200/s sustained, 1,000/s burst.
	go test ./test/load/ -run '^$$' -bench TLSLoad -benchtime 1x -count 3

.PHONY: bench-scale
bench-scale: envtest-assets ## Manager heap and API requests with 10k labeled workloads and 50k pods in a real API server (~3 min).
	WAVEGATE_TEST_LOG_LEVEL=-5 KUBEBUILDER_ASSETS="$(KUBE_BIN)" go test ./test/integration/scale/ -run '^$$' -bench . -benchtime 1x -timeout 15m

.PHONY: bench-ordering
bench-ordering: envtest-assets ## Release latency and waiter detection through a real API server.
	WAVEGATE_TEST_LOG_LEVEL=-5 KUBEBUILDER_ASSETS="$(KUBE_BIN)" go test ./test/integration/ordering/ -run '^$$' -bench . -benchtime 10x -count 3

.PHONY: bench-release
bench-release: cluster-assets build ## Release latency per group boundary on the local cluster, with vs without wavegate (~5 min).
	KUBE_BIN="$(KUBE_BIN)" test/tools/dev/bench.sh

.PHONY: bench-engines
bench-engines: ENGINES = argocd flux
bench-engines: cluster-assets build ## examples/shop by Argo CD (sync waves, with and without hook wait Jobs) and Flux (dependsOn chain) vs. each with wavegate, on the local cluster (~5 min).
	KUBE_BIN="$(KUBE_BIN)" ENGINES="$(ENGINES)" BENCH=Engines test/tools/dev/bench.sh

##@ Local cluster

.PHONY: dev-up
dev-up: cluster-assets build ## Start a local cluster (kwok) with wavegate; kubeconfig in .dev/kubeconfig. ENGINES="argocd flux certmanager" adds them.
	KUBE_BIN="$(KUBE_BIN)" ENGINES="$(ENGINES)" test/tools/dev/dev.sh up

.PHONY: dev-down
dev-down: ## Stop everything dev-up started and remove its state.
	KUBE_BIN="$(KUBE_BIN)" test/tools/dev/dev.sh down

.PHONY: demo
demo: cluster-assets build ## Show wavegate on a local cluster: ordered install and ordered teardown, then clean up.
	KUBE_BIN="$(KUBE_BIN)" test/tools/dev/demo.sh

.PHONY: test-e2e
test-e2e: ENGINES = argocd flux certmanager
test-e2e: cluster-assets build ## End-to-end tests against `make dev-up`'s cluster with every engine (started and stopped around the run).
	KUBE_BIN="$(KUBE_BIN)" ENGINES="$(ENGINES)" test/tools/dev/e2e.sh

##@ Build

.PHONY: build-installer
build-installer: envtest-assets ## Render config/default (cert-manager) into dist/install.yaml, and config/self-managed into dist/install-self-managed.yaml.
	@mkdir -p dist
	"$(KUBE_BIN)/kubectl" kustomize config/default > dist/install.yaml
	"$(KUBE_BIN)/kubectl" kustomize config/self-managed > dist/install-self-managed.yaml
	"$(KUBE_BIN)/kubectl" kustomize config/policy > dist/wavepolicy.yaml
	@echo "wrote dist/install.yaml, dist/install-self-managed.yaml and dist/wavepolicy.yaml"

IMG ?= wavegate:latest
.PHONY: docker-build
docker-build: ## Build the image (needs a Docker engine).
	docker build -t $(IMG) .

.PHONY: build
build: ## Build the wavegate binary into bin/.
	CGO_ENABLED=0 go build -trimpath -o bin/wavegate ./cmd/wavegate
	CGO_ENABLED=0 go build -trimpath -o bin/podrunner ./test/tools/podrunner
	CGO_ENABLED=0 go build -trimpath -o bin/widget-operator ./test/tools/widget-operator
	CGO_ENABLED=0 go build -trimpath -o bin/timeline ./test/tools/timeline
	CGO_ENABLED=0 go build -trimpath -o bin/artifact ./test/tools/artifact

##@ Dependencies

.PHONY: envtest-assets
envtest-assets: ## Build etcd, kube-apiserver and kubectl from pinned Go modules into the cache (once).
	@test/tools/control-plane.sh "$(KUBE_BIN)" etcd kube-apiserver kubectl

.PHONY: cluster-assets
cluster-assets: ## Build the whole local control plane, kwok, the Helm CLI and $(ENGINES) from pinned Go modules into the cache (once).
	@test/tools/control-plane.sh "$(KUBE_BIN)" etcd kube-apiserver kubectl kube-controller-manager kube-scheduler kwok kwokctl helm $(ENGINES)

$(CONTROLLER_GEN):
	GOBIN=$(dir $@) go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS_VERSION)
