import gzip
import hashlib
import os
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
from click.testing import CliRunner

from marketsched.workloads import registry
from marketsched.workloads.cli import traces
from marketsched.workloads.registry import (
    ChecksumError,
    TraceInfo,
    TraceNotFoundError,
    UnverifiedTraceWarning,
    load_trace,
    resolve_trace,
    trace_info,
)

SWF = "; MaxProcs: 4\n1 0 0 10 1 -1 -1 1 60 -1 1 1 1 -1 1 -1 -1 -1\n2 5 0 20 2 -1 -1 2 60 -1 1 1 1 -1 1 -1 -1 -1\n"


@pytest.fixture(autouse=True)
def no_network(monkeypatch, tmp_path):
    """No test may reach the network, and none may see the developer's own folders."""

    def refuse(*args, **kwargs):
        raise AssertionError("a test tried to open a network connection")

    monkeypatch.setattr(urllib.request, "urlopen", refuse)
    monkeypatch.delenv(registry.ENV_TRACES, raising=False)
    monkeypatch.setenv(registry.ENV_CACHE, str(tmp_path / "default-cache"))


@pytest.fixture
def small_trace(tmp_path):
    """A small gzipped SWF file, and a registry entry TEST-1 whose sha256 matches it."""
    src = tmp_path / "source" / "TEST-1.swf.gz"
    src.parent.mkdir()
    src.write_bytes(gzip.compress(SWF.encode()))
    return src, hashlib.sha256(src.read_bytes()).hexdigest()


def register(monkeypatch, sha256, name="TEST-1"):
    info = TraceInfo(name, f"{name}.swf.gz", f"https://example.invalid/l_test/{name}.swf.gz", sha256, 2, 4)
    monkeypatch.setitem(registry._LOOKUP, name.lower(), info)
    monkeypatch.setitem(registry.TRACES, name, info)
    return info


def fake_download(monkeypatch, src, calls=None):
    def fetch(url, dest, progress=True):
        if calls is not None:
            calls.append(url)
        shutil.copyfile(src, dest)

    monkeypatch.setattr(registry, "_fetch", fetch)


def offline(monkeypatch):
    def fetch(url, dest, progress=True):
        raise urllib.error.URLError("Name or service not known")

    monkeypatch.setattr(registry, "_fetch", fetch)


# ------------------------------------------------------------------ the registry table
def test_every_shared_file_is_registered_with_its_checksum_and_address():
    lpc = trace_info("LPC-EGEE-2004-1.2-cln")
    assert lpc is trace_info("LPC-EGEE-2004-1.2-cln.swf.gz") is trace_info("lpc-egee-2004-1.2-CLN.swf")
    assert lpc.sha256 == "2fc37df5cc14c355fc7a88235f72e54fdf5f0d93de09399d015383ee5c35a59d"
    assert lpc.url == "https://www.cs.huji.ac.il/labs/parallel/workload/l_lpc/LPC-EGEE-2004-1.2-cln.swf.gz"
    assert (lpc.jobs, lpc.procs) == (234_889, 140)
    known = [t for t in registry.TRACES.values() if t.sha256]
    assert len(known) == 17
    assert all(len(t.sha256) == 64 and t.url.startswith(registry.ARCHIVE + "/l_") for t in known)
    assert trace_info("LCG-2005-1") is trace_info("LCG.swf.gz")
    for name in ("DAS2-fs4-2003-1", "DAS2-fs0-2003-1", "SHARCNET-2005-2"):
        assert trace_info(name).sha256 is None
        assert "/l_das2/" in trace_info(name).url or "/l_sharcnet/" in trace_info(name).url


@pytest.mark.trace
def test_registry_matches_shared_sha256sums(trace_path):
    """The registry's checksums are those of the SHA256SUMS next to the shared trace files."""
    sums = {}
    path = trace_path("KTH-SP2-1996-2.1-cln").parent / "SHA256SUMS"
    try:
        with open(path) as fh:
            for line in fh:
                sha, name = line.split()
                sums[name] = sha
    except FileNotFoundError:
        pytest.skip(f"{path} not available")
    assert {n: trace_info(n).sha256 for n in sums} == sums


def test_unknown_name():
    with pytest.raises(KeyError, match="unknown trace 'NOPE'"):
        trace_info("NOPE")
    with pytest.raises(TraceNotFoundError, match="neither an existing file nor a known trace"):
        resolve_trace("NOPE")


# ------------------------------------------------------------------ resolution order
def test_existing_path_is_used_as_is(tmp_path):
    p = tmp_path / "mine.swf"
    p.write_text(SWF)
    assert resolve_trace(p) == p and resolve_trace(str(p)) == p
    assert len(load_trace(p)) == 2


def test_traces_folder_then_cache_then_download(tmp_path, monkeypatch, small_trace):
    src, sha = small_trace
    register(monkeypatch, sha)
    calls = []
    fake_download(monkeypatch, src, calls)
    folder, cache = tmp_path / "folder", tmp_path / "cache"
    folder.mkdir()
    # 1. nothing local: downloaded into the cache, atomically, no temporary file left
    got = resolve_trace("TEST-1", traces_dir=folder, cache_dir=cache)
    assert got == cache / "TEST-1.swf.gz" and got.read_bytes() == src.read_bytes()
    assert calls == ["https://example.invalid/l_test/TEST-1.swf.gz"]
    assert [p.name for p in cache.iterdir()] == ["TEST-1.swf.gz"]
    # 2. cached: no second download
    assert resolve_trace("TEST-1.swf.gz", traces_dir=folder, cache_dir=cache) == got and len(calls) == 1
    # 3. the traces folder wins over the cache, found through the environment variable too
    shutil.copyfile(src, folder / "TEST-1.swf.gz")
    assert resolve_trace("TEST-1", traces_dir=folder, cache_dir=cache) == folder / "TEST-1.swf.gz"
    monkeypatch.setenv(registry.ENV_TRACES, str(folder))
    monkeypatch.setenv(registry.ENV_CACHE, str(cache))
    assert resolve_trace("TEST-1") == folder / "TEST-1.swf.gz"
    assert len(load_trace("TEST-1")) == 2 and len(calls) == 1


def test_download_checksum_mismatch_keeps_nothing(tmp_path, monkeypatch, small_trace):
    src, _ = small_trace
    register(monkeypatch, "0" * 64)
    fake_download(monkeypatch, src)
    cache = tmp_path / "cache"
    with pytest.raises(ChecksumError, match="sha256 is .* expected 0000") as err:
        resolve_trace("TEST-1", cache_dir=cache)
    assert "example.invalid" in str(err.value)
    assert list(cache.iterdir()) == []


def test_offline_error_says_what_was_tried_and_what_to_do(tmp_path, monkeypatch, small_trace):
    _, sha = small_trace
    register(monkeypatch, sha)
    offline(monkeypatch)
    cache = tmp_path / "cache"
    with pytest.raises(TraceNotFoundError) as err:
        resolve_trace("TEST-1", cache_dir=cache)
    msg = str(err.value)
    assert "MARKETSCHED_TRACES not set" in msg and str(cache) in msg
    assert "Name or service not known" in msg and "download the file by hand" in msg
    assert [p.name for p in cache.iterdir()] == []


def test_no_download_option(tmp_path, monkeypatch, small_trace):
    _, sha = small_trace
    register(monkeypatch, sha)
    with pytest.raises(TraceNotFoundError, match="downloading is off"):
        resolve_trace("TEST-1", cache_dir=tmp_path / "c", download=False)


def test_unknown_checksum_warns_with_computed_sha(tmp_path, monkeypatch, small_trace):
    src, sha = small_trace
    register(monkeypatch, None)
    fake_download(monkeypatch, src)
    with pytest.warns(UnverifiedTraceWarning, match=sha):
        got = resolve_trace("TEST-1", cache_dir=tmp_path / "cache")
    assert got.is_file()


def test_verify_checks_local_files_only_when_asked(tmp_path, monkeypatch, small_trace):
    src, _ = small_trace
    register(monkeypatch, "f" * 64)
    folder = tmp_path / "folder"
    folder.mkdir()
    shutil.copyfile(src, folder / "TEST-1.swf.gz")
    assert resolve_trace("TEST-1", traces_dir=folder) == folder / "TEST-1.swf.gz"  # trusted
    with pytest.raises(ChecksumError, match="expected ffff"):
        resolve_trace("TEST-1", traces_dir=folder, verify=True)


@pytest.mark.trace
def test_real_trace_sha256_verified(trace_path):
    path = trace_path("KTH-SP2-1996-2.1-cln")
    assert resolve_trace("KTH-SP2-1996-2.1-cln", traces_dir=path.parent, verify=True) == path
    assert registry.sha256_file(path) == trace_info("KTH-SP2-1996-2.1-cln").sha256


# ------------------------------------------------------------------ command line
def test_cli_list_path_fetch(tmp_path, monkeypatch, small_trace):
    src, sha = small_trace
    register(monkeypatch, sha)
    folder, cache = tmp_path / "folder", tmp_path / "cache"
    folder.mkdir()
    shutil.copyfile(src, folder / "TEST-1.swf.gz")
    runner = CliRunner()
    res = runner.invoke(traces, ["list", "--traces-dir", str(folder), "--cache-dir", str(cache)])
    assert res.exit_code == 0, res.output
    assert "LPC-EGEE-2004-1.2-cln" in res.output and "234,889" in res.output
    row = next(line for line in res.output.splitlines() if "TEST-1" in line)
    assert "here" in row
    assert "remote" in next(line for line in res.output.splitlines() if "KTH-SP2" in line)

    res = runner.invoke(traces, ["path", "TEST-1", "--traces-dir", str(folder)])
    assert res.exit_code == 0 and res.output.strip() == str(folder / "TEST-1.swf.gz")

    fake_download(monkeypatch, src)
    res = runner.invoke(traces, ["fetch", "TEST-1", "--cache-dir", str(cache)])
    assert res.exit_code == 0, res.output
    assert res.output.strip().endswith(str(cache / "TEST-1.swf.gz"))
    res = runner.invoke(traces, ["list", "--traces-dir", str(tmp_path / "empty"), "--cache-dir", str(cache)])
    assert "cached" in next(line for line in res.output.splitlines() if "TEST-1" in line)


def test_cli_errors(tmp_path, monkeypatch, small_trace):
    _, sha = small_trace
    register(monkeypatch, sha)
    offline(monkeypatch)
    runner = CliRunner()
    res = runner.invoke(traces, ["fetch", "TEST-1", "--cache-dir", str(tmp_path / "c")])
    assert res.exit_code != 0 and "could not download" in res.output
    res = runner.invoke(traces, ["fetch", "NOPE"])
    assert res.exit_code != 0 and "unknown trace" in res.output
    res = runner.invoke(traces, ["path", "TEST-1", "--no-download", "--cache-dir", str(tmp_path / "c")])
    assert res.exit_code != 0 and "downloading is off" in res.output


@pytest.mark.parametrize("columns", [100, 132])
def test_cli_list_fits_the_terminal(columns):
    """`traces list` on a terminal of COLUMNS columns: no line wider, every name whole on its row."""
    env = {**os.environ, "TTY_COMPATIBLE": "1", "COLUMNS": str(columns)}
    env.pop("NO_COLOR", None)
    out = subprocess.run([sys.executable, "-m", "marketsched.cli", "traces", "list"], capture_output=True, text=True,
                         env=env, check=True).stdout
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in out.splitlines()]
    assert max(map(len, lines)) <= columns
    for name in registry.TRACES:
        assert any(f" {name} " in line for line in lines), name
