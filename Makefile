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
BIN_DIR   := bin

# Test knobs: `make test GOTESTFLAGS='-run TestAPI -v'`.
GOTESTFLAGS ?=

.PHONY: help
help: ## List the targets and what they do.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_.-]+:.*## / {printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Compile every package (and the pinned wireguard-go/gVisor) and the commands into ./bin.
	go build ./...
	go build -tags pin ./...
	@mkdir -p $(BIN_DIR)
	@cmds=$$(go list -f '{{if eq .Name "main"}}{{.ImportPath}}{{end}}' ./cmd/... 2>/dev/null || true); \
	if [ -n "$$cmds" ]; then go build -o $(BIN_DIR)/ $$cmds; fi

.PHONY: k8s-binaries
k8s-binaries: ## Build etcd and the Kubernetes control plane from the module proxy into the cache (idempotent).
	go run ./bench/cmd/k8s-binaries

.PHONY: test
test: k8s-binaries ## Run every test, against a real kube-apiserver and etcd from the cache.
	go test -count=1 $(GOTESTFLAGS) ./...

.PHONY: generate
generate: ## Regenerate deepcopy code and the CRDs under deploy/crds from the API types.
	$(CONTROLLER_GEN) object paths=$(API_PATHS)
	@rm -rf $(CRD_DIR)
	$(CONTROLLER_GEN) crd paths=$(API_PATHS) output:crd:artifacts:config=$(CRD_DIR)

.PHONY: lint
lint: ## go vet and staticcheck.
	go vet ./...
	go vet -tags pin ./...
	$(STATICCHECK) ./...

.PHONY: verify
verify: generate ## Regenerate, tidy and format, then fail if anything differs from the commit.
	go mod tidy
	gofmt -w $$(git ls-files '*.go')
	@if [ -n "$$(git status --porcelain -- . )" ]; then \
		echo "verify: the tree differs after 'make generate', 'go mod tidy' and gofmt:"; \
		git status --porcelain -- .; git --no-pager diff --stat; \
		echo "run 'make generate && go mod tidy && gofmt -w .' and commit the result"; exit 1; \
	fi
	@echo "verify: generated files, go.mod and formatting are up to date"

.PHONY: clean
clean: ## Remove ./bin (the k8s binary cache is kept; delete $$SKEIN_CACHE to drop it).
	rm -rf $(BIN_DIR)
