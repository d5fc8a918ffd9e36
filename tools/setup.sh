#!/usr/bin/env bash
# kvtier set-up: installs what is missing (Debian/Ubuntu), builds, and runs.
#
#   tools/setup.sh run    install, build, run the main job
#   tools/setup.sh test   install, build, run every test (and again under
#                         AddressSanitizer + UndefinedBehaviorSanitizer, and
#                         under ThreadSanitizer)
#
# Works as root, or as a user with sudo. Build trees: build/, build-asan/ and
# build-tsan/.
set -euo pipefail

mode=${1:-}
case "$mode" in
  run|test) ;;
  *) echo "usage: tools/setup.sh run|test" >&2; exit 2 ;;
esac

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
jobs=$(nproc 2>/dev/null || echo 2)

# Debian packages the build and tests need. CUDA is optional: the CUDA
# back-end is built wherever the toolkit is installed (/usr/local/cuda).
# libjansson-dev: the command reads traces and writes --json with jansson
# (its static libjansson.a goes into the GPU build, tools/gpu/build.sh).
# libhiredis-dev: the remote tier's Redis Cluster client (io/rcluster*.c;
# without it the library is built without the remote tier).
pkgs=(build-essential cmake pkg-config liburing-dev liblmdb-dev libzstd-dev libcmocka-dev libjansson-dev
      libhiredis-dev e2fsprogs)

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null; then sudo "$@"
  else echo "setup: need root or sudo to run: $*" >&2; exit 1
  fi
}

install_missing() {
  local missing=()
  for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
}

# nvcc is not on PATH on every machine that has the toolkit.
if [ -x /usr/local/cuda/bin/nvcc ] && ! command -v nvcc >/dev/null; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi

build() { # build DIR [cmake args...]
  local dir=$1; shift
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVT_WITH_CUDA=AUTO "$@" >/dev/null
  cmake --build "$dir" -j"$jobs"
}

install_missing
if [ "$mode" = run ]; then
  build build -DKVT_BUILD_TESTS=OFF -DKVT_SANITIZE=OFF -DKVT_DEBUG=OFF
  exec ./build/kvtier run
fi

# The layering check of the plain suite (tests/layering) reads the library's
# AST through libclang's Python binding.
pkgs=(python3 python3-clang-14)
install_missing

# The remote tier's tests start their own Redis servers (tools/redis-cluster.sh,
# ports 7100+ on 127.0.0.1). Debian starts redis-server.service on port 6379
# when it installs the package; the tests neither use nor want it, so the
# install runs under a policy-rc.d that forbids starting services (exit 101),
# unless the machine already has one of its own. A service that was running
# before is left alone.
pkgs=(redis-server redis-tools)
policy=/usr/sbin/policy-rc.d
if ! dpkg-query -W -f='${Status}' redis-server 2>/dev/null | grep -q "install ok installed" &&
   [ ! -e "$policy" ]; then
  printf '#!/bin/sh\n# tools/setup.sh: no service starts while it installs redis-server\nexit 101\n' |
    as_root tee "$policy" >/dev/null
  as_root chmod 755 "$policy"
  trap 'as_root rm -f "$policy"' EXIT
  install_missing
  as_root rm -f "$policy"
  trap - EXIT
  # Nor at the next boot, where systemd runs (the package enables it).
  if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
    as_root systemctl disable redis-server.service >/dev/null 2>&1 || true
  fi
else
  install_missing
fi
build build -DKVT_BUILD_TESTS=ON -DKVT_SANITIZE=OFF -DKVT_DEBUG=OFF
(cd build && ctest --output-on-failure -j"$jobs")
echo "setup: the same suite under AddressSanitizer + UndefinedBehaviorSanitizer"
build build-asan -DKVT_BUILD_TESTS=ON -DKVT_SANITIZE=ON -DKVT_DEBUG=ON -DCMAKE_BUILD_TYPE=Debug
(cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
   UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure -j"$jobs")
# ThreadSanitizer needs the fixed address-space layout that setarch -R gives
# (with high-entropy ASLR it stops with "unexpected memory mapping").
echo "setup: the same suite under ThreadSanitizer"
build build-tsan -DKVT_BUILD_TESTS=ON -DKVT_SANITIZE_THREAD=ON -DKVT_DEBUG=ON -DCMAKE_BUILD_TYPE=Debug
(cd build-tsan && TSAN_OPTIONS="suppressions=$top/tests/tsan.supp:halt_on_error=1:second_deadlock_stack=1" \
   setarch "$(uname -m)" -R ctest --output-on-failure -j"$jobs")

# The CUDA back-end on a machine with no GPU: the suite's engines on device 0
# of the stand-in runtime tests/mock/cudart_mock.c, where HBM is not
# CPU-addressable (docs/gpu.md#the-mock-runtime). It needs the toolkit's
# headers only; without them it is skipped, saying so.
if command -v nvcc >/dev/null; then
  echo "setup: the suite on the CUDA back-end over the mock CUDA runtime"
  build build-mock -DKVT_BUILD_TESTS=ON -DKVT_CUDA_MOCK=ON -DKVT_WITH_CUDA=ON
  (cd build-mock && ctest --output-on-failure -j"$jobs")
else
  echo "setup: no CUDA toolkit (nvcc): the mock CUDA runtime's run is skipped"
fi

# Each libFuzzer target (tests/fuzz: the layout file, the index records, the
# page decoder, the trace parsers, the CLI's parsers) on every checked-in
# input (its seed corpus and regression inputs), then a short run from a
# fixed seed for a fixed number of executions: the same verdict on the same
# code every time. The long random runs are tools/fuzz.sh
# (docs/reliability.md). libFuzzer is in libclang-rt-14-dev.
echo "setup: short fuzz runs (libFuzzer + ASan + UBSan)"
pkgs=(clang-14 libclang-rt-14-dev)
install_missing
build build-fuzz -DCMAKE_C_COMPILER=clang-14 -DKVT_FUZZ=ON -DKVT_BUILD_TESTS=OFF -DKVT_WITH_CUDA=OFF
(cd build-fuzz && ctest --output-on-failure -j"$jobs" -R '^fuzz_')

# The Python binding's tests (tests/python) against build/libkvtier.so. Debian's
# python3 (not whatever python3 is first on PATH) because Debian's torch is
# built for it; a venv that sees the system packages (torch, numpy, pytest)
# holds transformers, which Debian does not package. The pin is the newest
# release that runs on Debian's torch 1.13: 4.46+ imports torch.distributed.fsdp
# from generate(), which fails on torch 1.13 under Python 3.11.
echo "setup: Python binding tests"
pkgs=(python3 python3-venv python3-pip python3-numpy python3-torch python3-pytest)
install_missing
transformers_pin=4.45.2
pyvenv=build/pyvenv
[ -x "$pyvenv/bin/python" ] || /usr/bin/python3 -m venv --system-site-packages "$pyvenv"
if ! "$pyvenv/bin/python" -c "import sys, transformers; sys.exit(transformers.__version__ != '$transformers_pin')" 2>/dev/null; then
  PIP_NO_INPUT=1 "$pyvenv/bin/python" -m pip install -q --disable-pip-version-check "transformers==$transformers_pin"
fi
# Exit 5 (no tests collected) is a failure like any other non-zero status.
py_rc=0
KVTIER_LIB="$top/build/libkvtier.so" "$pyvenv/bin/python" -m pytest tests/python -q || py_rc=$?
if [ "$py_rc" -ne 0 ]; then
  echo "setup: Python tests failed (pytest exit $py_rc$([ "$py_rc" -eq 5 ] && echo ': no tests collected'))" >&2
  exit "$py_rc"
fi

# pip install of this clone into a fresh venv, then import kvtier with no
# KVTIER_LIB and open an engine (tests/packaging/pip_install.sh, pyproject.toml).
echo "setup: pip install into a fresh venv"
tests/packaging/pip_install.sh /usr/bin/python3

# The engine plug-ins (kvtier.lmcache, kvtier.sglang, kvtier.vllm) loaded by
# the pinned engines themselves, in the engines' venv (tools/engines-venv.sh:
# outside the clone, installed once, reused by later clones).
echo "setup: engine plug-in tests (LMCache, SGLang, vLLM)"
engines_venv=$(tools/engines-venv.sh)
eng_rc=0
KVTIER_LIB="$top/build/libkvtier.so" "$engines_venv/bin/python" -m pytest tests/engines -q || eng_rc=$?
if [ "$eng_rc" -ne 0 ]; then
  echo "setup: engine plug-in tests failed (pytest exit $eng_rc$([ "$eng_rc" -eq 5 ] && echo ': no tests collected'))" >&2
  exit "$eng_rc"
fi
