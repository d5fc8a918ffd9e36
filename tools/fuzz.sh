#!/usr/bin/env bash
# kvtier's fuzzers (tests/fuzz), long runs: builds them with clang-14
# (libFuzzer + ASan + UBSan) in build-fuzz/, runs each for a time or a
# number of executions, and prints what each did and found.
#
#   tools/fuzz.sh [--time SECONDS | --runs N] [--parallel] [TARGET...]
#
#   --time S     run each target S seconds (default 1800)
#   --runs N     run each target N executions instead
#   --parallel   run the targets at once (one process each), not one by one
#   TARGET       layout index page quant sim_trace prefix_trace cli rcluster (default: all)
#
# Unlike the suite's short runs (ctest -R '^fuzz_': a fixed seed), each run
# here starts from a random seed. It reads tests/fuzz/corpus/<target> and
# tests/fuzz/regress/<target> (read only) and keeps the inputs it grows in
# build-fuzz/fuzz-corpus/<target>, so a second run goes on from the first.
# A crash, a hang past 10 s, more than 2 GiB of memory or a broken rule
# saves the input as build-fuzz/fuzz-findings/<target>/<kind>-<sha1>;
# replay one with build-fuzz/tests/fuzz/fuzz_<target> FILE, and keep it
# for good by copying it to tests/fuzz/regress/<target>/ (the suite then
# runs it every time; docs/reliability.md). Logs are in build-fuzz/fuzz-logs/.
# Runs under nice -n 10: the machine may be shared.
# Exit 0 when nothing was found, 1 when anything was, 2 on bad usage.
set -euo pipefail

all=(layout index page quant sim_trace prefix_trace cli rcluster)
time_s=1800 runs="" parallel=0 targets=()
usage() { sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --time) [[ "${2:-}" =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: bad value '${2:-}' for --time: expected seconds" >&2; exit 2; }
            time_s=$2; shift 2 ;;
    --runs) [[ "${2:-}" =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: bad value '${2:-}' for --runs: expected a count" >&2; exit 2; }
            runs=$2; shift 2 ;;
    --parallel) parallel=1; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "fuzz.sh: unknown option '$1' (see tools/fuzz.sh --help)" >&2; exit 2 ;;
    *) [[ " ${all[*]} " == *" $1 "* ]] || { echo "fuzz.sh: no target '$1' (${all[*]})" >&2; exit 2; }
       targets+=("$1"); shift ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
bdir=build-fuzz
cc=$(command -v clang-14 || command -v clang || true)
[ -n "$cc" ] || { echo "fuzz.sh: clang-14 is needed (apt-get install clang-14 libclang-rt-14-dev)" >&2; exit 1; }
cmake -S . -B "$bdir" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVT_FUZZ=ON \
      -DKVT_BUILD_TESTS=OFF -DKVT_WITH_CUDA=OFF >/dev/null
cmake --build "$bdir" -j"$(nproc 2>/dev/null || echo 2)" --target fuzzers >/dev/null
mkdir -p "$bdir/fuzz-corpus" "$bdir/fuzz-logs"
start="$bdir/fuzz-logs/.start"  # findings newer than this are this run's
touch "$start"

limit=(-max_total_time="$time_s")
[ -z "$runs" ] || limit=(-runs="$runs")

run_one() { # target
  local t=$1 dict=() regress=()
  [ -f "tests/fuzz/$t.dict" ] && dict=(-dict="tests/fuzz/$t.dict")
  [ -d "tests/fuzz/regress/$t" ] && regress=("tests/fuzz/regress/$t")
  mkdir -p "$bdir/fuzz-corpus/$t" "$bdir/fuzz-findings/$t"
  nice -n 10 "$bdir/tests/fuzz/fuzz_$t" "${limit[@]}" -rss_limit_mb=2048 -timeout=10 \
    -close_fd_mask=3 -print_final_stats=1 "${dict[@]}" \
    -artifact_prefix="$bdir/fuzz-findings/$t/" "$bdir/fuzz-corpus/$t" "tests/fuzz/corpus/$t" \
    "${regress[@]}" >"$bdir/fuzz-logs/$t.log" 2>&1
}

# One line per target from its log: executions, seconds, coverage (edges
# and features, libFuzzer's cov: and ft:), corpus, and what was found.
report() { # target rc
  local t=$1 rc=$2 log="$bdir/fuzz-logs/$t.log" execs secs cov ft corp found
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  secs=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  corp=$(ls "$bdir/fuzz-corpus/$t" | wc -l)
  found=$(find "$bdir/fuzz-findings/$t" -type f -newer "$start" | wc -l)
  printf '%-13s executions %-10s seconds %-6s cov %-5s ft %-6s corpus %-6s findings %s%s\n' \
    "$t" "${execs:-?}" "${secs:-?}" "${cov:-?}" "${ft:-?}" "$corp" "$found" \
    "$([ "$rc" -ne 0 ] && echo " (exit $rc: see $log)")"
  [ "$rc" -eq 0 ] && [ "$found" -eq 0 ]
}

declare -A rcs
if [ "$parallel" -eq 1 ]; then
  declare -A pids
  for t in "${targets[@]}"; do run_one "$t" & pids[$t]=$!; done
  for t in "${targets[@]}"; do rc=0; wait "${pids[$t]}" || rc=$?; rcs[$t]=$rc; done
else
  for t in "${targets[@]}"; do rc=0; run_one "$t" || rc=$?; rcs[$t]=$rc; done
fi
bad=0
for t in "${targets[@]}"; do report "$t" "${rcs[$t]}" || bad=1; done
[ "$bad" -eq 0 ] && exit 0
echo "fuzz.sh: findings (logs in $bdir/fuzz-logs); to keep one as a regression input:" >&2
for t in "${targets[@]}"; do
  find "$bdir/fuzz-findings/$t" -type f -newer "$start" \
    -exec echo "  cp {} tests/fuzz/regress/$t/" \; >&2
done
exit 1
