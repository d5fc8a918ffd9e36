#!/usr/bin/env bash
# pip install of this repository into a fresh venv, then `import kvtier`
# with no KVTIER_LIB, from outside the repository: the library must be the
# one the wheel put inside the package, and an engine must open on it.
#
#   tests/packaging/pip_install.sh [PYTHON]     (default: /usr/bin/python3)
#
# Work files go under $KVT_PIP_WORK (default build/): the venv and the
# CMake tree.
# Downloads only the pinned build backend (pyproject.toml), through pip's
# cache. The CMake tree of the build is kept (pip-wheel), so a second
# run recompiles only what changed.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
py=${1:-/usr/bin/python3}
work=${KVT_PIP_WORK:-$top/build}
venv="$work/pip-fresh-venv"

rm -rf "$venv"
"$py" -m venv "$venv"
PIP_NO_INPUT=1 "$venv/bin/python" -m pip install -q --disable-pip-version-check \
  --config-settings=build-dir="$work/pip-wheel" "$top"

cd "$venv"   # not the repository: bindings/python must not be what is imported
env -u KVTIER_LIB -u PYTHONPATH "$venv/bin/python" - "$venv" <<'PY'
import os, sys
import kvtier
venv = os.path.realpath(sys.argv[1])
lib = os.path.realpath(kvtier.find_library())
pkg = os.path.realpath(os.path.dirname(kvtier.__file__))
assert pkg.startswith(venv + os.sep), f"kvtier imported from {pkg}, not the venv"
assert lib == os.path.join(pkg, "libkvtier.so"), f"libkvtier from {lib}, not the wheel's"
page = bytes(range(256)) * 16
with kvtier.Engine(page_bytes=4096, hbm_bytes=4 * 4096, dram_bytes=4 * 4096, device="host") as e:
    e.put([(1, 0, 0)], [page])
    assert e.get([(1, 0, 0)])[0] == page, "the page read back differs"
print(f"pip install: ok, kvtier {kvtier.version()[1]} from {lib}")
PY
