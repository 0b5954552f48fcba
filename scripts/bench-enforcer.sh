#!/usr/bin/env bash
# The enforcer's performance figures in the README: rlctl-enforcer on a private redis-server,
# driven by rlctl bench at concurrency 64, each scenario run RUNS times in alternation, medians
# printed at the end. Everything runs on loopback; the machine's own Redis on 6379 is not touched.
#
# Usage: scripts/bench-enforcer.sh [OUT_DIR]      (default: out/bench)
# Environment:
#   RUNS=3 DURATION=10s CONCURRENCY=64     how much load
#   REDIS_NICE=0                           when set to a negative number (root only), redis-server
#                                          runs at that nice level: a stand-in for Redis on its own host
#   ENFORCER_FLAGS="--store-timeout 50ms"  more rlctl-enforcer flags
#   REDIS_PORT=16399 GRPC_PORT=18081 ADMIN_PORT=16070
#
# Each run writes OUT_DIR/<scenario>-<n>.json (rlctl bench -o json) and OUT_DIR/<scenario>-<n>.store,
# the delta of rate_limit_store_calls_total over the run: store takes that timed out or that the
# open breaker refused (both confound the Redis figures, because fail-open rules then admit
# without Redis).
set -euo pipefail
out=${1:-out/bench}
runs=${RUNS:-3} duration=${DURATION:-10s} conc=${CONCURRENCY:-64}
rport=${REDIS_PORT:-16399} grpc=127.0.0.1:${GRPC_PORT:-18081} admin=127.0.0.1:${ADMIN_PORT:-16070}
for tool in redis-server redis-cli jq curl; do
  command -v $tool >/dev/null || { echo "bench-enforcer: $tool is not installed" >&2; exit 1; }
done

mkdir -p "$out"
rm -f "$out"/{hot-within,hot-over,tenants-10k}-*.{json,store}
bin=$(mktemp -d) rpid= epid=
cleanup() {
  [ -n "$epid" ] && kill -TERM "$epid" 2>/dev/null || true
  [ -n "$rpid" ] && kill -TERM "$rpid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$bin"
}
trap cleanup EXIT
go build -o "$bin/" ./cmd/...
"$bin/rlctl" render --target snapshot policies --out "$bin/snap.json"

redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no --logfile "$out/redis.log" &
rpid=$!
if [ "${REDIS_NICE:-0}" != 0 ]; then renice -n "$REDIS_NICE" -p "$rpid" >/dev/null; fi
for _ in $(seq 50); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.1; done
kill -0 "$rpid" 2>/dev/null || { echo "bench-enforcer: redis-server did not start on port $rport; see $out/redis.log" >&2; exit 1; }

"$bin/rlctl-enforcer" --config "$bin/snap.json" --store redis --redis-url "redis://127.0.0.1:$rport/0" \
  --grpc-addr "$grpc" --admin-addr "$admin" --instance-id bench ${ENFORCER_FLAGS:-} 2>"$out/enforcer.log" &
epid=$!
for _ in $(seq 100); do curl -fs "http://$admin/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
curl -fs "http://$admin/readyz" >/dev/null || { echo "bench-enforcer: the enforcer is not ready; see $out/enforcer.log" >&2; exit 1; }

# store_calls prints "timeout circuit_open" totals for op="take".
store_calls() {
  curl -fs "http://$admin/metrics" | awk '/^rate_limit_store_calls_total\{op="take"/ {
    if ($0 ~ /result="timeout"/) t += $2; if ($0 ~ /result="circuit_open"/) c += $2 }
    END { printf "%d %d\n", t, c }'
}

# warm_up runs the scenario lightly until the breaker is closed (at most 10 s), so that a run
# does not start with the previous run's open breaker. An open breaker lets a probe through only
# when a store call comes, one cool-down after it opened, hence the light load.
warm_up() {
  for _ in $(seq 10); do
    # shellcheck disable=SC2086
    "$bin/rlctl" bench --target "$grpc" --concurrency 2 --duration 1s --domain edge_gateway_limits $1 >/dev/null
    m=$(curl -fs "http://$admin/metrics") && grep -q '^rate_limit_breaker_state 0$' <<<"$m" && return 0
  done
  echo "bench-enforcer: the breaker is still open after 10 s; running anyway" >&2
}

declare -A args=(
  [hot-within]="--descriptor tenant_id=bigcorp,orders=/v1/orders,client_ip=198.18.0.7 --tenants 256 --tenant-key client_ip"
  [hot-over]="--descriptor tenant_id=bigcorp,orders=/v1/orders,client_ip=198.18.0.7"
  [tenants-10k]="--descriptor tenant_id=t,catalog=/catalog/ --tenants 10000 --tenant-key tenant_id"
)
scenarios=(hot-within hot-over tenants-10k)
for n in $(seq "$runs"); do
  for s in "${scenarios[@]}"; do
    warm_up "${args[$s]}"
    read -r t0 c0 < <(store_calls)
    # shellcheck disable=SC2086 # the scenario's flags are meant to split
    "$bin/rlctl" bench --target "$grpc" --concurrency "$conc" --duration "$duration" \
      --domain edge_gateway_limits ${args[$s]} --redis-url "redis://127.0.0.1:$rport" --pid "$epid" \
      -o json >"$out/$s-$n.json"
    read -r t1 c1 < <(store_calls)
    echo "$((t1 - t0)) $((c1 - c0))" >"$out/$s-$n.store"
    echo "bench-enforcer: $s run $n: $(jq -c '{rps: (.rps|floor), p99_ms: (.latency_us.p99/1000), cmds: .redis_commands_per_request, cpu_us: .cpu_us_per_request}' "$out/$s-$n.json") store timeouts/refused: $(cat "$out/$s-$n.store")"
  done
done

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
printf '\n%-12s %9s %8s %8s %9s %8s %8s %s\n' scenario rps p50_ms p99_ms p999_ms cmds/req cpu_us "timeouts/refused (per run)"
for s in "${scenarios[@]}"; do
  f=("$out/$s"-*.json)
  m() { for x in "${f[@]}"; do jq -r "$1" "$x"; done | median; }
  printf '%-12s %9.0f %8.2f %8.2f %9.2f %8.4f %8.1f %s\n' "$s" "$(m .rps)" "$(m '.latency_us.p50/1000')" \
    "$(m '.latency_us.p99/1000')" "$(m '.latency_us.p999/1000')" "$(m .redis_commands_per_request)" \
    "$(m .cpu_us_per_request)" "$(cat "$out/$s"-*.store | tr '\n' ' ')"
done
