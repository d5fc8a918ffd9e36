#!/bin/sh
# hops.sh [SRC] — the cross-file calls of one kvt_get (docs/get-path.md).
#
# Builds SRC's library (default: this checkout) at -O0 with
# -finstrument-functions into a build folder of its own, links
# tools/hops/hops.c from this checkout against it, runs it once, and prints
# for each case (a get of a page resident in DRAM; of a page only on SSD
# read into an aligned buffer; a put into a full cache, which evicts) the calls in order as "caller_file -> callee_file callee",
# then the count of cross-file calls, of distinct caller->callee file pairs
# and of files. A measurement for the docs, not a test: it asserts nothing.
set -eu
here=$(cd "$(dirname "$0")/../.." && pwd)
src=$(cd "${1:-$here}" && pwd)
out=$(mktemp -d /tmp/kvt-hops-XXXXXX)
trap 'rm -rf "$out"' EXIT
flags="-O0 -g -finstrument-functions -finstrument-functions-exclude-file-list=.h"
cmake -S "$src" -B "$out/build" -DCMAKE_BUILD_TYPE=None -DCMAKE_C_FLAGS="$flags" \
    -DKVT_BUILD_TESTS=OFF -DKVT_WITH_CUDA=OFF >"$out/cmake.log" 2>&1
cmake --build "$out/build" -j2 --target kvtier_static >"$out/build.log" 2>&1
cc -O0 -g -I"$src" -o "$out/hops" "$here/tools/hops/hops.c" "$out/build/libkvtier.a" \
    -luring -llmdb -lzstd -lhiredis -lpthread -lm
"$out/hops" "$out/ssd" >"$out/trace"
# Addresses to "function file" with addr2line; the binary is not PIE-relocated
# at run time only if linked -no-pie, so map through the load base instead.
python3 - "$out/hops" "$out/trace" <<'PY'
import subprocess, sys, os
exe, trace = sys.argv[1], sys.argv[2]
rows = [l.split() for l in open(trace)]
addrs = sorted({a for _, f, s in rows for a in (f, s)})
# The trace holds run-time addresses; hops.c printed them from a PIE, so
# subtract the base found from the symbol of main.
nm = subprocess.run(["nm", exe], capture_output=True, text=True).stdout
main_off = next(int(l.split()[0], 16) for l in nm.splitlines() if l.endswith(" T main"))
def resolve(addrs, base):
    q = [hex(int(a, 16) - base) for a in addrs]
    res = subprocess.run(["addr2line", "-f", "-e", exe] + q, capture_output=True, text=True).stdout.split("\n")
    out = {}
    for i, a in enumerate(addrs):
        fn, loc = res[2 * i], res[2 * i + 1]
        out[a] = (fn, os.path.relpath(loc.split(":")[0]) if loc.startswith("/") else loc.split(":")[0])
    return out
# find the base: the callee address of a known function must resolve to its name
base = 0
probe = resolve(addrs[:1], 0)
if probe[addrs[0]][0] == "??":
    # PIE: the lowest function entry maps near the text start; search the base
    # that makes the first recorded callee resolve to a function named kvt_get.
    first = rows[0][1]
    for l in nm.splitlines():
        p = l.split()
        if len(p) == 3 and p[2] == "kvt_get":
            base = int(first, 16) - int(p[0], 16)
            break
m = resolve(addrs, base)
def short(path):
    parts = path.split("/")
    return "/".join(parts[-2:]) if len(parts) >= 2 else path
for case in ("resident", "ssd", "put_evict"):
    calls = [(m[s], m[f]) for c, f, s in rows if c == case]
    hops, pairs, files = 0, set(), set()
    print(f"== {case}")
    for (cfn, cfile), (fn, ffile) in calls[1:]:   # the first entry is kvt_get itself
        cf, ff = short(cfile), short(ffile)
        files.update((cf, ff))
        if cf != ff:
            hops += 1
            pairs.add((cf, ff, fn))
            print(f"  {cf} -> {ff} {fn}")
    print(f"{case}: {hops} cross-file calls, {len(pairs)} distinct (caller file, callee), "
          f"{len(files)} files")
PY
