"""The cache of parsed trace columns: identical to a fresh parse, keyed by content, never trusted blindly."""

import gzip
import os

import numpy as np
import pytest

from marketsched.workloads import column_cache
from marketsched.workloads.column_cache import ENV_COLUMN_CACHE, cache_file, column_cache_dir, read_cached
from marketsched.workloads.registry import load_trace
from marketsched.workloads.swf import SWF_FIELDS, SwfFormatError, read_swf

HEADER = "; Version: 2.2\n; MaxProcs: 8\n; Note: one\n; Note: two\n; free text\n"
LINES = ["1 0 5 100 1 -1 -1 1 3600 -1 1 7 1 -1 2 -1 -1 -1",
         "2 10 0 -1 0 12.75 -1 4 -1 -1 5 8 1 -1 2 -1 -1 -1",
         "3 20 1 0 2 -0.5 -1 2 60 -1 1 7 1 -1 2 -1 -1 -1"]


def write(path, lines=LINES, header=HEADER):
    path.write_bytes(gzip.compress((header + "\n".join(lines) + "\n").encode()))
    return path


def assert_same_log(a, b):
    for f in SWF_FIELDS:
        assert a[f].dtype == b[f].dtype and a[f].tobytes() == b[f].tobytes(), f
    assert a.header == b.header and a.header_lines == b.header_lines and a.comments == b.comments
    assert a.path == b.path


def entries(folder):
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_round_trip_is_identical_to_a_fresh_parse(tmp_path):
    path, cache = write(tmp_path / "t.swf.gz"), tmp_path / "cache"
    first = read_cached(path, cache)  # parsed, then stored
    assert entries(cache) and all(name.endswith(".columns") for name in entries(cache))  # no temporary file left
    calls = []
    real = column_cache.read_swf
    column_cache.read_swf = lambda *a, **k: calls.append(a) or real(*a, **k)
    try:
        second = read_cached(path, cache)  # from the cache: no parse
    finally:
        column_cache.read_swf = real
    assert calls == []
    fresh = read_swf(path)
    assert_same_log(first, fresh)
    assert_same_log(second, fresh)
    assert second.header["Note"] == "one\ntwo" and second.comments == ["free text"] and second.max_procs == 8


def test_a_cached_column_written_to_changes_this_copy_only(tmp_path):
    """The cached columns are mapped from the file copy-on-write: a caller may change them (as it
    could change parsed ones) without the change reaching the cache file or the next read."""
    path, cache = write(tmp_path / "t.swf.gz"), tmp_path / "cache"
    read_cached(path, cache)
    stored = cache_file(cache, column_cache._sha256(path.read_bytes())).read_bytes()
    log = read_cached(path, cache)
    log["run_time"][:] = 99.0
    log["job_number"][0] = 7
    assert cache_file(cache, column_cache._sha256(path.read_bytes())).read_bytes() == stored
    assert_same_log(read_cached(path, cache), read_swf(path))


def test_a_changed_file_is_parsed_again(tmp_path):
    path, cache = write(tmp_path / "t.swf.gz"), tmp_path / "cache"
    assert len(read_cached(path, cache)) == 3
    write(path, LINES[:2])
    log = read_cached(path, cache)
    assert len(log) == 2
    assert_same_log(log, read_swf(path))
    assert len(entries(cache)) == 2  # one entry per version of the file


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty", "extra", "other_log", "header_not_an_object"])
def test_a_damaged_cache_file_is_ignored_and_rewritten(tmp_path, damage):
    path, cache = write(tmp_path / "t.swf.gz"), tmp_path / "cache"
    read_cached(path, cache)
    (entry,) = cache.iterdir()
    if damage == "truncate":
        entry.write_bytes(entry.read_bytes()[: entry.stat().st_size // 2])
    elif damage == "garbage":
        entry.write_bytes(b"not a cache file at all")
    elif damage == "extra":
        entry.write_bytes(entry.read_bytes() + b"\0" * 8)
    elif damage == "empty":
        entry.write_bytes(b"")
    elif damage == "header_not_an_object":  # the right magic and length, but a JSON list as header
        from marketsched.workloads.column_cache import MAGIC

        entry.write_bytes(MAGIC + (2).to_bytes(8, "little") + b"[]")
    else:  # a sound cache file of another log, under this log's name
        other = write(tmp_path / "o.swf.gz", LINES[:1])
        read_cached(other, cache)
        other_entry = next(p for p in cache.iterdir() if p != entry)
        os.replace(other_entry, entry)
    log = read_cached(path, cache)
    assert_same_log(log, read_swf(path))
    assert_same_log(read_cached(path, cache), read_swf(path))  # the rewritten entry is sound


def test_a_column_with_the_wrong_type_is_not_trusted(tmp_path):
    path, cache = write(tmp_path / "t.swf.gz"), tmp_path / "cache"
    log = read_cached(path, cache)
    (entry,) = cache.iterdir()
    data = entry.read_bytes()
    f8, f4 = b'["run_time", "<f8"]', b'["run_time", "<f4"]'
    assert data.count(f8) == 1
    entry.write_bytes(data.replace(f8, f4))  # the header says float32 (the bytes would read as garbage)
    assert read_cached(path, cache).run_time.dtype == np.float64
    assert_same_log(read_cached(path, cache), log)


def test_a_malformed_log_is_never_cached(tmp_path):
    path, cache = write(tmp_path / "bad.swf.gz", [*LINES, "4 30 0 ten 1 -1 -1 1 60 -1 1 7 1 -1 2 -1 -1 -1"]), tmp_path / "c"
    with pytest.raises(SwfFormatError, match="line 9"):
        read_cached(path, cache)
    assert entries(cache) == []


def test_the_environment_variable_moves_or_disables_the_cache(tmp_path, monkeypatch):
    path = write(tmp_path / "t.swf.gz")
    monkeypatch.setenv(ENV_COLUMN_CACHE, str(tmp_path / "here"))
    assert column_cache_dir() == tmp_path / "here"
    load_trace(path)
    assert len(entries(tmp_path / "here")) == 1
    for off in ("off", "0", ""):
        monkeypatch.setenv(ENV_COLUMN_CACHE, off)
        assert column_cache_dir() is None
    monkeypatch.setenv(ENV_COLUMN_CACHE, str(tmp_path / "there"))
    load_trace(path, column_cache=False)
    assert entries(tmp_path / "there") == []
    monkeypatch.delenv(ENV_COLUMN_CACHE)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert column_cache_dir() == tmp_path / "home" / ".cache" / "marketsched" / "columns"


def test_an_unwritable_cache_folder_only_costs_a_parse(tmp_path):
    path = write(tmp_path / "t.swf.gz")
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the cache folder should be")
    assert_same_log(read_cached(path, blocker / "cache"), read_swf(path))


def test_cache_file_name_holds_the_content_hash_and_format(tmp_path):
    import hashlib

    path = write(tmp_path / "t.swf.gz")
    read_cached(path, tmp_path / "c")
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    assert entries(tmp_path / "c") == [cache_file(tmp_path / "c", sha).name]


@pytest.mark.trace
def test_real_trace_through_the_cache_is_identical(tmp_path, trace_path):
    path = trace_path("SDSC-SP2-1998-4.2-cln")
    read_cached(path, tmp_path)
    assert_same_log(read_cached(path, tmp_path), read_swf(path))
