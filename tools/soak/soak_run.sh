#!/usr/bin/env bash
# The `kvtier run` soak: one long verified decode at scale, its resident set
# sampled every few seconds, so that a leak shows as RSS that keeps growing
# after the warm-up (the arenas are allocated and touched in the prefill).
#
#   tools/soak/soak_run.sh KVTIER LOGDIR [kvtier run options...]
#
# With no run options it runs the scale of docs/reliability.md ("Soak"):
# llama3-8b, all 32 layers, batch 2, 32k context = 8 GiB of KV, HBM 1 GiB
# (1/8 of it), DRAM 2 GiB, the SSD tier capped at 10 GiB, 32 decode steps.
# Writes LOGDIR/run.log (the command's output), LOGDIR/rss.tsv (seconds,
# VmRSS KiB, the last progress line) and LOGDIR/summary.txt; the spill
# directory is LOGDIR/spill, removed at the end. Environment: SOAK_PERIOD_S
# (default 10) the sampling period. Exit status: the command's.
set -euo pipefail

if [ $# -lt 2 ]; then
  echo "usage: tools/soak/soak_run.sh KVTIER LOGDIR [kvtier run options...]" >&2
  exit 2
fi
kvtier=$1 logdir=$2
shift 2
period=${SOAK_PERIOD_S:-10}
mkdir -p "$logdir"
spill="$logdir/spill"
if [ -e "$spill" ]; then
  echo "soak_run: $spill exists; remove it or choose another LOGDIR" >&2
  exit 2
fi
if [ $# -eq 0 ]; then
  set -- --model llama3-8b --layers 0 --batch 2 --context 32k --tokens 32 \
         --hbm 1G --dram 2G --ssd 10G
fi

"$kvtier" run "$@" --ssd-dir "$spill" >"$logdir/run.log" 2>&1 &
pid=$!
t0=$(date +%s)
printf 'seconds\trss_kib\tprogress\n' >"$logdir/rss.tsv"
while kill -0 "$pid" 2>/dev/null; do
  rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
  last=$(grep -a 'step ' "$logdir/run.log" 2>/dev/null | tail -n 1 | tr -s ' ' || true)
  [ -n "$rss" ] && printf '%s\t%s\t%s\n' "$(( $(date +%s) - t0 ))" "$rss" "$last" >>"$logdir/rss.tsv"
  sleep "$period"
done
rc=0
wait "$pid" || rc=$?
rm -rf "$spill"

{
  echo "command: $kvtier run $* --ssd-dir $spill"
  echo "exit status: $rc; wall: $(( $(date +%s) - t0 )) s"
  # RSS after the warm-up = the first sample once decode step 2 is under way;
  # at the end = the last sample of the decode; max over the whole run.
  awk -F'\t' 'NR > 1 && $3 ~ /step/ {
                split($3, a, " "); split(a[2], b, "/"); s = b[1] + 0
                if (s >= 2 && !warm) { warm = $2; wt = $1 }
                if (s < b[2] + 0 || !last) { last = $2; lt = $1 } }
              NR > 1 { if ($2 > max) max = $2; n++ }
              END { printf "rss samples: %d; after warm-up (%s s): %d KiB; last in the decode (%s s): %d KiB; max: %d KiB\n", n, wt, warm, lt, last, max }' \
      "$logdir/rss.tsv"
  grep -a -E 'verified|verification|tokens:|stall:|error|kvtier run:' "$logdir/run.log" || true
} | tee "$logdir/summary.txt"
exit "$rc"
