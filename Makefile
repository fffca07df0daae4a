# Ferry — common tasks. `make help` lists them.
SHELL := /bin/bash
GO    ?= go
PKG   := ./...
# The OpenAPI linter, pinned (an npm package; needs Node.js and npm).
REDOCLY ?= npx --yes @redocly/cli@2.77.0
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)

.DEFAULT_GOAL := help

.PHONY: help
help: ## Show this help
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*##/ {printf "  \033[36m%-12s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: dev
dev: ## Run Ferry with a private PostgreSQL in ./.ferry (no setup needed)
	$(GO) run ./cmd/ferry dev

.PHONY: build
build: ## Build bin/ferry (static)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/ferry ./cmd/ferry

.PHONY: test
# -timeout is per package: store's takes 7-8 minutes on 2 cores (its plan
# tests build a 50,000-row backlog per case and history), too near 10.
test: ## Run every test against real PostgreSQL (started by the tests), with -race
	$(GO) test -race -count=1 -timeout 20m $(PKG)

.PHONY: bench
bench: ## Benchmark Ferry against raw SQL on one durable database; writes docs/benchmarks.md
	$(GO) run ./cmd/ferry-bench -out docs/benchmarks.md

.PHONY: lint
lint: lint-openapi ## gofmt, go vet, golangci-lint when installed, and the OpenAPI lint
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet $(PKG)
	@if command -v golangci-lint >/dev/null; then golangci-lint run; else echo "golangci-lint not installed; skipped"; fi

.PHONY: lint-openapi
lint-openapi: ## Lint openapi/openapi.yaml with Redocly's recommended rules and example validation (redocly.yaml)
	REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true $(REDOCLY) lint --config redocly.yaml openapi/openapi.yaml

.PHONY: migrate
migrate: ## Apply migrations to FERRY_DATABASE_URL
	$(GO) run ./cmd/ferry migrate up

FUZZTIME ?= 30s
.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME each (default 30s; CI uses a few seconds)
	@set -e; for f in $$(git ls-files '*_test.go'); do \
	  for t in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$f); do \
	    echo "--- $$t ($$(dirname $$f), $(FUZZTIME))"; \
	    $(GO) test -run '^$$' -fuzz "^$$t\$$" -fuzztime $(FUZZTIME) ./$$(dirname $$f); \
	  done; \
	done
