"""Shared fixtures of the engine plug-in tests (test_lmcache.py,
test_sglang.py, test_vllm.py), run with the engines' venv's python
(tools/engines-venv.sh; tools/setup.sh test does both).

The package is imported from bindings/python; the library is whatever
kvtier's lookup finds (KVTIER_LIB, else the repository's build/).
"""

import logging
import os
import shutil
import subprocess
import sys
import textwrap
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BINDINGS = REPO / "bindings" / "python"
sys.path.insert(0, str(BINDINGS))

# The cluster of the sharing tests: 3 masters and 3 replicas on 127.0.0.1
# ports 7400-7405 (cluster bus +10000); this suite's range is 7400-7419, apart
# from tests/CMakeLists.txt's fixtures (7100-7199).
REDIS_PORT_BASE = 7400
REDIS_HARNESS = REPO / "tools" / "redis-cluster.sh"
# Every node requires it: the tests reach the cluster the way a deployment
# is told to (docs/remote.md, "Engines"), the password in remote_auth_file, and
# the '@' in it checks that a URL carrying it never shows any of it.
REDIS_PASSWORD = "kvt@engines-s3cret"


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


@dataclass(frozen=True)
class Cluster:
    """A running test cluster: url (seeds, no credentials), auth_file (the
    password, 0600), password (for the tests that put it into a URL)."""
    url: str
    auth_file: str
    password: str

    def url_with_password(self, password=None, user="default"):
        """url with user:password@ (the password raw, as kvtier accepts it)."""
        return self.url.replace("redis://", f"redis://{user}:{password or self.password}@", 1)

    def settings(self, **more):
        """The plug-in settings that share through this cluster, under a key
        prefix of their own (another test's or run's keys never match)."""
        return dict(remote_url=self.url, remote_auth_file=self.auth_file,
                    remote_prefix=f"kvtier-test-{uuid.uuid4().hex[:12]}",
                    remote_timeout_ms=REMOTE_TIMEOUT_MS, **more)


# A loaded 2-core machine can hold a call past kvtier's default 200 ms, which
# would read as a miss; the close that drains the publish queue waits 4x this.
REMOTE_TIMEOUT_MS = 5000


def _redis_missing(why):
    """The rule of tests/CMakeLists.txt's redis fixtures: skipped without
    redis-server, a failure under CI=true (the CI installs it)."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{why} (CI=true: tools/setup.sh installs redis-server)", pytrace=False)
    pytest.skip(why)


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory):
    """A 3-master + 3-replica Redis Cluster for the whole session, started
    with tools/redis-cluster.sh in a directory of its own and stopped at the
    end (every node by the pid the harness wrote), also when a test failed
    or the start failed half-way. Skips without redis-server (fails when
    CI=true)."""
    if not (shutil.which("redis-server") and shutil.which("redis-cli")):
        _redis_missing("redis-server/redis-cli not installed")
    root = tmp_path_factory.mktemp("redis")
    auth = root / "auth"
    auth.touch(mode=0o600)
    auth.write_text(REDIS_PASSWORD + "\n")
    nodes = root / "cluster"
    try:
        # node-timeout 15 s (Redis's default): a node starved by a busy
        # machine for a second is not failed over in the middle of a test.
        p = subprocess.run([str(REDIS_HARNESS), "start", str(nodes), "--port",
                            str(REDIS_PORT_BASE), "--password-file", str(auth),
                            "--node-timeout", "15000"],
                           capture_output=True, text=True, timeout=240)
        if p.returncode == 77:
            _redis_missing(p.stderr.strip())
        assert p.returncode == 0, f"{REDIS_HARNESS.name} start failed:\n{p.stderr[-4000:]}"
        yield Cluster(url=p.stdout.split()[-1], auth_file=str(auth), password=REDIS_PASSWORD)
    finally:
        subprocess.run([str(REDIS_HARNESS), "stop", str(nodes)], capture_output=True,
                       timeout=120)
