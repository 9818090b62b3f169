"""The per-party server limits as command-line options of ``market serve`` and ``exchange
serve``: validated (0 or negative is a clear error naming the option), the server's defaults when
left out, and handed to the server as given. The server's enforcement of the limits is tested
live (tests/test_live_attacks_server.py, tests/test_exchange_api_limits.py,
tests/test_exchange_api_party_options.py)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from marketsched.cli import main
from marketsched.live import server
from marketsched.platform.server import Limits

OPTIONS = ("--max-party-requests", "--max-party-connections")


def _commands(tmp_path):
    data = tmp_path / "ex"
    assert CliRunner().invoke(main, ["exchange", "init", str(data)]).exit_code == 0
    return {"market serve": ["market", "serve", "--data", str(tmp_path / "market"), "--port", "0"],
            "exchange serve": ["exchange", "serve", str(data), "--port", "0", "--for", "0"]}


@pytest.mark.parametrize("value", ["0", "-1", "-64"])
@pytest.mark.parametrize("option", OPTIONS)
def test_zero_or_negative_party_limits_are_refused_naming_the_option(tmp_path, option, value):
    for name, args in _commands(tmp_path).items():
        res = CliRunner().invoke(main, [*args, option, value])
        assert res.exit_code == 2, (name, res.output)
        assert f"Invalid value for '{option}': {value} is not in the range 1<=x<=1000000" in res.output, res.output
        assert "Traceback" not in res.output


class Captured(Exception):
    pass


@pytest.mark.parametrize("given, want", [
    ((), (Limits().max_party_requests, Limits().max_party_connections)),  # the defaults as before
    (("--max-party-requests", "3", "--max-party-connections", "5"), (3, 5)),
    (("--max-party-connections", "7"), (Limits().max_party_requests, 7)),
])
def test_party_limits_reach_the_server(tmp_path, monkeypatch, given, want):
    """Each command builds its server with the limits given (the server is replaced by one that
    records its limits and refuses to listen, so no port is opened)."""
    seen: list[Limits] = []

    def record(*args, limits=None, **kwargs):
        seen.append(limits or Limits())
        raise OSError("not listening in this test")

    from marketsched.exchange import api  # imported first: its server is a MarketServer

    monkeypatch.setattr(server, "MarketServer", record)
    monkeypatch.setattr(api, "ExchangeServer", record)
    for name, args in _commands(tmp_path).items():
        res = CliRunner().invoke(main, [*args, *given])
        assert res.exit_code == 1 and "not listening in this test" in res.output, (name, res.output)
    assert [(lim.max_party_requests, lim.max_party_connections) for lim in seen] == [want, want]


def test_the_help_states_the_servers_defaults():
    for args in (["market", "serve"], ["exchange", "serve"]):
        text = " ".join(CliRunner().invoke(main, [*args, "--help"]).output.split())
        assert f"else HTTP 429 [default: {Limits().max_party_connections}]" in text
        assert f"more: HTTP 429 [default: {Limits().max_party_requests}]" in text
