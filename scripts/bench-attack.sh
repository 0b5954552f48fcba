#!/usr/bin/env bash
# One key over its limit (issue 11): a key limited to 1000 requests per second, hammered by a
# held-out RLS client (rlctl bench) for DURATION at each CONCURRENCY, against
#   target=rlctl                 rlctl-enforcer --store redis, one process per run, on a snapshot
#                                of a one-rule policy: token_bucket, sliding_window, fixed_window
#                                × failure mode open (no fallback) and closed;
#   target=envoyproxy-ratelimit  envoyproxy/ratelimit (its service_cmd, a fixed window), one
#                                process per run, on a config of the same rule, with its defaults
#                                (no local cache: every request is INCRBY+EXPIRE) and its stats
#                                off (DISABLE_STATS; with USE_STATSD=false alone it logs a line
#                                per request to stdout).
# Both on one private redis-server on a free loopback port. The targets alternate (an rlctl case,
# then envoyproxy/ratelimit at the same concurrency, ...) so that drift of the machine hits both;
# every case runs RUNS times and the medians are printed at the end (and written to
# OUT_DIR/summary.md as a Markdown table). Every run uses a descriptor value of its own, so each
# starts on a fresh key: a full bucket, empty windows.
#
# Usage: scripts/bench-attack.sh [OUT_DIR]        (default: out/bench-attack; about 10 minutes)
# Environment:
#   BENCH_ATTACK_RUNS=3                 repetitions of every case
#   BENCH_ATTACK_DURATION=5s            length of one run
#   BENCH_ATTACK_CONCURRENCY="4 64"     client concurrencies
#   BENCH_ATTACK_ALGORITHMS="token_bucket sliding_window fixed_window"
#   BENCH_ATTACK_MODES="open closed"
#   BENCH_ATTACK_REV=                   a Git revision to measure (built from `git archive`);
#                                       empty: the working tree
#   ERL_GOBIN=out/erl-gobin             where envoyproxy/ratelimit's service_cmd is installed
#                                       (go install, when it is missing there)
#   ENFORCER_FLAGS=                     more rlctl-enforcer flags
# Needs redis-server, redis-cli, jq, curl and go. All traffic is on 127.0.0.1.
#
# Per run it writes OUT_DIR/rlctl-<algo>-<mode>-c<C>-<n>.json or envoyproxy-ratelimit-c<C>-<n>.<i>.json
# (rlctl bench -o json; <i>: which rlctl case that run followed), the target's .log and, for rlctl, .metrics (the enforcer's /metrics after the run), and prints one line:
#   bench-attack: target=rlctl algo=fixed_window mode=open c=64 run=1 requests=N admitted=M
#     ideal=I admitted_per_ideal=X cmds_per_req=Y breaker_opens=Z errors=E store_takes=...
# admitted is OK answers. cmds_per_req is every Redis command of the run (INFO commandstats,
# scripts' inner calls included) per answered request. breaker_opens is
# rate_limit_breaker_transitions_total{to="open"}; store_takes is rate_limit_store_calls_total
# {op="take"} by result.
#
# ideal is what an ideal single bucket of the same limit (L = 1000 per 1 s, burst 1000) admits of
# the run's requests. The run lasts d = duration_s (rlctl bench's own measure), is taken to end
# when rlctl bench exits (t_end, in epoch seconds) and to start at t_start = t_end - d, and its
# N requests (those the target answered) to arrive evenly, at R = N/d. Each run starts about
# half-way through a second, so that the partial first and last windows get ~0.5 s of load:
#   token_bucket    L + L·d                       a full bucket, then the refill
#   fixed_window    the sum, over the epoch-aligned 1-s windows the run touched, of
#                   min(L, R · the seconds of the run inside the window): L in every whole window,
#                   and in the first and last, partial ones L or what arrived there
#   sliding_window  L · (d + frac(t_start))       the sliding window counter: L in the first,
#                                                 partial window, then L per second; between
#                                                 L·d and L·(d+1) (it assumes R well above L)
# and never more than N. The probe call rlctl bench makes before the run spends one token and is
# not counted. envoyproxy/ratelimit, which is exact, is the check of these formulas: it admits
# ideal - 1 (the probe), or ideal when the probe fell in a window the run left early.
set -euo pipefail
out=${1:-out/bench-attack}
runs=${BENCH_ATTACK_RUNS:-3} duration=${BENCH_ATTACK_DURATION:-5s}
read -r -a concs <<<"${BENCH_ATTACK_CONCURRENCY:-4 64}"
read -r -a algos <<<"${BENCH_ATTACK_ALGORITHMS:-token_bucket sliding_window fixed_window}"
read -r -a modes <<<"${BENCH_ATTACK_MODES:-open closed}"
rev=${BENCH_ATTACK_REV:-}
erl_gobin=${ERL_GOBIN:-out/erl-gobin}
erl_pkg=github.com/envoyproxy/ratelimit/src/service_cmd@v1.4.1-0.20260122083618-3fb702589d36
limit=1000
for tool in redis-server redis-cli jq curl go git; do
  command -v $tool >/dev/null || { echo "bench-attack: $tool is not installed" >&2; exit 1; }
done
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "bench-attack: BENCH_ATTACK_RUNS=$runs: want a positive number" >&2; exit 1; }

mkdir -p "$out"
rm -f "$out"/*.json "$out"/*.metrics "$out"/*.log "$out"/*.err "$out"/summary.md "$out"/runs.txt
tmp=$(mktemp -d)
# live holds the PIDs of the processes this script started and has not stopped yet.
declare -A live=()
# stop ends one process this script started, by its PID: SIGTERM, then SIGKILL after 5 s.
stop() {
  local p=$1
  [ -n "${live[$p]:-}" ] || return 0
  unset "live[$p]"
  kill -TERM "$p" 2>/dev/null || true
  for _ in $(seq 50); do
    kill -0 "$p" 2>/dev/null || { wait "$p" 2>/dev/null || true; return 0; }
    sleep 0.1
  done
  kill -KILL "$p" 2>/dev/null || true
  wait "$p" 2>/dev/null || true
}
cleanup() {
  local p
  for p in "${!live[@]}"; do stop "$p"; done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# free_port prints a loopback TCP port nothing listens on (nor one this script already chose),
# below the kernel's ephemeral range, where the local ends of outgoing connections would make a
# port that looks free now fail to bind a moment later.
taken=" "
read -r eph_lo _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || eph_lo=32768
port_lo=10000 port_n=$((eph_lo - 10000))
[ "$port_n" -ge 1000 ] || port_lo=$((eph_lo + 1000)) port_n=$((60000 - eph_lo - 1000))
free_port() {
  local p
  for _ in $(seq 200); do
    p=$((port_lo + (RANDOM * 32768 + RANDOM) % port_n))
    [[ $taken == *" $p "* ]] && continue
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then taken+="$p "; echo "$p"; return 0; fi
  done
  echo "bench-attack: no free loopback port found" >&2
  return 1
}

# The binaries: rlctl and rlctl-enforcer from the working tree (or BENCH_ATTACK_REV), and
# envoyproxy/ratelimit's service_cmd at the pinned version.
bin=$tmp/bin
if [ -n "$rev" ]; then
  measured=$(git rev-parse --short "$rev")
  mkdir -p "$tmp/src"
  git archive "$rev" | tar -x -C "$tmp/src"
  (cd "$tmp/src" && go build -o "$bin/" ./cmd/...)
else
  measured=$(git describe --always --dirty 2>/dev/null || echo unknown)
  go build -o "$bin/" ./cmd/...
fi
erl=$erl_gobin/service_cmd
if [ ! -x "$erl" ]; then
  echo "bench-attack: installing $erl_pkg into $erl_gobin" >&2
  mkdir -p "$erl_gobin"
  GOBIN=$(cd "$erl_gobin" && pwd) go install "$erl_pkg"
fi
echo "bench-attack: measuring rlctl $measured and envoyproxy/ratelimit ${erl_pkg#*@}; runs=$runs duration=$duration concurrency=${concs[*]}" >&2

# One policy directory and snapshot per algorithm × mode: one domain, one rule on one descriptor
# key (each value its own key), 1000 per 1 s, burst 1000, enforced.
for algo in "${algos[@]}"; do
  for mode in "${modes[@]}"; do
    d=$tmp/policy-$algo-$mode
    mkdir -p "$d"
    failure="{mode: \"open\"}"
    [ "$mode" = closed ] && failure="{mode: \"closed\", reason: \"bench: deny while the store is away\"}"
    cat >"$d/policy.cue" <<EOF
package attack

// One key over its limit: see scripts/bench-attack.sh.
domains: attack: {
	sources: key: {kind: "header", header: "x-key"}
	rules: hot: {
		owner: "bench"
		stage: {name: "enforce", since: "2026-12-03"}
		match: [{key: "key"}]
		limits: [{requests: $limit, window: "1s", burst: $limit, algorithm: "$algo"}]
		failure: $failure
	}
}
EOF
    "$bin/rlctl" lint "$d" >"$tmp/lint.txt" 2>&1 || { cat "$tmp/lint.txt" >&2; echo "bench-attack: rlctl lint failed on $d" >&2; exit 1; }
    "$bin/rlctl" render --target snapshot "$d" --out "$tmp/snap-$algo-$mode.json"
  done
done
# envoyproxy/ratelimit's config of the same rule: RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config/*.yaml.
mkdir -p "$tmp/erl/ratelimit/config"
cat >"$tmp/erl/ratelimit/config/attack.yaml" <<EOF
domain: attack
descriptors:
  - key: key
    rate_limit:
      unit: second
      requests_per_unit: $limit
EOF

rport=$(free_port)
redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no --logfile "$out/redis.log" &
rpid=$!
live[$rpid]=1
for _ in $(seq 50); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.1; done
redis-cli -p "$rport" ping >/dev/null 2>&1 || { echo "bench-attack: redis-server did not start on port $rport; see $out/redis.log" >&2; exit 1; }

# take_counts prints rate_limit_store_calls_total{op="take"} by result, result:N/..., from a
# metrics file; breaker_opens prints rate_limit_breaker_transitions_total{to="open"}.
take_counts() {
  awk '/^rate_limit_store_calls_total\{/ && /op="take"/ { match($0, /result="[^"]*"/)
    r = substr($0, RSTART + 8, RLENGTH - 9); n[r] += $NF }
    END { split("granted denied timeout late error circuit_open", order, " "); s = ""
      for (i = 1; i in order; i++) { r = order[i]; if (r in n) { s = s (s == "" ? "" : "/") r ":" n[r]; delete n[r] } }
      for (r in n) s = s (s == "" ? "" : "/") r ":" n[r]
      print (s == "" ? "-" : s) }' "$1"
}
breaker_opens() {
  awk '/^rate_limit_breaker_transitions_total\{/ && /to="open"/ { n += $NF } END { print n + 0 }' "$1"
}

# bench runs the client against grpc address $1 for the target process $2, on descriptor value
# $3, writing $4.json; it prints "t_end_ms" (when rlctl bench exited) or fails.
bench() {
  local c=$5 now
  # Start the run about half-way through a second (rlctl bench takes some 30 ms to start), so
  # that the first and last fixed windows it touches get half a second of load each.
  now=$(date +%s%3N)
  sleep "$(awk -v ms=$(((1470 - now % 1000) % 1000)) 'BEGIN { printf "%.3f", ms / 1000 }')"
  "$bin/rlctl" bench --target "$1" --pid "$2" --concurrency "$c" --duration "$duration" \
    --domain attack --descriptor "key=$3" --redis-url "redis://127.0.0.1:$rport/0" -o json >"$4.json" 2>"$4.err" || {
    echo "bench-attack: rlctl bench failed: $(cat "$4.err")" >&2
    return 1
  }
  date +%s%3N
}

# report prints the line of a run (target algo mode c n file t_end_ms breaker_opens store_takes)
# and appends it, with t_end_ms, to runs.txt.
failed=0
report() {
  local target=$1 algo=$2 mode=$3 c=$4 n=$5 f=$6 tend=$7 opens=$8 takes=$9 line
  line=$(jq -r --arg algo "$algo" --argjson tend "$tend" --argjson L "$limit" '
    (.duration_s) as $d | ($tend / 1000) as $e | ($e - $d) as $s |
    .requests as $n | ($n / $d) as $r | ($s | floor) as $fs | ($e | floor) as $fe |
    (if $algo == "token_bucket" then $L + $L * $d
     elif $algo == "fixed_window" then
       (if $fs == $fe then [$L, $r * $d] | min
        else ([$L, $r * ($fs + 1 - $s)] | min) + $L * ($fe - $fs - 1) + ([$L, $r * ($e - $fe)] | min) end)
     else $L * ($d + $s - $fs) end | [., $n] | min | floor) as $ideal |
    "requests=\(.requests) admitted=\(.ok) ideal=\($ideal) admitted_per_ideal=\(.ok / $ideal * 1000 | round / 1000) cmds_per_req=\(.redis_commands_per_request * 10000 | round / 10000) errors=\(.errors)"' "$f.json")
  line="target=$target algo=$algo mode=$mode c=$c run=$n $line breaker_opens=$opens store_takes=$takes"
  echo "bench-attack: $line"
  echo "$line t_end_ms=$tend t_start_ms=$(jq -r --argjson tend "$tend" '$tend - .duration_s * 1000 | floor' "$f.json")" >>"$out/runs.txt"
}

# A target that does not come up (a port taken meanwhile, say) is tried once more on new ports.
# wait_ready URL PID TRIES: polls URL every 0.1 s until it answers (0), PID exits or TRIES pass (1).
wait_ready() {
  local _
  for _ in $(seq "$3"); do
    curl -fs "$1" >/dev/null 2>&1 && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

run_rlctl() {
  local algo=$1 mode=$2 c=$3 n=$4 f g a epid tend ready= try
  f=$out/rlctl-$algo-$mode-c$c-$n
  for try in 1 2; do
    g=127.0.0.1:$(free_port) a=127.0.0.1:$(free_port)
    # shellcheck disable=SC2086 # ENFORCER_FLAGS is meant to split
    "$bin/rlctl-enforcer" --config "$tmp/snap-$algo-$mode.json" --store redis \
      --redis-url "redis://127.0.0.1:$rport/0" --grpc-addr "$g" --admin-addr "$a" \
      --instance-id bench-attack ${ENFORCER_FLAGS:-} 2>"$f.log" &
    epid=$!
    live[$epid]=1
    wait_ready "http://$a/readyz" "$epid" 100 && { ready=1; break; }
    echo "bench-attack: rlctl-enforcer is not ready (try $try): $(tail -n 1 "$f.log")" >&2
    stop "$epid"
  done
  [ -n "$ready" ] || { failed=$((failed + 1)); return 0; }
  if tend=$(bench "$g" "$epid" "rlctl-$algo-$mode-c$c-$n" "$f" "$c") && curl -fs "http://$a/metrics" >"$f.metrics"; then
    report rlctl "$algo" "$mode" "$c" "$n" "$f" "$tend" "$(breaker_opens "$f.metrics")" "$(take_counts "$f.metrics")"
  else
    failed=$((failed + 1))
  fi
  stop "$epid"
}

run_erl() {
  local c=$1 n=$2 i=$3 f gp hp dp epid tend ready= try
  f=$out/envoyproxy-ratelimit-c$c-$n.$i
  for try in 1 2; do
    gp=$(free_port) hp=$(free_port) dp=$(free_port)
    env RUNTIME_ROOT="$tmp/erl" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_APPDIRECTORY=config \
      RUNTIME_WATCH_ROOT=false RUNTIME_IGNOREDOTFILES=true \
      REDIS_SOCKET_TYPE=tcp REDIS_TYPE=SINGLE REDIS_URL="127.0.0.1:$rport" USE_STATSD=false DISABLE_STATS=true \
      HOST=127.0.0.1 PORT="$hp" GRPC_HOST=127.0.0.1 GRPC_PORT="$gp" DEBUG_HOST=127.0.0.1 DEBUG_PORT="$dp" \
      LOG_LEVEL=warn "$erl" >"$f.log" 2>&1 &
    epid=$!
    live[$epid]=1
    wait_ready "http://127.0.0.1:$hp/healthcheck" "$epid" 200 && { ready=1; break; }
    echo "bench-attack: envoyproxy/ratelimit is not healthy (try $try): $(tail -n 1 "$f.log")" >&2
    stop "$epid"
  done
  [ -n "$ready" ] || { failed=$((failed + 1)); return 0; }
  if tend=$(bench "127.0.0.1:$gp" "$epid" "erl-c$c-$n.$i" "$f" "$c"); then
    report envoyproxy-ratelimit fixed_window - "$c" "$n" "$f" "$tend" - -
  else
    failed=$((failed + 1))
  fi
  stop "$epid"
}

for n in $(seq "$runs"); do
  for c in "${concs[@]}"; do
    i=0
    for algo in "${algos[@]}"; do
      for mode in "${modes[@]}"; do
        i=$((i + 1))
        run_rlctl "$algo" "$mode" "$c" "$n"
        run_erl "$c" "$n" "$i"
      done
    done
  done
done

# Medians per case, from runs.txt.
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
field() { tr ' ' '\n' | sed -n "s/^$1=//p"; }
{
  echo "| target | algorithm | fail mode | concurrency | runs | requests | admitted | ideal | admitted / ideal | Redis cmds/req | breaker opened | gRPC errors |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
  for c in "${concs[@]}"; do
    cases=()
    for algo in "${algos[@]}"; do for mode in "${modes[@]}"; do cases+=("rlctl $algo $mode"); done; done
    cases+=("envoyproxy-ratelimit fixed_window -")
    for cs in "${cases[@]}"; do
      read -r target algo mode <<<"$cs"
      sel=$(grep -F "target=$target algo=$algo mode=$mode c=$c " "$out/runs.txt" 2>/dev/null || true)
      [ -z "$sel" ] && continue
      m() { field "$1" <<<"$sel" | median; }
      k=$(wc -l <<<"$sel")
      opens=$( [ "$target" = rlctl ] && field breaker_opens <<<"$sel" | paste -sd, - || echo -)
      printf '| %s | %s | %s | %s | %s | %.0f | %.0f | %.0f | %.3f | %.4f | %s | %.0f |\n' \
        "$target" "${algo//_/ }" "$mode" "$c" "$k" "$(m requests)" "$(m admitted)" "$(m ideal)" \
        "$(m admitted_per_ideal)" "$(m cmds_per_req)" "$opens" "$(m errors)"
    done
  done
} >"$out/summary.md"
echo
echo "bench-attack: medians (rlctl $measured; breaker opened: per run); also in $out/summary.md"
cat "$out/summary.md"
if [ "$failed" -gt 0 ]; then
  echo "bench-attack: $failed run(s) failed; see $out/*.err and $out/*.log" >&2
  exit 1
fi
