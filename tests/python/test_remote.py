"""The shared tier from Python without a cluster (the cluster's own tests
are tests/test_remote_cluster.c and tests/engines/): the settings reach the
engine, bad ones are refused naming the field, an unreachable cluster is a
clear error at open that names the seeds and never the password, and the
counters are there."""

import pytest

import kvtier
from kvtier import _plugin
from kvtier._lib import KvtConfigError, KvtError

PB = 4096


def small(**kw):
    return dict(page_bytes=PB, hbm_bytes=4 * PB, dram_bytes=8 * PB, device="host", **kw)


def test_remote_fields_without_url_refused():
    with pytest.raises(KvtConfigError) as ei:
        kvtier.Engine(**small(remote_prefix="x"))
    assert "remote_url" in str(ei.value)


@pytest.mark.parametrize("url", ["http://127.0.0.1:1", "rediss://127.0.0.1:1", "127.0.0.1:1"])
def test_only_redis_urls(url):
    with pytest.raises(KvtConfigError) as ei:
        kvtier.Engine(**small(remote_url=url))
    assert "redis://" in str(ei.value)


def test_publish_by_name():
    with pytest.raises(ValueError) as ei:
        kvtier.Engine(**small(remote_url="redis://127.0.0.1:1", remote_publish="sometimes"))
    assert "remote_publish" in str(ei.value)


def test_unreachable_cluster_names_seeds_not_password():
    with pytest.raises(KvtError) as ei:
        kvtier.Engine(**small(remote_url="redis://u:s3cret-pw@127.0.0.1:1,127.0.0.1:2",
                              remote_timeout_ms=100))
    text = str(ei.value)
    assert "127.0.0.1:1" in text
    assert "s3cret-pw" not in text


def test_plugin_settings_reach_the_engine_and_logs_hide_the_password(tmp_path):
    s = _plugin.read_settings({"kvtier.remote_url": "redis://:pw-in-url@127.0.0.1:1",
                               "kvtier.remote_timeout_ms": "50",
                               "kvtier.remote_publish": "evict",
                               "kvtier.spill_dir": str(tmp_path / "spill")},
                              prefix="kvtier.", strict=True)
    assert s["remote_timeout_ms"] == 50 and s["remote_publish"] == "evict"
    with pytest.raises(KvtError) as ei:   # nothing listens on port 1
        _plugin.open_engine(s, PB, "model=x", "test")
    assert "pw-in-url" not in str(ei.value)
    assert _plugin.redact_url("redis://u:pw@h:1,h:2") == "redis://***@h:1,h:2"
    assert _plugin.redact_url("redis://h:1") == "redis://h:1"


def test_stats_have_the_remote_counters():
    with kvtier.Engine(**small()) as e:
        st = e.stats()
        assert st.remote_hits == 0 and st.remote_nodes == 0
        with pytest.raises(KvtError):
            e.publish([(1, 0, 0)])   # no shared tier: KVT_ENOTSUP
