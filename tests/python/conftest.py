"""Shared fixtures for the Python tests of kvtier.

The package is imported from bindings/python (no install step); the library is
whatever kvtier's lookup finds: KVTIER_LIB, else the repository's build/.
"""

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BINDINGS = REPO / "bindings" / "python"
HEADER = REPO / "include" / "kvtier.h"
sys.path.insert(0, str(BINDINGS))

import kvtier  # noqa: E402

PAGE = 4096


@pytest.fixture
def make_engine(tmp_path):
    """Opens engines (small host-back-end defaults, SSD in tmp_path) and
    closes them at the end of the test."""
    opened = []

    def make(**kw):
        cfg = dict(page_bytes=PAGE, hbm_bytes=4 * PAGE, dram_bytes=4 * PAGE,
                   ssd_bytes=64 * PAGE, ssd_dir=str(tmp_path / "ssd"), device="host")
        cfg.update(kw)
        e = kvtier.Engine(**cfg)
        opened.append(e)
        return e

    yield make
    for e in opened:
        e.close()


def subprocess_env():
    """Environment for a child python that imports the package the same way."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(BINDINGS) + os.pathsep + env.get("PYTHONPATH", "")
    return env
