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
# playwright-core, which drives Debian's chromium in the web page's tests.
BROWSER := internal/web/testdata/browser

.PHONY: help build deps run test fuzz bench bench-e2b bench-web screenshots lint clean

help: ## list the targets
	@echo "usage: make <target>"
	@awk 'BEGIN {FS = ":.*## "} /^[a-z0-9-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## build the static binary ./bin/cellbox
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/cellbox ./cmd/cellbox

deps: ## install what cellbox needs to run (Debian/Ubuntu; root or sudo)
	scripts/install-deps.sh

run: deps build ## run the server on 127.0.0.1:8080 with the runc backend, state in ./.state
	./bin/cellbox serve --addr 127.0.0.1:8080 --backend runc --state-dir ./.state

test: ## install test needs, lint, run every test with the race detector, the REST tests on gVisor too (as root)
	scripts/install-deps.sh --test
	$(MAKE) --no-print-directory $(TSCLIENT)/node_modules/.package-lock.json $(E2BCLIENT)/node_modules/.package-lock.json $(BROWSER)/node_modules/.package-lock.json lint
	CGO_ENABLED=1 $(GO) test -race -count=1 -timeout 25m ./...
	@echo "== the REST tests again on gVisor (--runtime runsc)"
	CELLBOX_TEST_RUNTIME=runsc CGO_ENABLED=1 $(GO) test -race -count=1 -timeout 15m ./internal/httpapi/

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

bench-e2b: build ## E2B's JS SDK against cellbox: create → first runCode result, runCode round trip
	scripts/bench-e2b.sh

bench-web: build ## the web page in chromium: first load (requests, bytes), time until the chat takes a message
	scripts/bench-web.sh

screenshots: ## the web page's screenshots in docs/screenshots (chat and notebook, 1440 and 390 px; as root)
	scripts/install-deps.sh --test
	$(MAKE) --no-print-directory $(BROWSER)/node_modules/.package-lock.json
	mkdir -p docs/screenshots
	CELLBOX_SCREENSHOTS=$(CURDIR)/docs/screenshots CGO_ENABLED=1 $(GO) test -count=1 -run '^TestBrowser$$' ./internal/web/

$(TSCLIENT)/node_modules/.package-lock.json: $(TSCLIENT)/package-lock.json
	npm ci --prefix $(TSCLIENT) --no-audit --no-fund --prefer-offline --loglevel=error

$(E2BCLIENT)/node_modules/.package-lock.json: $(E2BCLIENT)/package-lock.json
	npm ci --prefix $(E2BCLIENT) --no-audit --no-fund --prefer-offline --loglevel=error

$(BROWSER)/node_modules/.package-lock.json: $(BROWSER)/package-lock.json
	npm ci --prefix $(BROWSER) --no-audit --no-fund --prefer-offline --loglevel=error

lint: ## go vet, and gofmt (fails listing the files it would change)
	$(GO) vet ./...
	@files=$$(git ls-files -co --exclude-standard -- '*.go' ':!:**/testdata/**'); \
	bad=$$([[ -z $$files ]] || $(GOFMT) -l $$files); \
	if [[ -n $$bad ]]; then echo "gofmt: these files need gofmt -w:"; echo "$$bad"; exit 1; fi

clean: ## remove build output (not ./.state, which holds workspaces)
	rm -rf bin
