#!/usr/bin/env bash
# The engines' venv: the Python environment in which kvtier's engine plug-ins
# (kvtier.lmcache, kvtier.sglang, kvtier.vllm) are tested against the pinned
# releases of the engines themselves (tests/engines, tools/setup.sh test).
#
#   tools/engines-venv.sh          make or refresh the venv; prints its path
#
# Where: $KVT_ENGINES_VENV, else $XDG_CACHE_HOME/kvtier-dev/engines-venv, else
# ~/.cache/kvtier-dev/engines-venv. Outside the clone on purpose: the venv is
# about 10 GB and takes minutes to install, and every fresh clone of the
# repository (CI makes one per run) reuses it.
#
# Idempotent: <venv>/.kvtier-ready holds the pins of a finished install, and
# a call whose pins match it returns at once. Anything else (no venv, an
# interrupted install, other pins) installs what the pins say. Concurrent
# calls are serialised by a lock file beside the venv.
#
# One venv holds all three engines: vllm 0.33.0 itself requires torch
# 2.14.0, which LMCache 0.5.6 and SGLang 0.5.23 also run on. vllm is
# installed with its dependencies; LMCache and SGLang with --no-deps (their
# full requirements pull CUDA-only and service packages that the storage
# layers never import) plus the pure-Python packages their storage modules
# import, pinned below. Packages come from PyPI only.
set -euo pipefail

venv=${KVT_ENGINES_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/kvtier-dev/engines-venv}
python=${KVT_ENGINES_PYTHON:-/usr/bin/python3}

# Installed with their dependencies.
with_deps=(torch==2.14.0 vllm==0.33.0 pytest==8.3.5)
# Installed without: the engines whose own requirement lists are not needed.
no_deps=(lmcache==0.5.6 sglang==0.5.23)
pip_pin=pip==24.3.1
# What those import on the paths kvtier plugs into and vllm does not bring.
# (LMCache: sortedcontainers, aiofile; SGLang: IPython (sglang.utils) and gguf,
# both found missing on import.)
extra=(sortedcontainers==2.4.0 aiofile==3.12.3 caio==0.12.10 ipython==9.18.1 gguf==0.19.0)

pins=$(printf '%s\n' "python=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" \
       "$pip_pin" "with-deps: ${with_deps[*]}" "no-deps: ${no_deps[*]}" "extra: ${extra[*]}")
marker=$venv/.kvtier-ready

if [ -f "$marker" ] && [ "$(cat "$marker")" = "$pins" ] && [ -x "$venv/bin/python" ]; then
  echo "$venv"
  exit 0
fi

mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9
# Another call may have finished the install while this one waited.
if [ -f "$marker" ] && [ "$(cat "$marker")" = "$pins" ] && [ -x "$venv/bin/python" ]; then
  echo "$venv"
  exit 0
fi

echo "engines-venv: installing the engines into $venv (about 10 GB, several minutes)" >&2
rm -f "$marker"
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check --no-input)
# Debian 12's venv pip (23.0) fails resolving vllm's tree after replacing
# setuptools ("expected string or bytes-like object, got 'NoneType'").
"${pip[@]}" "$pip_pin" >&2
"${pip[@]}" "${with_deps[@]}" >&2
"${pip[@]}" --no-deps "${no_deps[@]}" >&2
[ ${#extra[@]} -eq 0 ] || "${pip[@]}" "${extra[@]}" >&2

# Import what the tests drive: a missing dependency fails here, named,
# rather than as a skipped or failed test later.
"$venv/bin/python" - >&2 <<'EOF'
import importlib
for m in ("torch", "pytest",
          "lmcache.v1.storage_backend.storage_manager",
          "vllm.v1.kv_offload.tiering.spec",
          "sglang.srt.mem_cache.hicache_storage"):
    importlib.import_module(m)
EOF

printf '%s\n' "$pins" > "$marker.tmp"
mv "$marker.tmp" "$marker"
echo "$venv"
