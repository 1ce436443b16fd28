# stickyd — see README.md. The two commands: `make run` and `make test`.
GO      ?= go
BIN     ?= bin
VERSION ?= 0.1.0-dev
LDFLAGS := -X github.com/stickyd/stickyd/internal/command.Version=$(VERSION)
ADDR    ?= 127.0.0.1:8080
# ADMIN_ADDR, when set, is where make run's admin API listens (default: a
# free port beside the front, printed at start).
ADMIN_ADDR ?=
# The Go SDK is a module of its own (docs/sdk.md): `go test ./...` at the
# top does not reach it, so every target that runs over all packages runs
# in it too.
SDK     := plugins/worker
# APPS are example apps kept in modules of their own (as an app author's
# would be): their tests run in their modules too.
APPS    := plugins/examples/taskboard

.PHONY: all build run run-subprocess screenshots doctor deps test test-deploy lint unit bench bench-gateway-deps bench-peers bench-peers-deps bench-profiles proto tools fuzz clean

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/stickyd ./cmd/stickyd
	$(GO) build -o $(BIN)/demo-worker ./plugins/examples/demo/cmd/demo-worker
	$(GO) build -o $(BIN)/counter-worker ./plugins/examples/counter/cmd/counter-worker

## run: stickyd dev with the demo app on http://$(ADDR) (in-process workers;
## ADMIN_ADDR=HOST:PORT chooses the admin API's address).
run: build
	./$(BIN)/stickyd dev -addr $(ADDR) $(if $(ADMIN_ADDR),-admin-addr $(ADMIN_ADDR))

## run-subprocess: the same with the demo as go-plugin subprocess workers.
run-subprocess: build
	./$(BIN)/stickyd dev -addr $(ADDR) $(if $(ADMIN_ADDR),-admin-addr $(ADMIN_ADDR)) -plugin ./$(BIN)/demo-worker

## screenshots: the demo and the monitor as `make run` serves them, at
## 1280, 1400, 1440 and 1920 px, in headless Chromium, checked (nothing
## cut, no page wider than its window) and written to docs/screenshots.
screenshots:
	STICKYD_SCREENSHOTS=$(CURDIR)/docs/screenshots $(GO) test -count=1 -timeout 10m -run '^TestScreenshotsForDocs$$' -v ./test/browser/

## doctor: what this machine lacks for make run and make test, one plain
## line each: Go as new as go.mod's, a free port for make run (ADDR),
## Chromium, python3 with grpc, protobuf and cryptography, and (a note)
## node with the gateway's npm clients. It installs
## nothing (make deps does) and exits 1 when something required is missing.
doctor:
	@command -v $(GO) >/dev/null || { echo "MISSING  go: install Go $$(sed -n 's/^go //p' go.mod) or newer"; exit 1; }
	@if [ -d test/e2e/testdata/npmclients/node_modules ] && command -v node >/dev/null; then echo "ok       node $$(node --version) with the npm clients of the gateway's e2e test"; \
	else echo "note     node or the gateway's npm clients are missing: make deps installs them (test/e2e/gateway_clients_test.go skips without)"; fi
	@$(GO) run ./test/doctor -addr $(ADDR)

## deps: what the tests need beyond Go (Debian): Chromium for test/browser,
## grpcio, protobuf and cryptography (AutoMTLS) for /usr/bin/python3
## (the Python worker's tests), Django, Flask and Flask-Login (the
## adapters for existing sites and their end-to-end test, test/e2e/sites_test.go)
## and venv (a site's group on its own virtualenv, in that test); node and
## the official openai and @anthropic-ai/sdk clients, pinned by
## test/e2e/testdata/npmclients/package-lock.json (the gateway's end-to-end
## test, test/e2e/gateway_clients_test.go).
deps:
	@command -v chromium >/dev/null || { \
		sudo=; [ "$$(id -u)" = 0 ] || sudo=sudo; \
		$$sudo apt-get update && $$sudo apt-get install -y chromium; }
	@/usr/bin/python3 -c 'import grpc, google.protobuf, cryptography' 2>/dev/null || { \
		sudo=; [ "$$(id -u)" = 0 ] || sudo=sudo; \
		$$sudo apt-get update && $$sudo apt-get install -y python3-grpcio python3-protobuf python3-cryptography; }
	@/usr/bin/python3 -c 'import django, flask, flask_login' 2>/dev/null || { \
		sudo=; [ "$$(id -u)" = 0 ] || sudo=sudo; \
		$$sudo apt-get update && $$sudo apt-get install -y python3-django python3-flask python3-flask-login; }
	@/usr/bin/python3 -c 'import venv, ensurepip' 2>/dev/null || { \
		sudo=; [ "$$(id -u)" = 0 ] || sudo=sudo; \
		$$sudo apt-get update && $$sudo apt-get install -y python3-venv; }
	@command -v npm >/dev/null || { \
		sudo=; [ "$$(id -u)" = 0 ] || sudo=sudo; \
		$$sudo apt-get update && $$sudo apt-get install -y nodejs npm; }
	@[ -d test/e2e/testdata/npmclients/node_modules ] || (cd test/e2e/testdata/npmclients && npm ci --no-audit --no-fund)

## test: set-up (deps, and the real Consul and Nomad agents: tools), format
## and vet checks, every test of both modules (the product's, the SDK's) with
## the race detector (the deployment suite of test/deploy included: real
## Consul and Nomad agents), then the moves stress test at full size (200
## users typing through 10,000 moves), read-your-writes at full size
## (10,000 commits on three servers) and the budgets' ceilings of 100,000
## people without it, then the fuzz targets.
## The two longest packages are named first: go test starts them first
## (the rest run beside them, two test binaries at a time).
test: deps tools lint
	STICKYD_REQUIRE_AGENTS=1 $(GO) test -race -count=1 -timeout 35m ./test/e2e ./test/deploy ./...
	cd $(SDK) && $(GO) test -race -count=1 -timeout 10m ./...
	for app in $(APPS); do (cd $$app && GOWORK=off $(GO) test -race -count=1 ./...) || exit 1; done
	$(GO) test -count=1 -timeout 10m -run 'TestMovesUnderLoad|TestReadYourWrites|TestGatewayCallsRunWhereTheyArrive' ./test/e2e/
	$(GO) test -count=1 -timeout 5m -run 'TestCeilingsAtPopulationScale' ./internal/gateway/cluster/
	$(MAKE) fuzz FUZZTIME=3s

## fuzz: every fuzz target of a decoder that takes outside input, for
## FUZZTIME each (make fuzz FUZZTIME=10m for a long run). Each runs in its
## package's folder, so that the SDK's run in the SDK's module.
FUZZTIME ?= 30s
FUZZ_TARGETS = \
	./internal/front:FuzzCookieVerify ./internal/front:FuzzOp ./internal/front:FuzzDecodeOp \
	./internal/agent:FuzzParseConfig ./internal/bundle:FuzzVerify \
	./internal/store:FuzzOps ./internal/store:FuzzUnmarshal \
	./plugins/worker:FuzzDecodeTree ./plugins/worker:FuzzPackage \
	./internal/gateway/provider/openai:FuzzStream ./internal/gateway/provider/anthropic:FuzzStream ./internal/gateway/provider/gemini:FuzzStream ./internal/gateway/provider/bedrock:FuzzStream
fuzz:
	@for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "fuzz $$pkg $$name ($(FUZZTIME))"; \
		(cd $$pkg && $(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) .) || exit 1; \
	done

## test-deploy: the deployment suite alone (real Consul and Nomad agents,
## jobs/stickyd.nomad, groups as Nomad jobs, Consul KV, CLI promotion).
test-deploy: tools
	STICKYD_REQUIRE_AGENTS=1 $(GO) test -count=1 -timeout 15m -v ./test/deploy/ ./internal/consul/ ./internal/nomad/ ./internal/testagents/

## chaos: the chaos suite for 10 minutes (CHAOS_DURATION=30m for longer):
## people type through a three-server cluster while workers, the raft
## leader and hosts are SIGKILLed, a worker SIGSTOPped and every server
## restarted in turn; the report is in the test's log. `make test` runs
## its 20-second form.
CHAOS_DURATION ?= 10m
.PHONY: chaos
chaos:
	@log=$$(mktemp); \
	STICKYD_CHAOS_DURATION=$(CHAOS_DURATION) $(GO) test -count=1 -timeout 0 -v -run '^TestChaos$$' ./test/e2e/ >$$log 2>&1; rc=$$?; \
	grep -E '^(--- |PASS|FAIL|ok)|chaos(_test)?\.go' $$log; \
	[ $$rc = 0 ] || echo "chaos: failed; the whole log is $$log"; exit $$rc

## soak-stop: an agent stopped and started 10 times while 70 people type,
## 20 of them with 10 MB pages and 50 with 1 MB, freeze_timeout = "1s":
## nobody lost, every count kept (`make test` runs a small form).
.PHONY: soak-stop
soak-stop:
	STICKYD_SOAK_STOP=1 $(GO) test -count=1 -timeout 30m -v -run '^TestStopParksLargePages$$' ./test/e2e/

## soak-lifecycle: the life of sessions at the issue's sizes: 100,000
## cookieless requests and 5,000 visitors who type and leave, against an
## agent with idle_park 2s and forget_after 10s; at the end only the people
## still connected are left (`make test` runs a 30-second form).
.PHONY: soak-lifecycle
soak-lifecycle:
	STICKYD_SOAK=full $(GO) test -count=1 -timeout 30m -v -run '^TestLifecycleSoak$$' ./test/e2e/

## soak-front: 25,000 idle keep-alive connections at an agent limited to
## 20,000 files (needs root to raise this process's own limit); the health
## checks and the admin API answer within a second throughout.
.PHONY: soak-front
soak-front:
	STICKYD_SOAK=full $(GO) test -count=1 -timeout 30m -v -run '^TestFrontAtItsFileLimit$$' ./test/e2e/

## soak-pages: one connection opens 100,000 pages through the front; every
## open past the page bound is refused with its message, the worker keeps
## the bound (`make test` runs 2,000).
.PHONY: soak-pages
soak-pages:
	STICKYD_SOAK=full $(GO) test -count=1 -timeout 30m -v -run '^TestPageOpensPastTheBound$$' ./test/e2e/

lint:
	@out="$$(gofmt -l cmd internal plugins test)"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	cd $(SDK) && $(GO) vet ./...
	for app in $(APPS) $(APPS:=/dev); do (cd $$app && GOWORK=off $(GO) vet ./...) || exit 1; done
	@if command -v terraform >/dev/null; then terraform fmt -check -recursive terraform/; \
	else echo "terraform not installed: terraform fmt -check skipped"; fi

## unit: the tests without the race detector (quick).
unit:
	$(GO) test -count=1 ./...
	cd $(SDK) && $(GO) test -count=1 ./...
	for app in $(APPS); do (cd $$app && GOWORK=off $(GO) test -count=1 ./...) || exit 1; done

## bench: benchmark tables (see docs/benchmarks.md).
bench: bench-gateway-deps
	$(GO) run ./test/bench/roundtrip
	$(GO) run ./test/bench/movepause
	$(GO) run ./test/bench/restart
	$(GO) run ./test/bench/promote
	$(GO) run ./test/bench/template
	$(GO) run ./test/bench/livedata
	$(GO) run ./test/bench/maintenance
	$(GO) run ./test/bench/gateway
	$(GO) run ./test/bench/lifecycle

## bench-gateway-deps: Portkey's gateway, the peer test/bench/gateway runs
## beside stickyd's: npm ci in its testdata dir, from the committed
## package-lock.json (@portkey-ai/gateway 1.15.2, hono and
## @hono/node-server pinned by overrides). Needs node and npm. Its one
## install script (patch-package) has no patch in the published package:
## scripts are not run.
PORTKEY_DIR := test/bench/gateway/testdata/portkey
bench-gateway-deps:
	@command -v npm >/dev/null || { echo "bench-gateway-deps: npm is needed (node 20 or later)"; exit 1; }
	@if [ ! -f $(PORTKEY_DIR)/node_modules/.package-lock.json ] || \
	    [ $(PORTKEY_DIR)/package-lock.json -nt $(PORTKEY_DIR)/node_modules/.package-lock.json ]; then \
		cd $(PORTKEY_DIR) && npm ci --ignore-scripts --no-audit --no-fund; \
	fi

## bench-scale: the maps at a million people (snapshot, restore, heap per
## person), three raft servers on loopback with their logs on disk (new
## connections/s, moves/s, a snapshot mid-run, a member restarted and one
## replaced empty), and the Consul mirror's lag at 100,000 people with a
## real Consul agent (built by tools); the people lists of the admin API
## at a million (test/bench/monitor). About 5 minutes on 2 cores.
.PHONY: bench-scale
bench-scale: tools
	$(GO) run ./test/bench/scale
	$(GO) run ./test/bench/monitor

## bench-peers: stickyd beside what people would pick instead (page state
## in Redis, a live tab editing a grid with each message's costs, nginx as
## the WebSocket proxy, memory per idle WebSocket); see docs/benchmarks.md.
## Installs redis-server and nginx from Debian if they are missing; the
## benchmark runs its own instances of them, on free loopback ports, and
## stops them at the end. Tables on stdout; CSV files and PNG plots in
## docs/benchmarks/ (10 to 15 minutes on 2 cores; -parts live alone ~5).
bench-peers: bench-peers-deps
	$(GO) run ./test/bench/peers

bench-peers-deps:
	@missing=; for p in redis-server nginx; do \
		command -v $$p >/dev/null || [ -x /usr/sbin/$$p ] || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
		sudo=; [ "$$(id -u)" = 0 ] || sudo=sudo; \
		$$sudo apt-get update && $$sudo apt-get install -y $$missing; \
	fi

## bench-profiles: CPU and allocation profiles of each path the peers
## benchmark measures (echo, page state, idle), written as pprof tops to
## test/bench/peers/profiles/ (installs the peers as bench-peers does; ~4 min).
bench-profiles: bench-peers-deps
	bash test/bench/peers/profile.sh

## proto: regenerate the channel protocol (Go, and Python for the Python
## worker) and the gateway's gRPC API (protoc from protobuf-compiler).
proto:
	$(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
	$(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.5.1
	cd plugins/worker/protocol && PATH="$$($(GO) env GOPATH)/bin:$$PATH" protoc \
		--go_out=. --go_opt=paths=source_relative \
		--go-grpc_out=. --go-grpc_opt=paths=source_relative stickyd.proto
	protoc -I plugins/worker/protocol --python_out=plugins/python/stickyd plugins/worker/protocol/stickyd.proto
	cd internal/gateway/gatewaypb && PATH="$$($(GO) env GOPATH)/bin:$$PATH" protoc \
		--go_out=. --go_opt=paths=source_relative \
		--go-grpc_out=. --go-grpc_opt=paths=source_relative gateway.proto

## tools: the real Consul (v1.14.11) and Nomad (v1.6.3) agents the
## deployment tests run, built once into $(BIN)/ from the Go module proxy by
## the tool modules under test/tools (about 3.6 GB of modules and 10-15
## minutes on a fresh 2-core machine; nothing when they are built).
tools: $(BIN)/consul $(BIN)/nomad

$(BIN)/consul:
	cd test/tools/consul && $(GO) build -o $(CURDIR)/$(BIN)/consul github.com/hashicorp/consul

$(BIN)/nomad:
	cd test/tools/nomad && $(GO) build -o $(CURDIR)/$(BIN)/nomad github.com/hashicorp/nomad

clean:
	rm -rf $(BIN)
