#!/usr/bin/env bash
# The hammer soak: tools/soak/hammer.c under ThreadSanitizer for a long time
# (default 30 minutes), its own RSS line every 10 s.
#
#   tools/soak/soak_hammer.sh HAMMER LOGDIR [hammer options...]
#
# HAMMER is the hammer of a -DKVT_SANITIZE_THREAD=ON build (build-tsan/tests/
# hammer); it runs under `setarch -R` (TSan needs the fixed address-space
# layout, as in tools/setup.sh) with the suppressions of tests/tsan.supp.
# Writes LOGDIR/hammer.log (progress and TSan reports) and LOGDIR/summary.txt:
# operations, wrong answers, failed calls, RSS after the warm-up (the first
# line at 60 s or later) and at the end, and the number of TSan reports.
# Exit status: the hammer's (TSan makes it 66 on a report).
set -euo pipefail

if [ $# -lt 2 ]; then
  echo "usage: tools/soak/soak_hammer.sh HAMMER LOGDIR [hammer options...]" >&2
  exit 2
fi
hammer=$1 logdir=$2
shift 2
top=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$logdir"
[ $# -gt 0 ] || set -- --seconds 1800 --report 10

rc=0
TSAN_OPTIONS="suppressions=$top/tests/tsan.supp:second_deadlock_stack=1:exitcode=66" \
  setarch "$(uname -m)" -R "$hammer" "$@" >"$logdir/hammer.log" 2>&1 || rc=$?

{
  echo "command: $hammer $*"
  echo "exit status: $rc"
  grep -a -E '^hammer: (ops|first)' "$logdir/hammer.log" || true
  awk '/^hammer: at / && $3 + 0 >= 60 && !w { w = $0 } /^hammer: at / { l = $0 }
       END { print "after warm-up: " w; print "last:          " l }' "$logdir/hammer.log"
  echo "TSan reports: $(grep -c 'WARNING: ThreadSanitizer' "$logdir/hammer.log" || true)"
} | tee "$logdir/summary.txt"
exit "$rc"
