#!/bin/sh
# How fast rlctl simulate replays a million-line access log on this machine, against the floor of
# reading the same file (wc -l), for both log shapes gen-logs writes with request headers
# (envoy-json, istio-json), plain and gzip-compressed; then GOMAXPROCS=1 against GOMAXPROCS=2 on
# the plain envoy-json log. Every measurement runs RUNS times, the cases alternating within each
# run so that a drift of the machine's speed reaches all of them alike; medians are printed, and
# last whether they meet the speed goals (a million lines a second on each plain log, one core to
# two at least 1.8x).
#
# Usage: scripts/bench-simulate.sh                 (from anywhere in the checkout)
# Environment:
#   RUNS=5         runs of each measurement
#   LINES=1000000  lines of each generated log
#   KEEP=1         generate the logs into out/bench/ and keep them; without it they go to a
#                  temporary directory, unless out/bench/ already holds both plain logs: then
#                  they are read there, and their gzip copies are made there when missing
#
# The logs are seed 1 with 4 gateways (about 0.65 GB envoy-json, 1.06 GB istio-json for a million
# lines); each gzip copy is gzip -6 of the plain file. simulate runs with its defaults (4 virtual
# gateways, 1 ms store latency) and -o json; its report goes to a file in the temporary directory
# and its request count is checked against the log's line count.
#
# On Linux it also prints the machine's own speed before and after the runs (scripts/machinespeed:
# a core's step, a memory read that misses the caches, first-touched memory), which moves from
# hour to hour on a shared virtual machine: compare runs of different hours by these too.
#
# Only POSIX tools plus GNU date (+%N), nproc and go, git, gzip.
set -eu
cd "$(dirname "$0")/.."
runs=${RUNS:-5} lines=${LINES:-1000000}
for tool in go git gzip zcat awk sort wc date nproc; do
  command -v "$tool" >/dev/null || { echo "bench-simulate: $tool is not installed" >&2; exit 1; }
done
case $runs in '' | *[!0-9]* | 0) echo "bench-simulate: RUNS=$runs: want a positive number" >&2; exit 1 ;; esac

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

go build -o out/rlctl ./cmd/rlctl
rlctl=out/rlctl

# The logs: reused from out/bench/ when there, else generated.
logs=out/bench
if [ ! -f "$logs/simulate-envoy-json-$lines.log" ] || [ ! -f "$logs/simulate-istio-json-$lines.log" ]; then
  if [ "${KEEP:-}" = 1 ]; then mkdir -p "$logs"; else logs=$work; fi
fi
for f in envoy-json istio-json; do
  log=$logs/simulate-$f-$lines.log
  if [ ! -f "$log" ]; then
    echo "bench-simulate: generating $log" >&2
    "$rlctl" gen-logs --seed 1 --lines "$lines" --format "$f" --out "$log"
  fi
  if [ ! -f "$log.gz" ]; then
    echo "bench-simulate: compressing $log" >&2
    gzip -6 -c "$log" >"$log.gz.tmp" && mv "$log.gz.tmp" "$log.gz"
  fi
done

# file_of CASE is the log of envoy-plain, istio-plain, envoy-gzip or istio-gzip.
file_of() {
  case $1 in
    envoy-plain) echo "$logs/simulate-envoy-json-$lines.log" ;;
    istio-plain) echo "$logs/simulate-istio-json-$lines.log" ;;
    envoy-gzip) echo "$logs/simulate-envoy-json-$lines.log.gz" ;;
    istio-gzip) echo "$logs/simulate-istio-json-$lines.log.gz" ;;
  esac
}

# since T0 prints the seconds since T0, a date +%s.%N.
since() {
  awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f\n", b - a }'
}

# simulate FILE replays FILE, prints the seconds it took and checks the report's request count.
simulate() {
  t0=$(date +%s.%N)
  "$rlctl" simulate --policies policies --log "$1" -o json --out "$work/report.json" >&2
  s=$(since "$t0")
  n=$(awk -F'[:,]' '/^  "requests":/ { gsub(/ /, "", $2); print $2; exit }' "$work/report.json")
  if [ "$n" != "$lines" ]; then
    echo "bench-simulate: simulate $1 replayed ${n:-no} requests, want $lines" >&2
    exit 1
  fi
  echo "$s"
}

# count FILE counts FILE's lines the way a shell would (zcat for gzip), prints the seconds it
# took and checks the count.
count() {
  t0=$(date +%s.%N)
  case $1 in
    *.gz) n=$(zcat "$1" | wc -l) ;;
    *) n=$(wc -l <"$1") ;;
  esac
  s=$(since "$t0")
  if [ "$n" -ne "$lines" ]; then
    echo "bench-simulate: $1 has $n lines, want $lines" >&2
    exit 1
  fi
  echo "$s"
}

# How fast the machine itself is, before and after (scripts/machinespeed; Linux only).
speed=
if [ "$(uname -s)" = Linux ]; then
  go build -o "$work/machinespeed" ./scripts/machinespeed
  speed=$("$work/machinespeed")
fi

cases="envoy-plain istio-plain envoy-gzip istio-gzip"
load0=$(cut -d' ' -f1-3 </proc/loadavg 2>/dev/null || true)
times=$work/times
: >"$times"
i=1
while [ "$i" -le "$runs" ]; do
  echo "bench-simulate: run $i of $runs" >&2
  for c in $cases; do
    f=$(file_of "$c")
    # Assignments, not arguments, so that a failed check stops the script (set -e).
    s=$(simulate "$f")
    echo "$c-simulate $s" >>"$times"
    s=$(count "$f")
    echo "$c-wc $s" >>"$times"
  done
  for p in 1 2; do
    s=$(GOMAXPROCS=$p simulate "$(file_of envoy-plain)")
    echo "gomaxprocs-$p $s" >>"$times"
  done
  i=$((i + 1))
done

# median TAG prints the median of the seconds recorded under TAG.
median() {
  awk -v k="$1" '$1 == k { print $2 }' "$times" | sort -n | awk '{ v[NR] = $1 }
    END { if (NR % 2) printf "%.3f\n", v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

dirty=
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then dirty=" (with uncommitted changes)"; fi
cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo 2>/dev/null || true)
echo "rlctl simulate against wc -l: $lines lines, median of $runs runs"
echo "date:   $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "nproc:  $(nproc)${cpu:+ ($cpu)}"
echo "go:     $(go env GOVERSION)"
echo "commit: $(git rev-parse --short HEAD)$dirty"
# Other work on the machine slows every case; the load says how much there was.
if [ -r /proc/loadavg ]; then echo "load:   $load0 before, $(cut -d' ' -f1-3 </proc/loadavg) after"; fi
# The machine's own speed moves from hour to hour on a shared host, and the replay's with it.
if [ -n "$speed" ]; then
  echo "$speed: before"
  echo "$("$work/machinespeed"): after"
fi
echo
printf '%-12s %9s %9s %11s %9s %11s %9s\n' log MB simulate lines/s "wc -l" lines/s ratio
for c in $cases; do
  f=$(file_of "$c")
  bytes=$(wc -c <"$f")
  awk -v c="$c" -v b="$bytes" -v n="$lines" -v s="$(median "$c-simulate")" -v w="$(median "$c-wc")" 'BEGIN {
    printf "%-12s %9.0f %8.3fs %11.0f %8.3fs %11.0f %8.1fx\n", c, b / 1e6, s, n / s, w, n / w, s / w }'
done
echo
echo "(ratio: simulate's time over wc -l's; wc -l on a gzip log is zcat FILE | wc -l)"
echo
printf '%-12s %9s %11s\n' envoy-plain simulate lines/s
for p in 1 2; do
  awk -v p="$p" -v n="$lines" -v s="$(median "gomaxprocs-$p")" 'BEGIN {
    printf "GOMAXPROCS=%-2s %8.3fs %11.0f\n", p, s, n / s }'
done
awk -v a="$(median gomaxprocs-1)" -v b="$(median gomaxprocs-2)" 'BEGIN {
  printf "GOMAXPROCS=2 is %.2fx as fast as GOMAXPROCS=1\n", a / b }'

# The goals of issue 15 against these medians: 1,000,000 lines a second end to end on each plain
# log, and one core to two at least 1.8x. Read them beside the machine's speed above.
echo
for c in envoy-plain istio-plain; do
  awk -v c="$c" -v n="$lines" -v s="$(median "$c-simulate")" 'BEGIN {
    r = n / s; printf "goal %s >= 1,000,000 lines/s: %s (%.0f)\n", c, (r >= 1e6 ? "met" : "not met"), r }'
done
awk -v a="$(median gomaxprocs-1)" -v b="$(median gomaxprocs-2)" 'BEGIN {
  printf "goal one core to two >= 1.8x: %s (%.2fx)\n", (a / b >= 1.8 ? "met" : "not met"), a / b }'
