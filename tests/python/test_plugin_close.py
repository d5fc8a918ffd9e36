"""kvtier._plugin.close_engine, the shutdown of every engine plug-in's kvtier
(tests/engines drive it through vLLM, LMCache and SGLang): a full cache
never makes it raise; with persist, the pages that could not be made
durable are counted in one warning (issue 32)."""

import logging

import pytest

import kvtier
from kvtier import _plugin

PAGE = 8192


@pytest.fixture
def full_engine(tmp_path):
    """make(persist) -> (engine, config): a cache (KVT_FLAG_EVICT) of 25
    pages put 64: kvt_flush finds no room below for what HBM and DRAM hold."""
    def make(persist):
        cfg = dict(page_bytes=PAGE, hbm_bytes=PAGE, dram_bytes=8 * PAGE, ssd_bytes=16 * PAGE,
                   ssd_dir=str(tmp_path / "ssd"), device="host", policy="prefix",
                   persist=persist, fingerprint="full", flags=kvtier.KVT_FLAG_EVICT)
        e = kvtier.Engine(**cfg)
        for i in range(64):
            e.put([(i, 0, 0)], [bytes([i]) * PAGE])
        assert e.stats().evicted_pages > 0
        return e, cfg
    return make


@pytest.fixture
def pages_at_close(monkeypatch):
    """Pages each Engine held right before kvt_close (after close_engine's
    flush): what a reopen with persist can at most find again."""
    seen = []
    real_close = kvtier.Engine.close

    def close(self):
        if not self.closed:
            seen.append(self.stats().pages)
        real_close(self)

    monkeypatch.setattr(kvtier.Engine, "close", close)
    return seen


def test_close_engine_of_a_full_cache(full_engine, caplog):
    e, _ = full_engine(persist=False)
    with caplog.at_level(logging.WARNING, logger="kvtier.test"):
        assert _plugin.close_engine(e, False, logging.getLogger("kvtier.test"), "test") == 0
    assert e.closed and caplog.records == []


def test_close_engine_of_a_full_persisted_cache_warns(full_engine, caplog, pages_at_close):
    e, cfg = full_engine(persist=True)
    with caplog.at_level(logging.WARNING, logger="kvtier.test"):
        lost = _plugin.close_engine(e, True, logging.getLogger("kvtier.test"), "test")
    assert e.closed and len(pages_at_close) == 1
    with kvtier.Engine(**cfg) as again:
        assert lost == pages_at_close[0] - again.stats().pages
    if lost:
        assert [r.getMessage().split(" (")[0] for r in caplog.records] == [
            f"kvtier test: at shutdown {lost} page(s) could not be made durable and will "
            "be missing after a restart"]
    else:
        assert caplog.records == []
