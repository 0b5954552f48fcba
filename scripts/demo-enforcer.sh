#!/usr/bin/env bash
# The enforcer part of `make demo`: start rlctl-enforcer on the in-memory store with the rendered
# snapshot, drive it with rlctl bench over loopback gRPC, show its metrics, and stop it with
# SIGTERM (graceful shutdown). Usage: demo-enforcer.sh BIN_DIR SNAPSHOT OUT_DIR
# The enforcer's log goes to OUT_DIR/enforcer.log.
set -euo pipefail
if [ $# -ne 3 ]; then
  echo "usage: $0 BIN_DIR SNAPSHOT OUT_DIR" >&2
  exit 2
fi
bin=$1 snapshot=$2 out=$3
# Free ports unless DEMO_GRPC_PORT or DEMO_ADMIN_PORT says otherwise: with fixed ones, a port
# another process held made the enforcer fail to start while the demo drove the other process.
grpc=127.0.0.1:${DEMO_GRPC_PORT:-0}
admin=127.0.0.1:${DEMO_ADMIN_PORT:-0}
log=$out/enforcer.log

# get URL prints the body of an HTTP GET, with curl or wget, whichever is installed.
if command -v curl >/dev/null 2>&1; then
  get() { curl -fsS "$1"; }
elif command -v wget >/dev/null 2>&1; then
  get() { wget -qO- "$1"; }
else
  echo "demo: neither curl nor wget is installed; install one (apt-get install curl) to run the enforcer demo" >&2
  exit 1
fi

mkdir -p "$out"
"$bin/rlctl-enforcer" --config "$snapshot" --store memory --grpc-addr "$grpc" --admin-addr "$admin" \
  --instance-id demo-0 2>"$log" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null || true' EXIT

# The addresses it listens on, from its "enforcer started" log line.
started=
for _ in $(seq 1 100); do
  if started=$(grep -m1 '"msg":"enforcer started"' "$log"); then break; fi
  if ! kill -0 $pid 2>/dev/null; then echo "demo: the enforcer exited; see $log" >&2; exit 1; fi
  sleep 0.1
done
if [ -z "$started" ]; then
  echo "demo: the enforcer did not start within 10s; see $log" >&2
  exit 1
fi
grpc=$(printf '%s\n' "$started" | sed -n 's/.*"grpc":"\([^"]*\)".*/\1/p')
admin=$(printf '%s\n' "$started" | sed -n 's/.*"admin":"\([^"]*\)".*/\1/p')

ready=
for _ in $(seq 1 100); do
  if get "http://$admin/readyz" >/dev/null 2>&1; then ready=1; break; fi
  if ! kill -0 $pid 2>/dev/null; then echo "demo: the enforcer exited; see $log" >&2; exit 1; fi
  sleep 0.1
done
if [ -z "$ready" ]; then
  echo "demo: the enforcer was not ready on http://$admin/readyz after 10s; see $log" >&2
  exit 1
fi

echo "== shopify charges (200 rps, fail-closed) at full speed for 2s: most are over the limit"
"$bin/rlctl" bench --target "$grpc" --concurrency 16 --duration 2s --domain edge_gateway_limits \
  --descriptor tenant_id=shopify,charge=/v1/payments/charge
# The client address picks one of 16 sub-shards, each 1/16 of the limit (12,500 rps), so the
# load comes from 256 addresses to spread it over all of them.
echo "== bigcorp orders (200,000 rps over 16 sub-shards, 256 client addresses) for 2s: all admitted"
"$bin/rlctl" bench --target "$grpc" --concurrency 16 --duration 2s --domain edge_gateway_limits \
  --descriptor tenant_id=bigcorp,orders=/v1/orders,client_ip=198.18.0.7 --tenants 256 --tenant-key client_ip
echo "== enforcer metrics"
get "http://$admin/metrics" | grep -E '^rate_limit_requests_total' | grep -v ' 0$' | sort
kill -TERM $pid
wait $pid
trap - EXIT
echo "demo: enforcer stopped cleanly"
