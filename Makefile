# cellbox: `make` or `make help` lists the targets. `make test` is the test command (CI runs
# it through .ci/run); it installs what the tests need first, so run it as root.

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

# Go: from PATH, else where the machines keep it. Its folder goes first in PATH, because
# tests run `go build` themselves.
GO := $(or $(shell command -v go 2>/dev/null),$(wildcard /usr/local/go/bin/go))
ifeq ($(GO),)
$(error go not found in PATH nor in /usr/local/go/bin: install Go, see go.mod for the version)
endif
GOBIN_DIR := $(patsubst %/,%,$(dir $(GO)))
export PATH := $(GOBIN_DIR):$(PATH)
GOFMT := $(GOBIN_DIR)/gofmt

FUZZTIME ?= 20s

# The official MCP TypeScript SDK, for the MCP client tests (npm ci, again when the lock changes).
TSCLIENT := internal/mcpserver/testdata/tsclient
# E2B's official JS SDKs, for the E2B-compatible API's tests.
E2BCLIENT := internal/e2b/testdata/e2bclient
# OpenAI's official JS SDK, for the Containers and Files APIs' tests.
OPENAICLIENT := internal/openai/testdata/openaiclient
# playwright-core, which drives Debian's chromium in the web page's tests.
BROWSER := internal/web/testdata/browser
# Azurite, Microsoft's Azure Storage emulator, for the artifacts store's tests.
AZURITE := internal/artifacts/testdata/azurite

.PHONY: help build build-linux deps run test test-built test-suites node-image fuzz bench bench-docker bench-e2b bench-web screenshots lint clean

help: ## list the targets
	@echo "usage: make <target>"
	@awk 'BEGIN {FS = ":.*## "} /^[a-z0-9-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## build the static binary ./bin/cellbox (with its sandboxes' guest attached)
	GO=$(GO) scripts/build.sh bin/cellbox

build-linux: ## the Linux binaries a server on macOS runs inside Docker's containers (--guest-binary)
	for arch in arm64 amd64; do GOOS=linux GOARCH=$$arch GO=$(GO) scripts/build.sh bin/cellbox-linux-$$arch; done

deps: ## install what cellbox needs to run (Debian/Ubuntu; root or sudo)
	GO=$(GO) scripts/install-deps.sh

run: deps build ## run the server on 127.0.0.1:8080 with the runc backend, state in ./.state
	./bin/cellbox serve --addr 127.0.0.1:8080 --backend runc --state-dir ./.state

# Where `make test` builds the default image (as `cellbox image build` does for a root
# server): kept between runs, so a machine builds it once per package list.
TEST_STATE ?= /var/lib/cellbox

# Each step of make test is a stage (scripts/stage.sh): it says how long it took, and .ci/run
# prints a table of them at its end.
STAGE := scripts/stage.sh

test: ## install test needs, build the default image and a Kubernetes control plane, start dockerd, run every test with the race detector (as root)
	$(STAGE) deps env GO=$(GO) scripts/install-deps.sh --test
	$(STAGE) npm $(MAKE) --no-print-directory $(TSCLIENT)/node_modules/.package-lock.json $(E2BCLIENT)/node_modules/.package-lock.json $(OPENAICLIENT)/node_modules/.package-lock.json $(BROWSER)/node_modules/.package-lock.json $(AZURITE)/node_modules/.package-lock.json
	$(STAGE) build $(MAKE) --no-print-directory build
	scripts/with-dockerd.sh $(MAKE) --no-print-directory test-built

# make test once ./bin/cellbox is built, with a Docker engine answering. The images' builds
# (downloads and dpkg, kept between runs: the default image, then the Kubernetes node's)
# run beside lint and the control plane's build (compiles, kept too): on a new machine that
# overlap is minutes, on a warm one all three find their work done.
test-built:
	{ $(STAGE) image ./bin/cellbox image build --state-dir $(TEST_STATE) >/dev/null && \
		$(STAGE) node-image env STATE=$(TEST_STATE) BINARY=$(CURDIR)/bin/cellbox scripts/node-image.sh $(TEST_NODE_IMAGE) >/dev/null; } & images=$$!; \
	ok=1; $(STAGE) lint $(MAKE) --no-print-directory lint || ok=0; \
	tools=$$($(STAGE) kube-tools scripts/kube-tools.sh) || ok=0; \
	s3tools=$$($(STAGE) s3-tools scripts/s3-tools.sh) || ok=0; \
	wait $$images || ok=0; \
	((ok)) && CELLBOX_KUBE_TOOLS=$$tools CELLBOX_S3_TOOLS=$$s3tools CELLBOX_TEST_IMAGES=$(TEST_STATE)/images CELLBOX_TEST_NODE_IMAGE=$(TEST_NODE_IMAGE) \
		$(MAKE) --no-print-directory test-suites

# The image TestNodeImage runs: the node image as make test builds it (once per package list
# and binary).
TEST_NODE_IMAGE := cellbox/node:test

# The suites, with the default image built and a Docker engine answering (make test). The
# tests run ./bin/cellbox (make build), linked once, instead of each package building its own.
#
# Every package runs once, on runc on the host's root. What a backend changes is the
# conformance suite's (internal/sandbox/sandboxtest), which ./... runs on runc, crun, runsc,
# runc and runsc on the default image, docker and local-unsafe; the REST, E2B and MCP suites
# don't run again per backend (docs/ARCHITECTURE.md, Testing), but for the REST contract,
# again on gVisor (REST_CONTRACT, below), where limits take another path. Two targeted runs remain for
# what the setup changes above the backend: a template that is no image's through the E2B
# API (refused on the host's root, not found on images), and cellbox serve and cellbox mcp
# wired to runc on images and to docker by their flags (TestMCPTypeScriptClient).
test-suites: export CELLBOX_TEST_BINARY := $(CURDIR)/bin/cellbox
# -trimpath: without it the build cache keys a package by the folder it is in, and a clean
# clone at another path (a CI checkout) compiled every test and vet anew (~2 min of lint and
# more of go test here); with it, a machine's cache serves any clone of the same code.
test-suites lint fuzz: export GOFLAGS := -trimpath
test-suites:
	$(STAGE) 'go test ./...' env CGO_ENABLED=1 $(GO) test -race -count=1 -timeout 25m $(SLOWEST) ./...
	for setup in runc-image docker; do \
		CELLBOX_TEST_SETUP=$$setup $(STAGE) "go test on $$setup: MCP clients, E2B templates" env CGO_ENABLED=1 \
			$(GO) test -race -count=1 -timeout 10m -run '^(TestMCPTypeScriptClient|TestControlPlaneErrors)$$' ./cmd/cellbox/ ./internal/e2b/ || exit 1; \
	done
	CELLBOX_TEST_RUNTIME=runsc $(STAGE) 'go test on runsc: the REST contract' env CGO_ENABLED=1 \
		$(GO) test -race -count=1 -timeout 10m -run "^($(REST_CONTRACT))$$" ./internal/httpapi/

# The packages whose tests take longest (about 5 and 4 minutes here, each mostly one test
# after another), named first: go test starts packages in the order it is given them, and
# with ./... alone these came late, the last minutes of the run one package on its own.
SLOWEST = ./internal/sandbox/runc/ ./cmd/cellbox/

# The REST contract: the tests of internal/httpapi's e2e_test.go and limits_test.go, which
# make test runs again on gVisor (the suite runs on runc; the conformance suite on both).
REST_CONTRACT = $(shell sed -n 's/^func \(Test[A-Za-z0-9_]*\)(t \*testing.T).*/\1/p' internal/httpapi/e2e_test.go internal/httpapi/limits_test.go | paste -sd'|')

# The reference node-image builds (make node-image NODE_IMAGE=REGISTRY/cellbox:TAG).
NODE_IMAGE ?= cellbox/node:latest

node-image: ## the container image a Kubernetes node runs in, from Debian's packages, into the local Docker engine as NODE_IMAGE (as root)
	scripts/with-dockerd.sh env STATE=$(TEST_STATE) scripts/node-image.sh $(NODE_IMAGE)

fuzz: ## run every Fuzz target for FUZZTIME (default 20s) each
	@{ git grep -l --untracked '^func Fuzz' -- '*_test.go' || true; } | while read -r f; do \
		pkg=./$$(dirname "$$f"); \
		for fn in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$$f"); do \
			echo "fuzz: $$pkg $$fn ($(FUZZTIME))"; \
			$(GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) "$$pkg"; \
		done; \
	done

bench: build ## run the benchmarks (cellbox bench)
	./bin/cellbox bench --state-dir ./.state/bench

# Where bench-docker's images are built (the default one, and bench: it and nbconvert):
# the state dir of make test and of a root server, so the default image is built once.
BENCH_IMAGES_STATE ?= $(TEST_STATE)
# The docker command the Docker flows run.
DOCKER ?= docker

bench-docker: build ## every cellbox setup (runc, images, docker, gVisor) against docker run, docker exec, nbconvert (as root)
	GO=$(GO) scripts/install-deps.sh --test
	./bin/cellbox image build --state-dir $(BENCH_IMAGES_STATE) >/dev/null
	./bin/cellbox image build bench --file scripts/bench.list --state-dir $(BENCH_IMAGES_STATE) >/dev/null
	scripts/with-dockerd.sh ./bin/cellbox bench --state-dir ./.state/bench-docker --images-dir $(BENCH_IMAGES_STATE)/images \
		--setups runc,runc-image,docker,runsc,runsc-image,docker-runsc --flows docker-run,docker-exec,nbconvert \
		--docker-cli $(DOCKER) --cells 500 --plots 50 --starts 10 --idle 20 --flow-runs 20

bench-e2b: build ## E2B's JS SDK against cellbox: create → first runCode result, runCode round trip
	scripts/bench-e2b.sh

bench-web: build ## the web page in chromium: first load (requests, bytes), time until the chat takes a message
	scripts/bench-web.sh

screenshots: ## the web page's screenshots in docs/screenshots (chat and notebook, 1440 and 390 px; as root)
	GO=$(GO) scripts/install-deps.sh --test
	$(MAKE) --no-print-directory $(BROWSER)/node_modules/.package-lock.json
	mkdir -p docs/screenshots
	CELLBOX_SCREENSHOTS=$(CURDIR)/docs/screenshots CGO_ENABLED=1 $(GO) test -count=1 -run '^TestBrowser$$' ./internal/web/

$(TSCLIENT)/node_modules/.package-lock.json: $(TSCLIENT)/package-lock.json
	npm ci --prefix $(TSCLIENT) --no-audit --no-fund --prefer-offline --loglevel=error

$(E2BCLIENT)/node_modules/.package-lock.json: $(E2BCLIENT)/package-lock.json
	npm ci --prefix $(E2BCLIENT) --no-audit --no-fund --prefer-offline --loglevel=error

$(OPENAICLIENT)/node_modules/.package-lock.json: $(OPENAICLIENT)/package-lock.json
	npm ci --prefix $(OPENAICLIENT) --no-audit --no-fund --prefer-offline --loglevel=error

$(BROWSER)/node_modules/.package-lock.json: $(BROWSER)/package-lock.json
	npm ci --prefix $(BROWSER) --no-audit --no-fund --prefer-offline --loglevel=error

$(AZURITE)/node_modules/.package-lock.json: $(AZURITE)/package-lock.json
	npm ci --prefix $(AZURITE) --no-audit --no-fund --prefer-offline --loglevel=error

# staticcheck, pinned, built once from the Go module proxy into bin/tools (the version is in
# the file's name, so a new one is built when it changes). v0.8.x reads Go 1.26's code.
STATICCHECK_VERSION := v0.8.2
STATICCHECK := bin/tools/staticcheck-$(STATICCHECK_VERSION)

$(STATICCHECK):
	mkdir -p $(@D)
	GOBIN=$(CURDIR)/$(@D)/build $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	mv $(@D)/build/staticcheck $@ && rmdir $(@D)/build

lint: $(STATICCHECK) ## go vet, staticcheck (Linux and macOS), gofmt (fails listing the files it would change), and the macOS build (amd64: arm64 differs in no file of ours, and a second architecture compiled everything again, minutes from nothing)
	$(GO) vet ./...
	GOOS=darwin $(GO) vet ./...
	$(STATICCHECK) ./...
	GOOS=darwin $(STATICCHECK) ./...
	GOOS=darwin GOARCH=amd64 CGO_ENABLED=0 $(GO) build -o /dev/null ./cmd/cellbox
	@files=$$(git ls-files -co --exclude-standard -- '*.go' ':!:**/testdata/**'); \
	bad=$$([[ -z $$files ]] || $(GOFMT) -l $$files); \
	if [[ -n $$bad ]]; then echo "gofmt: these files need gofmt -w:"; echo "$$bad"; exit 1; fi

clean: ## remove build output (not ./.state, which holds workspaces)
	rm -rf bin
