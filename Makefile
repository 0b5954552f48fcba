# rlctl: see README.md. `make demo` and `make test` are the quick start.
GO      ?= go
BIN     := bin
RLCTL   := $(BIN)/rlctl
OUT     := out
# VERSION is what `rlctl version` prints: the nearest tag (or the commit), marked -dirty when the
# tree has changes; "dev" outside a Git checkout.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)

.PHONY: all build demo test lint docs bench bench-enforcer bench-attack pgo vet fmt clean redis deps

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/ ./cmd/...

# The main job on the embedded default: lint the example policies, run their unit tests, render
# every target (the snapshot, Envoy's filters and rate_limits and a bootstrap, envoyproxy/ratelimit
# YAML, Prometheus alerts), generate and simulate an access log, show where each rule's rollout
# stands and what would be promoted today, and exercise the enforcer on the in-memory store. Everything it writes goes to $(OUT)/.
demo: build
	@mkdir -p $(OUT)
	$(RLCTL) lint policies
	$(RLCTL) test policies/tests
	$(RLCTL) render --target snapshot policies --out $(OUT)/snapshot.json
	$(RLCTL) render --target envoy policies --out $(OUT)/envoy
	$(RLCTL) render --target envoy --bootstrap policies --out $(OUT)/envoy/bootstrap.yaml
	$(RLCTL) render --target ratelimit policies --out $(OUT)/ratelimit
	$(RLCTL) render --target prometheus policies --out $(OUT)/rlctl-alerts.yaml
	$(RLCTL) gen-logs --seed 1 --lines 200000 --format envoy-json --out $(OUT)/access.log.gz
	$(RLCTL) simulate --policies policies --log $(OUT)/access.log.gz --gateways 4 -o table
	$(RLCTL) simulate --policies policies --log $(OUT)/access.log.gz --gateways 4 -o html --out $(OUT)/report.html
	$(RLCTL) rollout status policies
	$(RLCTL) rollout plan policies --log $(OUT)/access.log.gz
	./scripts/demo-enforcer.sh $(BIN) $(OUT)/snapshot.json $(OUT)
	@echo "demo: done. Report: $(OUT)/report.html, snapshot: $(OUT)/snapshot.json"

# Tests that need Redis start their own redis-server; this makes sure one is installed.
redis:
	@./scripts/ensure-redis.sh

# What the tests run besides Go: redis-server, promtool (Debian's prometheus package) and
# envoyproxy/ratelimit's config_check_cmd and service_cmd (go install, into out/erl-gobin).
deps: redis
	@./scripts/ensure-prometheus.sh
	@./scripts/ensure-erl.sh

# The contract tests print the figures the issues name (differential: ops=N mismatches=M,
# journal: decisions=N mismatches=M); they run verbosely on their own so the lines show.
# TestAttack (an over-limit key on real Redis, a line per case: attack: algo=... admitted=N
# ideal=M cmds_per_req=X breaker_opens=0) and TestFloodOfKeys (flood: keys=... peak_heap_mb=...)
# print their figures the same way, and so do the envoy target's fidelity test (envoy-actions:
# requests=N mismatches=M) and the xDS fleet (xds: enforcers=20 propagation_ms=N).
CONTRACT_TESTS := ^(TestRedisMatchesModel|TestRedisClusterMatchesModel|TestJournalReplay|TestAttack|TestFloodOfKeys|TestEnvoyActionsMatchModel|TestXDSFleet)$$

# The race detector runs on the concurrent packages' concurrency tests: the lease manager, the
# pipelined store, the guarded store and breaker, the enforcer under load and through outages,
# and three attack cases (at 64 workers the race detector's slowdown overloads two cores, and
# the breaker rightly opens). The whole of ./engine ./enforcer under -race takes over ten
# minutes here.
RACE_ENGINE   := TestLease|TestPipelined|TestKeyCap|TestFallback|TestMemory|TestDecide
RACE_ENFORCER := TestGuarded|TestBreaker|TestStages|TestStatuses|TestReloadUnderLoad|TestReloadChangesLimitOfBusyKey|TestRedisOutage|TestShutdownReturnsLeases|TestHitsAddend|TestAttack/.*/closed/c=4/instances=1$$

# Packages run one at a time (-p 1): several start Redis servers and hold latency bounds (the
# outage tests' 10 ms tail) that a neighbour package's load on two cores would break; together
# they take under a minute. The access-log parser runs again with -tags purego, for the Go
# versions of its assembly loops, which other architectures use.
test: deps
	$(GO) vet ./...
	$(GO) test -p 1 -count=1 -skip '$(CONTRACT_TESTS)' ./...
	$(GO) test -p 1 -count=1 -v -run '$(CONTRACT_TESTS)' ./engine ./enforcer ./render ./xds/controlplane
	$(GO) test -race -count=1 -run '$(RACE_ENGINE)' ./engine
	$(GO) test -race -count=1 -run '$(RACE_ENFORCER)' ./enforcer
	$(GO) test -count=1 -tags purego ./simulate/accesslog

# Static checks beyond go vet (which make test runs): go.mod and go.sum exactly as the imports need
# them, and staticcheck with its default checks (enforcer/staticcheck.conf leaves out SA1019
# there). staticcheck runs with go run at a fixed version, so it is not a dependency of the module.
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
lint:
	$(GO) mod tidy -diff
	$(GO) run $(STATICCHECK) ./...

# The generated documentation (docs/development.md): a page per rlctl command in docs/cli, from
# each command's help (the hidden rlctl write-docs); rlctl-enforcer's page, from its flag set; and
# the metric list in docs/enforcer.md, from a running enforcer's registry. Tests fail when the
# committed files differ from what this writes.
docs:
	rm -f docs/cli/rlctl.md docs/cli/rlctl_*.md
	$(GO) run ./cmd/rlctl write-docs docs/cli
	$(GO) run ./internal/docgen/enforcerdocs -cli docs/cli -doc docs/enforcer.md -policies policies

# simulate's packages run only in rlctl, which is built with cmd/rlctl/default.pgo; go test builds
# a test binary without it unless told (the replay then reads 6-8 % slower than rlctl replays).
bench: redis
	$(GO) test -run '^$$' -bench . -benchmem $$($(GO) list ./... | grep -v '/simulate\(/\|$$\)')
	$(GO) test -run '^$$' -bench . -benchmem -pgo=$(CURDIR)/cmd/rlctl/default.pgo ./simulate/...

# cmd/rlctl/default.pgo is the CPU profile Go's profile-guided optimisation builds rlctl with
# (about 5% off a simulate replay): a profile of the replay benchmark. Refresh it after large
# changes to the replay.
pgo:
	@mkdir -p $(OUT)
	$(GO) test ./simulate -run '^$$' -bench Replay1M -benchtime 1x -count 2 -cpuprofile $(OUT)/replay.pprof -o $(OUT)/simulate.test
	cp $(OUT)/replay.pprof cmd/rlctl/default.pgo

# The enforcer's figures in the README (about 3 minutes; needs redis-server, redis-cli, jq, curl; results in $(OUT)/bench/).
bench-enforcer: redis
	./scripts/bench-enforcer.sh $(OUT)/bench

# One key over its limit (issue 11), rlctl-enforcer and envoyproxy/ratelimit side by side (about
# 10 minutes; BENCH_ATTACK_RUNS=1 for a quick look; needs redis-server, redis-cli, jq, curl; installs
# envoyproxy/ratelimit into $(OUT)/erl-gobin; results in $(OUT)/bench-attack/).
bench-attack: redis
	./scripts/bench-attack.sh $(OUT)/bench-attack

fmt:
	gofmt -l -w .

clean:
	rm -rf $(BIN) $(OUT)
