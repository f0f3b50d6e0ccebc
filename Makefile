# edge: a WebSocket JSON-RPC 2.0 data-plane gateway.
GO      ?= go
FUZZTIME ?= 30s
PKGS    := ./...

.PHONY: run test race unit lint fuzz bench build

## run: run the gateway on the embedded memory backend (127.0.0.1:8080)
run:
	$(GO) run ./cmd/edge $(ARGS)

## build: build bin/edge
build:
	$(GO) build -o bin/edge ./cmd/edge

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

## fuzz: run every fuzz target for FUZZTIME each
fuzz:
	@for t in $$($(GO) test -list 'Fuzz.*' ./codec | grep ^Fuzz); do \
		echo "== $$t"; $(GO) test ./codec -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) || exit 1; \
	done

## bench: micro benchmarks (allocations reported)
bench:
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)
