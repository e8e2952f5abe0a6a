# skein's build. `make` (or `make help`) lists the targets.
# Tools are run from the Go module proxy at pinned versions; nothing is installed by hand.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

CONTROLLER_GEN_VERSION ?= v0.23.0
STATICCHECK_VERSION    ?= v0.8.2
CONTROLLER_GEN := go run sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)
STATICCHECK    := go run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

API_PATHS := ./control/api/...
CRD_DIR   := deploy/crds
CHART_CRD_DIR := deploy/chart/crds
BIN_DIR   := bin

# The version the binaries, the images' tags and the chart's appVersion carry: one source, the
# VERSION file; version and commit are stamped at link time (GOFLAGS may carry -buildvcs=false).
VERSION ?= $(shell cat VERSION 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS := -X github.com/skein-net/skein/control/buildinfo.Version=$(VERSION) -X github.com/skein-net/skein/control/buildinfo.Commit=$(COMMIT)

# Test knobs: `make test GOTESTFLAGS='-run TestAPI -v'`.
GOTESTFLAGS ?=
# make soak's length.
DURATION ?= 30m

.PHONY: help
help: ## List the targets and what they do (plain text unless stdout is a terminal).
	@if [ -t 1 ]; then on=$$'\033[36m'; off=$$'\033[0m'; else on=; off=; fi; \
	awk -v on="$$on" -v off="$$off" 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_.-]+:.*## / {printf "  %s%-14s%s %s\n", on, $$1, off, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Compile every package, the commands and the lab's into ./bin.
	go build ./...
	@mkdir -p $(BIN_DIR)
	@cmds=$$(go list -f '{{if eq .Name "main"}}{{.ImportPath}}{{end}}' ./cmd/... ./bench/cmd/lab ./bench/cmd/pause 2>/dev/null || true); \
	if [ -n "$$cmds" ]; then go build -ldflags '$(LDFLAGS)' -o $(BIN_DIR)/ $$cmds; fi

.PHONY: k8s-binaries
k8s-binaries: ## Build etcd, the Kubernetes control plane, helm, the lab nodes' stack (kubelet, containerd, runc, CNI plugins, flannel) and CoreDNS from the module proxy into the cache (idempotent).
	go run ./bench/cmd/k8s-binaries

.PHONY: test
test: k8s-binaries ## Run every test, against a real kube-apiserver and etcd from the cache.
	go test -count=1 -timeout 45m $(GOTESTFLAGS) ./...

.PHONY: test-unit
test-unit: ## The fast inner loop: every test that needs neither root nor the Kubernetes cache (-short, SKEIN_SKIP_NETNS=1).
	SKEIN_SKIP_NETNS=1 go test -short -count=1 $(GOTESTFLAGS) ./...

.PHONY: test-race
test-race: k8s-binaries ## The dataplane, appliance and control packages under the race detector.
	go test -race -count=1 -timeout 30m $(GOTESTFLAGS) ./dataplane/... ./appliance/... ./control/...

.PHONY: e2e
e2e: k8s-binaries ## End-to-end suites in the lab (clusters on kubelet, containerd and flannel in network namespaces; root): install, connect, matrix, the gateway container, failover, node stack restarts, reset; then pod blocks outside the nodes' pod CIDRs with a NATed server, and flannel's masquerade without the bypass; then three clusters in a full mesh (matrix on six pairs, one pair disconnected under traffic); then two dual-stack clusters overlapping in both families (IPv6 and IPv4 matrices); then two IPv6-only clusters overlapping in their IPv6 pod CIDR (IPv6 underlay, API servers and registry; the IPv6 matrix).
	go test -count=1 -v -timeout 35m -run '^TestE2E(RealNetworks|Masquerade|Mesh|DualStack|IPv6Only)?$$' ./bench/e2e/

.PHONY: soak
soak: k8s-binaries ## Soak in the lab (root): DURATION (default 30m) of traffic with gateway failovers, agent and API server restarts; reports every gap and each process's RSS, goroutines and FDs; a failed run keeps its logs in /var/tmp/skein-soak-failed.
	SKEIN_SOAK=$(DURATION) SKEIN_FAILED_LOGS=/var/tmp/skein-soak-failed go test -count=1 -v -timeout 13h -run '^TestSoak$$' ./bench/e2e/

.PHONY: demo
demo: k8s-binaries ## The demo: lab up, skein via Helm, clusters peered with skeinctl, skeinctl test network (the matrix), skeinctl bench (5 s per figure, chart in bin/demo-skeinctl-bench.svg), summary (KEEP=1 keeps the lab).
	SKEIN_DEMO=1 go test -count=1 -v -timeout 20m -run '^TestDemo$$' ./bench/e2e/

.PHONY: bench
bench: k8s-binaries ## Benchmark ladder (veth, bare wireguard-go, kernel-NAT gateway, skein with and without NAT, the same beside a CPU hog, CPU breakdown, scale benchmarks, skeinctl network connect's time in the lab, the lab rung: skein between two lab clusters beside local pod-to-pod and bare wireguard-go there; root, ~30-35 min): report in bench/results. BENCHFLAGS=--quick: a smoke run into bench/results/quick (no lab); BENCHFLAGS=--lab-only: the lab rung alone into bench/results/lab; BENCHFLAGS="--compare OLD.json": what changed.
	go run ./bench/cmd/bench $(BENCHFLAGS)

.PHONY: generate
generate: ## Regenerate deepcopy code and the CRDs under deploy/crds from the API types, plus the MCS API's from sigs.k8s.io/mcs-api (copied into the chart).
	$(CONTROLLER_GEN) object paths=$(API_PATHS)
	@rm -rf $(CRD_DIR)
	$(CONTROLLER_GEN) crd paths=$(API_PATHS) output:crd:artifacts:config=$(CRD_DIR)
	@# The Multi-Cluster Services API (ServiceExport, ServiceImport) as sigs.k8s.io/mcs-api ships it.
	@mcs=$$(go list -m -f '{{.Dir}}' sigs.k8s.io/mcs-api) && for f in $$mcs/config/crd/multicluster.x-k8s.io_*.yaml; do install -m 0644 $$f $(CRD_DIR)/; done
	@rm -rf $(CHART_CRD_DIR) && mkdir -p $(CHART_CRD_DIR) && cp $(CRD_DIR)/*.yaml $(CHART_CRD_DIR)/

# Where make images PUSH=1 pushes (REGISTRY=host/path).
REGISTRY ?= ghcr.io/skein-net

.PHONY: chart
chart: ## Package the chart into bin/skein-<version>.tgz (version and appVersion from VERSION); PUSH=1 CHART_REGISTRY=oci://host/path pushes it with helm push.
	@if [ -n "$(PUSH)" ]; then case "$(CHART_REGISTRY)" in oci://?*) ;; *) echo "make chart PUSH=1 needs CHART_REGISTRY=oci://host[:port]/path (got '$(CHART_REGISTRY)')" >&2; exit 2;; esac; fi; \
	helm=$$(go run ./bench/cmd/k8s-binaries -helm) || exit 1; \
	"$$helm" package deploy/chart --destination $(BIN_DIR) --version $(patsubst v%,%,$(VERSION)) --app-version $(VERSION) || exit 1; \
	if [ -n "$(PUSH)" ]; then "$$helm" push $(BIN_DIR)/skein-$(patsubst v%,%,$(VERSION)).tgz "$(CHART_REGISTRY)" $(HELMPUSHFLAGS); fi

.PHONY: images
images: ## OCI images (controller, agent, gateway, probe) for linux/amd64 and linux/arm64, built without a container engine into the OCI layout bin/images; PUSH=1 REGISTRY=host/path pushes them, BASE_IMAGE=ref builds on a base.
	go run ./deploy/cmd/images --out $(BIN_DIR)/images --version $(VERSION) --revision $(COMMIT) \
		$(if $(PUSH),--push --registry='$(REGISTRY)') $(IMAGESFLAGS)

.PHONY: lint
lint: ## go vet and staticcheck.
	go vet ./...
	$(STATICCHECK) ./...

# Files that `make generate` and `go mod tidy` own: verify regenerates them in a scratch copy of
# the tree and fails when the working tree differs, so a hand edit is caught whether or not it is
# committed.
GENERATED := control/api deploy/crds $(CHART_CRD_DIR) go.mod go.sum

.PHONY: verify
verify: ## Fail if generated code, CRDs, go.mod/go.sum or formatting differ from what the tools produce.
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	git ls-files -z --cached --others --exclude-standard | \
		while IFS= read -r -d '' f; do if [ -e "$$f" ]; then cp --parents -a -- "$$f" "$$tmp/"; fi; done; \
	if ! ( cd "$$tmp" && $(MAKE) --no-print-directory -s generate >/dev/null 2>"$$tmp.log" && go mod tidy 2>>"$$tmp.log" ); then \
		cat "$$tmp.log"; rm -f "$$tmp.log"; echo "verify: 'make generate' or 'go mod tidy' failed"; exit 1; fi; \
	rm -f "$$tmp.log"; fail=0; \
	for p in $(GENERATED); do diff -ru "$$p" "$$tmp/$$p" || fail=1; done; \
	unformatted=$$(git ls-files -z --cached --others --exclude-standard -- '*.go' | xargs -0 -r gofmt -l 2>/dev/null); \
	if [ -n "$$unformatted" ]; then echo "verify: not gofmt-formatted:"; echo "$$unformatted"; fail=1; fi; \
	if [ $$fail -ne 0 ]; then \
		echo "verify: FAILED: the files above differ from what 'make generate', 'go mod tidy' and gofmt produce;"; \
		echo "verify: run 'make generate && go mod tidy && gofmt -w .' (never edit generated files by hand)"; exit 1; fi; \
	echo "verify: generated code, CRDs, go.mod/go.sum and formatting are up to date"

.PHONY: clean
clean: ## Remove ./bin (the k8s binary cache is kept; delete the SKEIN_CACHE directory to drop it).
	rm -rf $(BIN_DIR)
