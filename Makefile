# rlctl: see README.md. `make demo` and `make test` are the quick start.
GO      ?= go
BIN     := bin
RLCTL   := $(BIN)/rlctl
OUT     := out

.PHONY: all build demo test bench vet fmt clean redis

all: build

build:
	$(GO) build -o $(BIN)/ ./cmd/...

# The main job on the embedded default: lint the example policies and render the snapshot.
demo: build
	@mkdir -p $(OUT)
	$(RLCTL) lint policies
	$(RLCTL) render --target snapshot policies --out $(OUT)/snapshot.json
	@echo "demo: snapshot written to $(OUT)/snapshot.json"

# Tests that need Redis start their own redis-server; this makes sure one is installed.
redis:
	@./scripts/ensure-redis.sh

test: redis
	$(GO) vet ./...
	$(GO) test -count=1 ./...

bench: redis
	$(GO) test -run '^$$' -bench . -benchmem ./...

fmt:
	gofmt -l -w .

clean:
	rm -rf $(BIN) $(OUT)
