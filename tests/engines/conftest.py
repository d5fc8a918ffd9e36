"""Shared fixtures of the engine plug-in tests (test_lmcache.py,
test_sglang.py, test_vllm.py), run with the engines' venv's python
(tools/engines-venv.sh; tools/setup.sh test does both).

The package is imported from bindings/python; the library is whatever
kvtier's lookup finds (KVTIER_LIB, else the repository's build/).
"""

import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BINDINGS = REPO / "bindings" / "python"
sys.path.insert(0, str(BINDINGS))


@pytest.fixture
def spill_dir(tmp_path):
    """A spill directory path that does not exist yet (kvtier makes it)."""
    return str(tmp_path / "spill")


@pytest.fixture
def run_child():
    """run_child(code) runs code in a fresh interpreter of this venv with
    the same kvtier (a process restart); returns its stdout, fails the test
    with its stderr on a non-zero exit."""
    def run(code, timeout=120):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(BINDINGS), env.get("PYTHONPATH", "")])
        p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                           capture_output=True, text=True, timeout=timeout)
        assert p.returncode == 0, f"child exited {p.returncode}:\n{p.stderr[-4000:]}"
        return p.stdout
    return run


def damage_pages(spill, pattern):
    """Flips bytes where `pattern` (bytes kvtier stored uncompressed) lies in
    the SSD segment files under spill; returns how many places were damaged.
    Only kvtier's own segment files (seg-*.kvt) are touched."""
    hits = 0
    for seg in sorted(Path(spill).glob("seg-*.kvt")):
        data = bytearray(seg.read_bytes())
        at = data.find(pattern)
        while at >= 0:
            data[at] ^= 0xFF
            hits += 1
            at = data.find(pattern, at + len(pattern))
        if hits:
            seg.write_bytes(bytes(data))
    return hits


@pytest.fixture
def pages_at_close(monkeypatch):
    """A list that gets, for every kvtier Engine closed during the test, how
    many pages it held right before kvt_close (after a plug-in's own flush
    at shutdown): what a reopen with persist can at most find again."""
    from kvtier.engine import Engine
    seen = []
    real_close = Engine.close

    def close(self):
        if not self.closed:
            seen.append(self.stats().pages)
        real_close(self)

    monkeypatch.setattr(Engine, "close", close)
    return seen


def assert_loss_reported(records, logger, held_at_close, config):
    """The pages a reopen of config (a plug-in's kvtier_config, persist on)
    no longer finds are exactly the count the plug-in's shutdown warned
    about on logger; none lost, no warning. Returns that count."""
    from kvtier import Engine
    with Engine(**config) as e:
        kept = e.stats().pages
    lost = held_at_close - kept
    warned = [r.getMessage() for r in records
              if r.name == logger and r.levelno == logging.WARNING]
    if lost:
        assert len(warned) == 1, warned
        assert f" {lost} page(s) could not be made durable" in warned[0], warned[0]
    else:
        assert warned == []
    return lost
