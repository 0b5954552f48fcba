#!/bin/sh
# Whether a change makes rlctl simulate faster: builds two revisions and replays one
# million-line log with each in turn, PAIRS times, then prints the median wall, CPU, user and
# system seconds of each, in how many pairs the new build took less wall, CPU and user time, and
# whether both wrote the same report; the last set's times, run by run, are kept in
# out/ab-times.txt. This machine's speed drifts by up to a third from one minute to the next, so
# only runs taken side by side can be compared; a run of each, or figures from different hours,
# prove nothing. The system time (page faults, the kernel zeroing fresh memory) swings more than
# the user time from run to run.
#
# A set of pairs can also be swayed as a whole: the same change has read 15 of 16 pairs faster in
# one set and 1 of 16 in the next, minutes apart (a smaller chunk of records, which changes how
# much the two cores hand each other). Something of the machine's state outlasts a set, such as
# where the two virtual CPUs sit. Run a change that moves data between cores in two or three sets,
# and keep it only if it wins in each. And the order of a pair's two runs matters: one build
# against itself, always run first and second in that order, read 12 of 12 pairs faster by CPU
# for the second (system time 0.34 against 0.21 s), so the order alternates from pair to pair
# (out/ab-times.txt keeps the runs in the order they ran). Try HEAD against HEAD now and then: it
# shows what a verdict of this machine is worth that hour.
#
# With COUNT=N it counts instead of timing: each build replays the log's first N lines once under
# valgrind's cachegrind, on one core with no garbage collection (GOMAXPROCS=1 GOGC=off, which
# simulate then leaves alone), and the script prints the instructions, first-level data-cache
# misses and last-level misses (a simulated 32 MB cache) per line. The counts are the same from
# one run to the next within about 0.3 %, whatever else the machine does, so a change of 1 % shows;
# but they are not time: a miss costs tens of instructions' time, and one core without GC is not
# how simulate runs. Use it to see small changes, and the timed pairs to confirm them.
#
# Usage: scripts/ab-simulate.sh OLD [NEW]     (from anywhere in the checkout)
#   OLD, NEW  revisions (a commit, a branch, HEAD~1); without NEW, the working tree as it is
# Environment:
#   PAIRS=8        alternating pairs of runs; 8 show a change of 5 % or more, but a smaller one
#                  can read 7 of 8 in one set and 3 of 8 in the next: confirm it with PAIRS=16
#   LINES=1000000  lines of the Envoy JSON log, reused from out/bench/ (bench-simulate.sh's) when
#                  there, else generated into a temporary directory
#   ARGS=          more flags for both replays, e.g. ARGS='--gateways 7 --store-latency uniform:0-5ms'
#   COUNT=         count instructions on this many lines instead of timing (needs valgrind)
#
# Exit status: 0 when both builds wrote the same report, 1 when the reports differ (a change
# meant to be faster must not change a figure) or a step failed.
#
# Only POSIX tools plus GNU date (+%N), and go, git; valgrind for COUNT.
set -eu
cd "$(dirname "$0")/.."
pairs=${PAIRS:-8} lines=${LINES:-1000000} args=${ARGS:-} count=${COUNT:-}
case $pairs in '' | *[!0-9]* | 0) echo "ab-simulate: PAIRS=$pairs: want a positive number" >&2; exit 1 ;; esac
case $count in *[!0-9]* | 0) echo "ab-simulate: COUNT=$count: want a positive number" >&2; exit 1 ;; esac
if [ -n "$count" ] && ! command -v valgrind >/dev/null; then
  echo "ab-simulate: COUNT needs valgrind (apt-get install -y valgrind)" >&2
  exit 1
fi
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: scripts/ab-simulate.sh OLD [NEW]" >&2
  exit 1
fi
for tool in go git awk sort cmp date; do
  command -v "$tool" >/dev/null || { echo "ab-simulate: $tool is not installed" >&2; exit 1; }
done

work=$(mktemp -d)
cleanup() {
  for d in "$work/old" "$work/new"; do
    if [ -d "$d" ]; then git worktree remove --force "$d" >/dev/null 2>&1 || true; fi
  done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# build NAME REV builds REV's rlctl as $work/rlctl-NAME; an empty REV builds the working tree.
build() {
  if [ -z "$2" ]; then
    go build -o "$work/rlctl-$1" ./cmd/rlctl
    return
  fi
  git worktree add --detach --quiet "$work/$1" "$2"
  (cd "$work/$1" && go build -o "$work/rlctl-$1" ./cmd/rlctl)
}
# rev REV prints REV's short commit hash, or fails naming it.
rev() {
  git rev-parse --short --verify --quiet "$1^{commit}" || { echo "ab-simulate: $1: not a revision" >&2; exit 1; }
}
old=$(rev "$1")
build old "$old"
if [ $# -eq 2 ]; then
  new=$(rev "$2")
  build new "$new"
else
  new="working tree"
  build new ""
fi

log=out/bench/simulate-envoy-json-$lines.log
if [ ! -f "$log" ]; then
  log=$work/envoy-$lines.log
  echo "ab-simulate: generating $log" >&2
  "$work/rlctl-new" gen-logs --seed 1 --lines "$lines" --format envoy-json --out "$log"
fi

# same prints "reports: byte-identical", or keeps both reports in out/ and fails.
same() {
  if cmp -s "$work/old.json" "$work/new.json"; then
    echo "reports: byte-identical"
    return
  fi
  cp "$work/old.json" out/ab-old.json 2>/dev/null || true
  cp "$work/new.json" out/ab-new.json 2>/dev/null || true
  echo "reports: DIFFER (out/ab-old.json, out/ab-new.json): a change to a figure must be explained" >&2
  exit 1
}

if [ -n "$count" ]; then
  head -n "$count" "$log" >"$work/head.log"
  count=$(($(wc -l <"$work/head.log"))) # fewer when the log is shorter
  # counted NAME replays the lines under cachegrind and appends "NAME Ir D1mr LLmr" to $work/counts.
  # (valgrind 3.19 does not know RDTSCP, which the Go runtime reads the clock with when a lock
  # is contended: cpu.rdtscp=off has it use the older instruction.)
  counted() {
    # shellcheck disable=SC2086 # ARGS is a list of flags
    if ! GOMAXPROCS=1 GOGC=off GODEBUG=cpu.rdtscp=off valgrind --tool=cachegrind --cache-sim=yes --LL=33554432,16,64 \
      --cachegrind-out-file="$work/$1.cg" "$work/rlctl-$1" simulate --policies policies \
      --log "$work/head.log" -o json --out "$work/$1.json" $args 2>"$work/$1.valgrind" >&2; then
      tail -n 20 "$work/$1.valgrind" >&2
      echo "ab-simulate: the $1 build failed under valgrind" >&2
      exit 1
    fi
    awk -v n="$1" '/^summary:/ { print n, $2, $6 + $9, $7 + $10 }' "$work/$1.cg" >>"$work/counts"
  }
  : >"$work/counts"
  echo "ab-simulate: counting old" >&2
  counted old
  echo "ab-simulate: counting new" >&2
  counted new
  echo "rlctl simulate, $old against $new: instructions and cache misses on $count lines${args:+, $args}"
  echo "date:   $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo
  awk -v lines="$count" -v old="$old" -v new="$new" '
    $1 == "old" { ir[1] = $2; d1[1] = $3; ll[1] = $4 }
    $1 == "new" { ir[2] = $2; d1[2] = $3; ll[2] = $4 }
    END {
      printf "%-14s %14s %14s %14s\n", "build", "instr/line", "D1 miss/line", "LL miss/line"
      printf "%-14s %14.0f %14.1f %14.2f\n", old, ir[1] / lines, d1[1] / lines, ll[1] / lines
      printf "%-14s %14.0f %14.1f %14.2f\n", new, ir[2] / lines, d1[2] / lines, ll[2] / lines
      printf "\nnew/old: instructions %.4f, D1 misses %.4f, LL misses %.4f\n", ir[2] / ir[1], d1[2] / d1[1], ll[2] / ll[1]
    }' "$work/counts"
  same
  exit 0
fi

# cpu FILE FIELD prints the CPU seconds the shell's children had used when the times builtin
# wrote FILE, from its second line, such as "0m1.25s 0m0.40s": FIELD 1 user, 2 system, 0 both.
# (times runs in this shell, not in a command substitution, whose subshell has no children.)
cpu() {
  awk -v f="$2" 'NR == 2 {
    s = 0
    for (i = 1; i <= 2; i++) {
      if (f != 0 && f != i) continue
      split($i, p, "m"); sub(/s$/, "", p[2]); s += p[1] * 60 + p[2]
    }
    printf "%.3f\n", s
  }' "$1"
}

# run NAME replays the log with rlctl-NAME into $work/NAME.json and appends "NAME WALL CPU USER
# SYS" to $work/times.
run() {
  times >"$work/cpu0"
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086 # ARGS is a list of flags
  "$work/rlctl-$1" simulate --policies policies --log "$log" -o json --out "$work/$1.json" $args >&2
  t1=$(date +%s.%N)
  times >"$work/cpu1"
  awk -v n="$1" -v a="$t0" -v b="$t1" \
    -v c="$(cpu "$work/cpu0" 0)" -v d="$(cpu "$work/cpu1" 0)" \
    -v e="$(cpu "$work/cpu0" 1)" -v f="$(cpu "$work/cpu1" 1)" \
    -v g="$(cpu "$work/cpu0" 2)" -v h="$(cpu "$work/cpu1" 2)" \
    'BEGIN { printf "%s %.3f %.3f %.3f %.3f\n", n, b - a, d - c, f - e, h - g }' >>"$work/times"
}

: >"$work/times"
i=1
while [ "$i" -le "$pairs" ]; do
  echo "ab-simulate: pair $i of $pairs" >&2
  # Which build runs first alternates: a run's system time depends on what the run before it
  # left (see the top), and two runs of one build in the old-new order differed by a third in
  # system time, set after set.
  if [ $((i % 2)) = 1 ]; then
    run old
    run new
  else
    run new
    run old
  fi
  i=$((i + 1))
done

# median NAME FIELD prints the median of FIELD (2 wall, 3 CPU, 4 user, 5 system) of NAME's runs.
median() {
  awk -v n="$1" -v f="$2" '$1 == n { print $f }' "$work/times" | sort -n | awk '{ v[NR] = $1 }
    END { if (NR % 2) printf "%.3f\n", v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
# won FIELD prints in how many pairs the new build took less of FIELD (as median's).
won() {
  awk -v f="$1" '{ p = int((NR - 1) / 2) } $1 == "old" { o[p] = $f } $1 == "new" { w[p] = $f }
    END { for (p in w) if (w[p] < o[p]) n++; print n + 0 }' "$work/times"
}

echo "rlctl simulate, $old against $new: $lines lines, $pairs alternating pairs${args:+, $args}"
echo "date:   $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "nproc:  $(nproc 2>/dev/null || echo '?')"
echo
printf '%-14s %12s %12s %12s %12s\n' build "wall (s)" "CPU (s)" "user (s)" "system (s)"
for b in old new; do
  if [ "$b" = old ]; then name=$old; else name=$new; fi
  printf '%-14s %12s %12s %12s %12s\n' "$name" "$(median $b 2)" "$(median $b 3)" "$(median $b 4)" "$(median $b 5)"
done
echo
echo "new faster in $(won 2) of $pairs pairs by wall time, in $(won 3) by CPU, in $(won 4) by user time; medians of each build's runs"
{ mkdir -p out && cp "$work/times" out/ab-times.txt; } 2>/dev/null || echo "ab-simulate: could not keep the times in out/ab-times.txt" >&2
same
