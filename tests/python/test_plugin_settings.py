"""The engine plug-ins' settings (kvtier._plugin.read_settings) and default
spill directory, which need no engine installed: every value given as text
follows an ASCII grammar, a bad one is refused naming the setting and the
value, and an empty HOME never puts the spill directory at the root."""

import pytest

from kvtier import _plugin

PREFIX = "storage_plugin.kvtier."


@pytest.mark.parametrize("value", ["\u00b2", "\u0663", "\uff11", "1\u00b2", "-1", "1.5", "",
                                   1.5, -1, True, [4]])
def test_count_setting_refused_naming_setting_and_value(value):
    with pytest.raises(ValueError) as ei:
        _plugin.read_settings({PREFIX + "queue_depth": value}, prefix=PREFIX)
    text = str(ei.value)
    assert PREFIX + "queue_depth" in text and repr(value) in text


def test_count_setting_ascii_digits():
    assert _plugin.read_settings({"queue_depth": " 64 "}) == {"queue_depth": 64}
    assert _plugin.read_settings({"queue_depth": 8}) == {"queue_depth": 8}


@pytest.mark.parametrize("value", ["\u0663GB", "\uff11GB", "1\u00b2GB", "\u0661\u0662",
                                   "1\u00a0GB", "1.\u0665GiB", "1GB\u2003", "1\uff27B"])
def test_size_with_non_ascii_refused(value):
    with pytest.raises(ValueError) as ei:
        _plugin.read_settings({"dram_bytes": value})
    assert "dram_bytes" in str(ei.value) and repr(value) in str(ei.value)


@pytest.mark.parametrize("value", ["0.5", "0.9B", "0.0001KiB", ".5", "1e9", "1 000"])
def test_size_below_one_byte_or_malformed_refused(value):
    with pytest.raises(ValueError) as ei:
        _plugin.read_settings({"ssd_bytes": value})
    assert "ssd_bytes" in str(ei.value) and repr(value) in str(ei.value)


@pytest.mark.parametrize("value,want", [
    ("0", 0), ("0.0GB", 0), ("4096", 4096), ("1.5", 1), ("1.5KiB", 1536), ("0.3KiB", 307),
    # Exact decimal, then rounded down: a float product gives 4099999999.
    ("4.1GB", 4_100_000_000), ("8.2 MB", 8_200_000), (" 2 gib ", 2 << 30), (512, 512)])
def test_size_grammar(value, want):
    assert _plugin.read_settings({"ssd_bytes": value}) == {"ssd_bytes": want}


@pytest.mark.parametrize("value", ["\u2003true", "\uff54\uff52\uff55\uff45", 1.0, 2, "maybe"])
def test_bool_setting_refused_naming_setting(value):
    with pytest.raises(ValueError) as ei:
        _plugin.read_settings({"persist": value})
    assert "persist" in str(ei.value) and repr(value) in str(ei.value)


def test_empty_home_is_unset(monkeypatch):
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    for home in ("", "relative/home"):
        monkeypatch.setenv("HOME", home)
        with pytest.raises(ValueError, match="HOME.*spill_dir"):
            _plugin.default_spill_dir("vllm", "model=m")
    monkeypatch.delenv("HOME")
    with pytest.raises(ValueError, match="HOME.*spill_dir"):
        _plugin.default_spill_dir("vllm", "model=m")


def test_empty_home_falls_back_to_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", "")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert _plugin.default_spill_dir("lmcache", "model=m", rank=0).startswith(
        str(tmp_path / "kvtier" / "lmcache") + "/")
    # A relative XDG_CACHE_HOME is ignored (the XDG rule); HOME is next.
    monkeypatch.setenv("XDG_CACHE_HOME", "rel")
    monkeypatch.setenv("HOME", str(tmp_path / "h"))
    assert _plugin.default_spill_dir("lmcache", "model=m").startswith(
        str(tmp_path / "h" / ".cache" / "kvtier" / "lmcache") + "/")


def test_tilde_spill_dir_with_empty_home(monkeypatch, tmp_path):
    """"~/kv" with HOME="" would be /kv; it is refused like the default."""
    monkeypatch.setenv("HOME", "")
    with pytest.raises(ValueError, match="HOME"):
        _plugin._expand_home("~/kv")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert _plugin._expand_home("~/kv") == str(tmp_path / "kv")
    assert _plugin._expand_home("/abs/kv") == "/abs/kv"


@pytest.mark.parametrize("url,shown", [
    ("redis://h:1,h:2", "redis://h:1,h:2"),
    ("redis://user:pw@h:1,h:2", "redis://***@h:1,h:2"),
    ("redis://:pw@h:1", "redis://***@h:1"),
    ("redis://pw@h:1", "redis://***@h:1"),
    # kvtier's parser splits at the last '@': a raw '@' is the password's.
    ("redis://user:p@ss@word@h:1", "redis://***@h:1"),
    ("redis://user:pa/ss@h:1", "redis://***@h:1"),
    ("redis://user:p%40ss@h:1", "redis://***@h:1"),
    # Refused at open, but still never shown.
    ("rediss://user:pw@h:1", "rediss://***@h:1"),
])
def test_redact_url_hides_every_part_of_the_credentials(url, shown):
    assert _plugin.redact_url(url) == shown


@pytest.mark.parametrize("given", ["INT4", "Int4", "int4"])
def test_codec_name_any_case_is_the_lossy_codec(given):
    """The Engine takes a codec's name in any case; the plug-ins' own
    checks (a lossy codec needs the layout, a chunk in one page) must see it
    as that codec too, not pass it on without its layout."""
    s = _plugin.read_settings({"codec": given})
    assert s["codec"] == "int4"
    assert _plugin.one_page_for_codec(s, 5000) == 8192
