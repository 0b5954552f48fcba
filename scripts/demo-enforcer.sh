#!/usr/bin/env bash
# The enforcer part of `make demo`: start rlctl-enforcer on the in-memory store with the rendered
# snapshot, drive it with rlctl bench over loopback gRPC, show its metrics, and stop it with
# SIGTERM (graceful shutdown). Usage: demo-enforcer.sh BIN_DIR SNAPSHOT
set -euo pipefail
bin=$1 snapshot=$2
grpc=127.0.0.1:${DEMO_GRPC_PORT:-18081}
admin=127.0.0.1:${DEMO_ADMIN_PORT:-16070}

"$bin/rlctl-enforcer" --config "$snapshot" --store memory --grpc-addr "$grpc" --admin-addr "$admin" \
  --instance-id demo-0 2>out/enforcer.log &
pid=$!
trap 'kill -TERM $pid 2>/dev/null || true' EXIT

for _ in $(seq 1 100); do
  if curl -fsS "http://$admin/readyz" >/dev/null 2>&1; then break; fi
  if ! kill -0 $pid 2>/dev/null; then echo "demo: enforcer exited; see out/enforcer.log" >&2; exit 1; fi
  sleep 0.1
done

echo "== shopify charges (200 rps, fail-closed) at full speed for 2s: most are over the limit"
"$bin/rlctl" bench --target "$grpc" --concurrency 16 --duration 2s --domain edge_gateway_limits \
  --descriptor tenant_id=shopify,path=/v1/payments/charge
echo "== bigcorp orders (200,000 rps over 16 sub-shards) for 2s: all admitted"
"$bin/rlctl" bench --target "$grpc" --concurrency 16 --duration 2s --domain edge_gateway_limits \
  --descriptor tenant_id=bigcorp,path=/v1/orders,client_ip=198.18.0.7
echo "== enforcer metrics"
curl -fsS "http://$admin/metrics" | grep -E '^rate_limit_requests_total' | grep -v ' 0$' | sort
kill -TERM $pid
wait $pid
trap - EXIT
echo "demo: enforcer stopped cleanly"
