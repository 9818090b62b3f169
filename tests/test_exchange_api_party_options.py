"""``exchange serve --max-party-requests`` / ``--max-party-connections`` on a real server process:
one party's slow bodies hold at most the number of requests or connections the operator gave
(the defaults are 16 and 64), and the other parties are served meanwhile. The check is by order,
not by a bound in seconds (tests/test_live_attacks_server.py)."""

from __future__ import annotations

import socket
import subprocess
import sys
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from live_helpers import flood_and_call, health, request, wait_for
from marketsched.cli import main
from marketsched.live.cli import Client


def _cli(*args) -> str:
    res = CliRunner().invoke(main, ["exchange", *map(str, args)])
    assert res.exit_code == 0, res.output
    return res.output


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _answers(port) -> bool:
    try:
        return health(port, timeout=2)[0] == 200
    except OSError:
        return False


@pytest.mark.parametrize("option, most", [("--max-party-requests", 2), ("--max-party-connections", 3)])
def test_exchange_serve_holds_one_party_to_the_limit_it_is_given(tmp_path, option, most):
    data = tmp_path / "ex"
    _cli("init", data)
    tokens = {name: _cli("token", data, name, "--user").strip().split()[-1] for name in ("alice", "bob")}
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "marketsched.cli", "exchange", "serve", str(data), "--port", str(port),
                             option, str(most), "--for", "600"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        assert wait_for(lambda: _answers(port) or proc.poll() is not None, 60) and proc.poll() is None, \
            proc.stderr.read().decode() if proc.poll() is not None else "no answer"
        head = request("POST", "/api/requests", b"", tokens["alice"]).replace(
            b"Content-Length: 0", b"Content-Length: 100") + b'{"value"'
        bob = Client(f"http://127.0.0.1:{port}", tokens["bob"], timeout=120)  # a guard against a hang
        calls = [lambda: bob.get("/api/orders"), lambda: Client(f"http://127.0.0.1:{port}").get("/api/market"),
                 lambda: health(port)[0]]
        got = flood_and_call(SimpleNamespace(port=port), head, calls, most)  # at most `most` bodies waited for
        assert got[0] == [] and got[-1] == 200
    finally:
        proc.terminate()
        proc.wait(60)
