#!/usr/bin/env bash
# tools/gpu/check.sh — every GPU check of issue 20 in one pass, run on the GPU
# machine from the carry folder that tools/gpu/build.sh makes. Results under
# $OUT (default /tmp/kvt-gpu-out): summary.json, check.log, trace.json and
# results.tar.gz (every log). Each
# step has its own timeout; the whole stays under about 8 minutes.
# With no GPU visible it runs the same steps on the host back-end, shortened,
# and says so (summary.json: "device": "host-fallback").
# Env overrides: KVT_RUN_ARGS (step c's options), KVT_SSD_DIR (step e's dir),
# KVT_TEST_JOBS (tests at once), KVT_CHECK_BUDGET_S (the deadline, 480 s),
# KVT_CHECK_SKIP (step names or prefixes to skip, e.g. "bench_" for a rerun
# that needs only the decode and the suite).
set -u
C=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/kvt-gpu-out}
# The device tool brings back at most 8 files from $OUT: the logs are kept in
# $R and packed into $OUT/results.tar.gz at the end, beside summary.json,
# trace.json(.gz) and check.log.
R=${KVT_CHECK_WORK:-/tmp/kvt-check}
rm -rf "$R"; mkdir -p "$OUT" "$R"
exec > >(tee "$OUT/check.log") 2>&1
K=$C/kvtier
export LD_LIBRARY_PATH=$C/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if ldd "$K" 2>/dev/null | grep -q 'not found'; then
  export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$C/lib/fallback
  echo "check.sh: using the shipped libstdc++/libgcc_s (lib/fallback)"
fi
T0=$(date +%s)
# One deadline for the whole pass (default 480 s): a step gets its own timeout
# or what is left, whichever is less, and is skipped with under 10 s left.
DEADLINE=$((T0 + ${KVT_CHECK_BUDGET_S:-480}))
PY=$(command -v python3 || true)

if [ -e /dev/nvidia0 ] && timeout 30 nvidia-smi -L > "$R/nvidia-smi-L.txt" 2>&1; then
  MODE=cuda
else
  MODE=host-fallback
  cat <<'BANNER'
#####################################################################
##  check.sh: NO GPU VISIBLE (no /dev/nvidia0 or nvidia-smi failed) ##
##  Running the steps on the HOST back-end, shortened: these are   ##
##  NOT GPU results. summary.json says "device": "host-fallback".   ##
#####################################################################
BANNER
fi
echo "check.sh: mode $MODE, carry $C, OUT $OUT"

STEPS=""
# step NAME TIMEOUT CMD... : stdout to $R/NAME.out, stderr to $R/NAME.err
step() {
  local name=$1 to=$2; shift 2
  local skip
  for skip in ${KVT_CHECK_SKIP:-}; do
    case $name in "$skip"*)
      echo "== $name: SKIPPED (KVT_CHECK_SKIP)"; STEPS="$STEPS $name:skipped:0"; return;;
    esac
  done
  local left=$((DEADLINE - $(date +%s)))
  if [ $left -lt 10 ]; then
    echo "== $name: SKIPPED, the pass's deadline is reached"; STEPS="$STEPS $name:deadline:0"; return
  fi
  [ $to -le $left ] || to=$left
  echo "== $name (timeout ${to}s): $*"
  local t0=$(date +%s.%N)
  timeout -k 10 "$to" "$@" > "$R/$name.out" 2> "$R/$name.err"
  local rc=$?
  local dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b-a}')
  echo "   rc $rc$([ $rc = 124 ] && echo ' (TIMEOUT)') in ${dt}s"
  [ $rc = 0 ] || tail -n 8 "$R/$name.err" | sed 's/^/   | /'
  STEPS="$STEPS $name:$rc:$dt"
}

# (a) the GPU, read only
if [ $MODE = cuda ]; then
  step nvidia_smi 60 nvidia-smi -q
else
  echo "== nvidia_smi: skipped (no GPU)"; STEPS="$STEPS nvidia_smi:skipped:0"
fi

# The order puts the figures issue 20 asks for first and the suite, the one
# step whose length is open, last: it gets what is left of the deadline.

# (b) DRAM<->HBM, each way alone and both at once, beside the raw copy
# (cudaMemcpyAsync on CUDA) at three sizes
if [ $MODE = cuda ]; then DEV="--device 0"; HB="--hbm 1G --dram 4G"; else DEV="--device host"; HB="--hbm 128M --dram 512M --reps 1"; fi
for pb in 128K 256K 1M; do
  step "bench_hbm_$pb" 90 "$K" bench hbm $DEV $HB --page-bytes $pb --json
done
# The same with one cudaMemcpyAsync per page, kvtier and baseline alike
# (KVT_CUDA_COPY=loop): the plain cudaMemcpyAsync baseline issue 20 names,
# and whether the batch call pays.
for pb in 128K 256K; do
  step "bench_hbm_${pb}_loop" 90 env KVT_CUDA_COPY=loop "$K" bench hbm $DEV $HB --page-bytes $pb --json
done

# (c) a short traced decode (Perfetto / chrome://tracing), every step checked.
# It runs before the long one, whose length it helps set.
if [ $MODE = cuda ]; then
  step run_trace 120 "$K" run --device 0 --model llama3-8b --layers 0 --batch 1 --context 8k --tokens 4 --hbm 256M --dram 1G --ssd 0 --threads 16 --nice 0 --no-progress --json --trace "$R/trace.json"
else
  step run_trace 60 "$K" run --device host --model llama3-8b --layers 2 --batch 1 --context 1k --tokens 2 --no-progress --json --trace "$R/trace.json"
fi

# (c2) every attention shape of kvtier run (docs/run.md) on the kernel, over
# three tiers (the default sizes: KV 4x HBM, an SSD tier), each step checked
# bit-exactly (and the quantised ones within their tolerance of bf16).
for shape in "falcon-7b" "deepseek-v3" "llama3-8b --window 1000" "llama3-8b --dtype fp8" \
             "llama3-8b --dtype int8" "llama3-8b --dtype int4" "deepseek-v3 --dtype int4 --window 700"; do
  name=run_shape_$(echo "$shape" | tr -c 'a-z0-9\n' '_' | tr -s _)
  step "$name" 120 "$K" run $DEV --model $shape --layers 2 --batch 2 --context 2k --tokens 4 --no-progress --json
done

# (d) the long decode. llama3-8b, all 32 layers: 128 KiB of KV per token, in
# 128 KiB pages. 64k context = 8 GiB of KV, HBM 2 GiB (KV = 4x HBM), the rest
# in DRAM: each step loads about 6 GiB over the link. Its length is set for
# about 45 s of decode (30 s is asked for) from the slower of two estimates
# of a step: the link's (6 GiB at (b)'s 128K dram->hbm figure) and the
# compute's ((c)'s time per step, times 8 for 8x the context: the kernel's
# time grows with the tokens it reads). The CPU reference checks five of its steps (--verify-every T/4:
# 0, T/4, T/2, 3T/4 and the last), since it costs far more per step than the
# GPU decode (docs/gpu.md, Known limits).
# The host fallback runs the same arithmetic on a 2k context (256 MiB of KV,
# 64 MiB HBM: 192 MiB a step) for about 2 s.
if [ $MODE = cuda ]; then
  SHAPE="--context 64k --hbm 2G --dram 8G --threads 16 --nice 0"; STEP_BYTES=$((6 << 30)); TARGET_S=45; MIN_T=16; SCALE=8
else
  SHAPE="--context 2k --hbm 64M --dram 256M"; STEP_BYTES=$((192 << 20)); TARGET_S=2; MIN_T=8; SCALE=0
fi
GBPS=$([ -n "$PY" ] && "$PY" -c 'import json,sys
try: print(next(l["gbps"] for l in json.load(open(sys.argv[1]))["links"] if l["link"] == "dram->hbm"))
except Exception: print(0)' "$R/bench_hbm_128K.out" 2>/dev/null || echo 0)
TRACE_STEP_S=$([ -n "$PY" ] && "$PY" -c 'import json,sys
try: d = json.load(open(sys.argv[1])); print(d["wall_s"] / d["steps"])
except Exception: print(0)' "$R/run_trace.out" 2>/dev/null || echo 0)
TOKENS=$(awk -v g="$GBPS" -v s="$TARGET_S" -v b="$STEP_BYTES" -v m="$MIN_T" -v ts="$TRACE_STEP_S" -v k="$SCALE" \
  'BEGIN { link = g > 0 ? b / (g * 1e9) : 0; comp = ts * k; st = link > comp ? link : comp;
           t = st > 0 ? int(s / st) : m; if (t < m) t = m; if (t > 1024) t = 1024; print t }')
EVERY=$(( (TOKENS + 2) / 4 )); [ $EVERY -ge 1 ] || EVERY=1 # ceil((T-1)/4): five steps
echo "   a step: link ${GBPS} GB/s (bench_hbm_128K), run_trace ${TRACE_STEP_S} s x $SCALE; so --tokens $TOKENS --verify-every $EVERY"
RUN_ARGS=${KVT_RUN_ARGS:---model llama3-8b --layers 0 --batch 1 $SHAPE --tokens $TOKENS --verify-every $EVERY --ssd 0}
step run_long $([ $MODE = cuda ] && echo 300 || echo 120) "$K" run $DEV $RUN_ARGS --no-progress --json

# (e) DRAM<->SSD on this machine's disk
SSD_DIR=${KVT_SSD_DIR:-/var/tmp}
mkdir -p "$SSD_DIR"
if [ $MODE = cuda ]; then SA="--bytes 1G --reps 3"; else SA="--quick"; fi
step bench_ssd 120 "$K" bench ssd --dir "$SSD_DIR" $SA --json

# (f) the C suite, several tests at once (run_tests.sh). The cmocka tests'
# engines run on the device KVT_TEST_DEVICE names (tests/helpers.h t_config:
# host when unset): GPU 0 here.
if [ $MODE = cuda ]; then export KVT_TEST_DEVICE=0; fi
step tests 400 "$C/run_tests.sh" "$R/tests"
unset KVT_TEST_DEVICE

# summary.json
TOTAL=$(( $(date +%s) - T0 ))
if [ -n "$PY" ]; then
  "$PY" - "$R" "$MODE" "$TOTAL" "$STEPS" <<'PY'
import json, os, re, sys
out, mode, total, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4].split()
def load(n):
    try: return json.load(open(os.path.join(out, n + ".out")))
    except Exception: return None
s = {"device": mode, "total_s": total, "steps": {}}
if mode != "cuda":
    s["warning"] = "NO GPU: host back-end, shortened; these are not GPU results"
for st in steps:
    name, rc, dt = st.split(":")
    e = {"rc": None if rc == "skipped" else 124 if rc == "deadline" else int(rc), "wall_s": float(dt)}
    if rc == "skipped": e["skipped"] = True
    if rc == "deadline": e["skipped"] = "the pass's deadline was reached first"
    s["steps"][name] = e
def put(name, d): s["steps"].setdefault(name, {}).update(d)
try:
    log = open(os.path.join(out, "tests.out")).read()
    m = re.search(r"tests: (\d+) passed, (\d+) failed, (\d+) skipped, (\d+) not run(.*)", log)
    if m: put("tests", {"passed": int(m[1]), "failed": int(m[2]), "skipped": int(m[3]),
                        "not_run": int(m[4]),
                        "failed_names": m[5].strip(" ()").replace("failed:", "").split()})
except OSError: pass
try:
    smi = open(os.path.join(out, "nvidia_smi.out")).read()
    g = {}
    for k in ("Product Name", "Driver Version", "CUDA Version", "Bus Id", "Persistence Mode"):
        m = re.search(r"^\s*%s\s*:\s*(.+)$" % re.escape(k), smi, re.M)
        if m: g[k] = m[1].strip()
    m = re.search(r"Link Width\s*\n\s*Max\s*:\s*(\S+)\s*\n\s*Current\s*:\s*(\S+)", smi)
    if m: g["pcie_width_max_current"] = [m[1], m[2]]
    m = re.search(r"PCIe Generation\s*\n\s*Max\s*:\s*(\S+)\s*\n\s*Current\s*:\s*(\S+)", smi)
    if m: g["pcie_gen_max_current"] = [m[1], m[2]]
    put("nvidia_smi", {"gpu": g})
except OSError: pass
for pb in ("128K", "256K", "1M", "128K_loop", "256K_loop"):
    d = load("bench_hbm_" + pb)
    if d:
        put("bench_hbm_" + pb, {"device": d.get("device"), "page_bytes": d.get("page_bytes"),
            "links": {l["link"]: {k: v for k, v in l.items() if k not in ("link", "block_bytes", "depth")}
                      for l in d.get("links", [])},
            "acquire_release_per_s": d.get("acquire_release_per_s")})
# Issue 20's copy lines: kvtier (its default copy path) at 256K against the
# plain cudaMemcpyAsync baseline (the loop run), each direction alone.
bd, bl = load("bench_hbm_256K"), load("bench_hbm_256K_loop")
if bd and bl:
    got = {l["link"]: l for l in bd.get("links", [])}
    base = {l["link"]: l for l in bl.get("links", [])}
    lines = {}
    for ln in ("dram->hbm", "hbm->dram"):
        if ln in got and ln in base and base[ln].get("baseline_gbps"):
            g, b = got[ln]["gbps"], base[ln]["baseline_gbps"]
            lines[ln] = {"gbps": g, "cudaMemcpyAsync_gbps": b, "ratio": round(g / b, 4),
                         "holds": g >= 0.9 * b and g >= 40}
    s["issue20_copies_256K"] = lines
d = load("bench_ssd")
if d: put("bench_ssd", {"json": {k: v for k, v in d.items() if not isinstance(v, list) or len(v) < 12}})
for n in ("run_long", "run_trace"):
    d = load(n)
    if d:
        put(n, {"decode_wall_s": d.get("wall_s")})
        put(n, {k: d.get(k) for k in ("verified", "verify_every", "verified_steps", "steps", "device", "model", "layers", "batch", "context", "tokens",
                "page_bytes", "kv_bytes", "bound_s", "bound_by", "bound_ratio", "tokens_per_s",
                "stall_fraction", "compute_s", "prefill_s", "verify_s", "links_gbps", "decode_links_gbps")})
        if d.get("tiers"):
            hbm = d["tiers"]["hbm"]["capacity_bytes"]
            put(n, {"hbm_bytes": hbm, "kv_over_hbm": round(d["kv_bytes"] / hbm, 2) if hbm else None})
s["trace_json_bytes"] = os.path.getsize(os.path.join(out, "trace.json")) if os.path.exists(os.path.join(out, "trace.json")) else None
s["ok"] = all(v.get("rc") in (0, None) for v in s["steps"].values())
json.dump(s, open(os.path.join(out, "summary.json"), "w"), indent=1)
print(json.dumps(s, indent=1))
PY
else
  { echo "{\"device\": \"$MODE\", \"total_s\": $TOTAL, \"note\": \"no python3: exit codes only; see the .out files\", \"steps\": {"
    sep=""; for st in $STEPS; do IFS=: read -r n rc dt <<<"$st"; [ "$rc" = skipped ] && rc=null; [ "$rc" = deadline ] && rc=124
      printf '%s"%s": {"rc": %s, "wall_s": %s}' "$sep" "$n" "$rc" "$dt"; sep=", "; done
    echo "}}"; } > "$R/summary.json"
  cat "$R/summary.json"
fi
cp "$R/summary.json" "$OUT/summary.json"
if [ -f "$R/trace.json" ]; then
  if [ "$(stat -c %s "$R/trace.json")" -gt $((15 * 1024 * 1024)) ]; then gzip -c "$R/trace.json" > "$OUT/trace.json.gz"
  else cp "$R/trace.json" "$OUT/trace.json"; fi
fi
tar -C "$R" --exclude=trace.json --exclude=tests/work -czf "$OUT/results.tar.gz" .
[ $MODE = cuda ] || echo "check.sh: HOST FALLBACK — no GPU was used."
echo "check.sh: done in ${TOTAL}s; results in $OUT (logs: results.tar.gz)"
grep -q '"ok": true' "$R/summary.json" 2>/dev/null || ! grep -q '"rc": [1-9]' "$R/summary.json"
