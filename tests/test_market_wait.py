"""`marketsched market wait` without a broker: a ready file left by a broker that is gone
(kill -9) is not taken for a ready market, and the wait ends with a message at its timeout."""

from __future__ import annotations

import json
import subprocess
import sys

from click.testing import CliRunner

from marketsched.live.cli import _remove_ready, market


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_a_stale_ready_file_is_not_a_ready_market(tmp_path):
    (tmp_path / "ready").write_text(json.dumps({"pid": _dead_pid(), "url": "http://127.0.0.1:9", "socket": "x"}))
    r = CliRunner().invoke(market, ["wait", "--data", str(tmp_path), "--timeout", "0.3"])
    assert r.exit_code == 1 and f"no market became ready in {tmp_path} within 0.3 s" in r.output
    _remove_ready(tmp_path, stale_only=True)  # a starting broker removes it
    assert not (tmp_path / "ready").exists()


def test_a_second_serve_leaves_the_running_brokers_ready_file(tmp_path):
    import os

    (tmp_path / "ready").write_text(json.dumps({"pid": os.getpid(), "url": "http://127.0.0.1:9", "socket": "x"}))
    _remove_ready(tmp_path, stale_only=True)
    assert (tmp_path / "ready").exists()
