"""``marketsched exchange ...`` end to end in one process (no ``run``: orders, a clearing
driven through the Python API on the same database, then the inspection commands)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from exchange_helpers import FakeBackend
from marketsched.cli import main
from marketsched.exchange.core import Exchange
from marketsched.exchange.store import ExchangeStore
from marketsched.platform.clock import WallClock


def _ok(runner, *args):
    res = runner.invoke(main, ["exchange", *map(str, args)])
    assert res.exit_code == 0, res.output
    return res.output


def test_the_exchange_commands(tmp_path):
    runner = CliRunner()
    data = tmp_path / "ex"
    assert "already set up" not in _ok(runner, "init", data, "--slot-seconds", 1000, "--period-seconds", 1000,
                                       "--mechanism", "k-pricing", "--k", 0.5)
    res = runner.invoke(main, ["exchange", "init", str(data)])
    assert res.exit_code != 0 and "already set up" in res.output
    _ok(runner, "join", data, "p1")
    _ok(runner, "node", data, "p1", "n0", "--cpu", 1, "--mem", 100, "--cpus", "0")
    assert "offer 1" in _ok(runner, "offer", data, "p1", "n0", "--reserve", 5, "--first-slot", 2, "--last-slot", 9)
    assert "request 2" in _ok(runner, "request", data, "alice", "--value", 9, "--cpu", 1, "--mem", 10,
                              "--first-slot", 3, "--last-slot", 4, "--command", "true")
    bad = runner.invoke(main, ["exchange", "request", str(data), "bob", "--value", "-1", "--cpu", "2",
                               "--first-slot", "3", "--last-slot", "4", "--command", "true"])
    assert bad.exit_code != 0 and "request field 'value'" in bad.output
    bad = runner.invoke(main, ["exchange", "node", str(data), "p1", "n1", "--cpu", "4", "--mem", "1", "--cpus", "x"])
    assert bad.exit_code != 0 and "--cpus" in bad.output
    assert "request 3" in _ok(runner, "request", data, "carol", "--value", 1, "--cpu", 1, "--first-slot", 3,
                              "--last-slot", 3, "--command", "true")
    bad = runner.invoke(main, ["exchange", "cancel", str(data), "alice", "3"])
    assert bad.exit_code != 0 and "'alice' has no order 3" in bad.output
    assert "order 3 cancelled" in _ok(runner, "cancel", data, "carol", 3)
    missing = runner.invoke(main, ["exchange", "status", str(tmp_path / "nothing")])
    assert missing.exit_code != 0 and "no exchange at" in missing.output

    store = ExchangeStore(data)  # the exchange process's part: one clearing, the job delivered
    ex = Exchange(store, WallClock(store.settings()["epoch"]), lambda p: FakeBackend(lambda: 0.0))
    ex.clear()
    (c,) = store.contracts()
    ex.settle(c["id"], "delivered", 3000.0, code=0, note="the job exited by itself")

    status = json.loads(_ok(runner, "status", data, "--json"))
    assert status["contracts"] == {"delivered": 1}
    assert status["balances"]["user:alice"] == -14.0 and status["balances"]["provider:p1"] == 14.0  # (9 - 0.5 * 4) * 1 * 2
    assert "alice p1 n0 3-4 14.000000" in _ok(runner, "contracts", data)
    (period,) = json.loads(_ok(runner, "info", data, "--json"))
    assert (period["contracts"], period["cpu_slots"], period["volume"], period["price"]) == (1, 2, 14.0, 7.0)
    assert period["classes"] == {"1": {"cpu_slots": 2, "price": 7.0}}
    assert period["open_interest"] == 1  # the offer stays open (carol's request was cancelled)
    assert "the same 1 contracts over 1 periods" in _ok(runner, "replay", data)


def test_agents_from_a_config_file(tmp_path):
    runner = CliRunner()
    data = tmp_path / "ex"
    _ok(runner, "init", data, "--slot-seconds", 1000, "--period-seconds", 1000)
    _ok(runner, "join", data, "p1")
    _ok(runner, "node", data, "p1", "n0", "--cpu", 1, "--mem", 100)
    config = tmp_path / "agents.json"
    config.write_text(json.dumps({
        "providers": [{"provider": "p1", "costs": {"n0": 5}, "markup": 1.5, "horizon": 10, "renew": 2}],
        "users": [{"user": "alice", "jobs": [{"value": 9, "cpu": 2, "mem": 10, "duration": 2, "release": 3,
                                               "deadline": 8, "command": "true"}]}]}))
    assert "2 agents" in _ok(runner, "agents", data, config, "--for", 0)
    store = ExchangeStore(data)
    (offer,) = store.orders("offer")
    (req,) = store.orders("request")
    assert (offer["value"], offer["first_slot"], offer["last_slot"]) == (7.5, 1, 10)
    assert (req["owner"], req["value"], req["first_slot"], req["last_slot"]) == ("alice", 9.0, 3, 4)
    config.write_text(json.dumps({"users": [{"user": "bob", "jobs": [{"value": 1}]}]}))
    bad = runner.invoke(main, ["exchange", "agents", str(data), str(config), "--for", "0"])
    assert bad.exit_code != 0 and "missing field 'cpu'" in bad.output
