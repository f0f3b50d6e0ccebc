# edge: a WebSocket JSON-RPC 2.0 data-plane gateway.
GO      ?= go
FUZZTIME ?= 30s
PKGS    := ./...

.PHONY: run cluster test race unit lint fuzz bench bench-micro build install bench-suite bench-quick bench-test dashboard-png

# ADMIN is the admin listener of `make run` (/healthz, /readyz); ADMIN= turns it off.
ADMIN   ?= 127.0.0.1:9090

## run: run the gateway on the embedded memory backend (127.0.0.1:8080), admin on http://$(ADMIN)/
run:
	$(GO) run ./cmd/edge --admin-listen=$(ADMIN) $(ARGS)

## build: build bin/edge (stamped with the commit: edge version)
build:
	$(GO) build -buildvcs=auto -o bin/edge ./cmd/edge

## install: go install edge into $(go env GOBIN), or GOPATH/bin (static, stamped)
install:
	CGO_ENABLED=0 $(GO) install -buildvcs=auto -trimpath ./cmd/edge

## cluster: a local cluster on loopback: NATS (bin/natsd), 2 edges (ws://127.0.0.1:8081/, :8082/; dashboards :9091, :9092), 2 workers; Ctrl-C stops it. CLUSTERARGS adds flags (internal/cmd/cluster)
cluster: build
	$(GO) build -o bin/natsd ./internal/cmd/natsd
	$(GO) build -o bin/cluster ./internal/cmd/cluster
	bin/cluster --bin bin $(CLUSTERARGS)

## test: every test: lint, then the whole suite under the race detector
test: lint race

## race: go test -race over every package
race:
	$(GO) test -race -count=1 -timeout 20m $(PKGS)

## unit: the suite without the race detector (faster)
unit:
	$(GO) test -count=1 $(PKGS)

## lint: gofmt and go vet must be clean
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	@# The raw peer builds edge's own code (a replace): its go.mod must follow
	@# edge's, or the bench suite fails to build it.
	@cd bench/peers/raw && $(GO) mod tidy -diff >/dev/null || { echo "bench/peers/raw/go.mod is stale: run go mod tidy there"; exit 1; }

## dashboard-png: rewrite docs/dashboard.png, the dashboard with 20 s of a fake load (needs chromium; ~30 s)
dashboard-png:
	$(GO) test -count=1 -run '^TestDocsScreenshot$$' ./dashboard -docs-png "$(CURDIR)/docs/dashboard.png"

## fuzz: run every fuzz target for FUZZTIME each
fuzz:
	@for p in ./codec ./upstream; do \
		for t in $$($(GO) test -list 'Fuzz.*' $$p | grep ^Fuzz); do \
			echo "== $$p $$t"; $(GO) test $$p -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) || exit 1; \
		done; \
	done

## bench-micro: micro benchmarks (allocations reported), the gateway's and the load generator's
bench-micro:
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)
	cd bench && $(GO) test -run '^$$' -bench . -benchmem ./load

# The end-to-end suite lives in bench/ (its own module, with the peer servers
# in bench/peers/<name>/, each its own module); see bench/README.md.
PEERS := $(sort $(dir $(wildcard bench/peers/*/go.mod)))

# BASE: a checkout of edge (e.g. main's worktree) that bench and bench-suite
# also run, as the server edge-base beside edge (-base-src): before and after
# in one run.
BASE ?=

## bench: the standard end-to-end matrix, edge against every peer (under 15 minutes), into bench/results/<time>/ (report.md, SVG charts); BASE=DIR adds edge built from DIR; BENCHARGS adds flags
bench: bench-suite

## bench-suite: the same as bench
bench-suite:
	cd bench && $(GO) run ./cmd/edgebench -go $(GO) $(if $(BASE),-base-src $(abspath $(BASE))) $(BENCHARGS)

## bench-test: go test in bench/ and in every peer module
bench-test:
	cd bench && $(GO) vet ./... && $(GO) test -count=1 ./...
	@for p in $(PEERS); do echo "== go test $$p"; (cd $$p && $(GO) test -count=1 ./...) || exit 1; done

## bench-quick: bench-test, then every workload briefly against every peer (CI smoke run, under 5 minutes)
bench-quick: bench-test
	cd bench && $(GO) run ./cmd/edgebench -go $(GO) -quick $(BENCHARGS)
