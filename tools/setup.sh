#!/usr/bin/env bash
# kvtier set-up: installs what is missing (Debian/Ubuntu), builds, and runs.
#
#   tools/setup.sh run    install, build, run the main job
#   tools/setup.sh test   install, build, run every test (and again under
#                         AddressSanitizer + UndefinedBehaviorSanitizer)
#
# Works as root, or as a user with sudo. Build trees: build/ and build-asan/.
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
pkgs=(build-essential cmake pkg-config liburing-dev liblmdb-dev libzstd-dev libcmocka-dev)

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

build build -DKVT_BUILD_TESTS=ON -DKVT_SANITIZE=OFF -DKVT_DEBUG=OFF
(cd build && ctest --output-on-failure -j"$jobs")
echo "setup: the same suite under AddressSanitizer + UndefinedBehaviorSanitizer"
build build-asan -DKVT_BUILD_TESTS=ON -DKVT_SANITIZE=ON -DKVT_DEBUG=ON -DCMAKE_BUILD_TYPE=Debug
(cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
   UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure -j"$jobs")
