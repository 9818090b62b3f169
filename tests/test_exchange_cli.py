"""``marketsched exchange ...`` end to end in one process (no ``run``: orders, a clearing
driven through the Python API on the same database, then the inspection commands)."""

from __future__ import annotations

import json

import pytest
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


def _cleared(tmp_path, runner):
    """An exchange with deposits, alice's request cleared against p1's offer and delivered:
    alice paid 14 (9 - 0.5 * 4 per CPU-slot, 2 slots), p1 got 14."""
    data = tmp_path / "ex"
    _ok(runner, "init", data, "--slot-seconds", 1000, "--period-seconds", 1000, "--mechanism", "k-pricing",
        "--k", 0.5, "--deposits")
    _ok(runner, "join", data, "p1")
    _ok(runner, "node", data, "p1", "n0", "--cpu", 1, "--mem", 100, "--cpus", "0")
    _ok(runner, "offer", data, "p1", "n0", "--reserve", 5, "--first-slot", 2, "--last-slot", 9)
    _ok(runner, "deposit", data, "alice", 20)
    _ok(runner, "request", data, "alice", "--value", 9, "--cpu", 1, "--first-slot", 3, "--last-slot", 4,
        "--command", "true")
    store = ExchangeStore(data)
    ex = Exchange(store, WallClock(store.settings()["epoch"]), lambda p: FakeBackend(lambda: 0.0))
    ex.clear()
    (c,) = store.contracts()
    ex.settle(c["id"], "delivered", 3000.0, code=0, note="the job exited by itself")
    store.close()
    return data, c["id"]


def test_the_operator_reads_a_partys_balance_and_statement_from_the_ledger(tmp_path):
    runner = CliRunner()
    data, cid = _cleared(tmp_path, runner)
    assert _ok(runner, "balance", data, "--user", "alice") == "alice: 6 (committed 0, available 6)\n"
    assert _ok(runner, "balance", data, "--provider", "p1") == "p1: 14\n"
    everyone = _ok(runner, "balance", data)
    assert [ln.split() for ln in everyone.splitlines()] == [
        ["exchange:clearing", "0"], ["external:deposits", "-20"], ["provider:p1", "14"], ["provider:revenue", "0"],
        ["user:alice", "6"]]
    s = json.loads(_ok(runner, "statement", data, "--user", "alice", "--json"))
    assert (s["role"], s["name"], s["balance"]) == ("user", "alice", 6.0)
    assert [(e["kind"], e["signed"], e["job_id"]) for e in s["entries"]] == [("deposit", 20.0, None),
                                                                               ("user-price", -14.0, cid)]
    assert sum(e["signed"] for e in s["entries"]) == s["balance"]
    text = _ok(runner, "statement", data, "--provider", "p1").splitlines()
    assert text[-1] == "balance 14" and text[0].split()[2:] == ["provider-price", "+14.000000", "contract", str(cid)]
    # the market's statement prints the same columns (the shared printer)
    assert _ok(runner, "statement", data, "--user", "alice", "--limit", 1).splitlines()[-1] == "balance 6"
    for args, why in ((["statement", data], "whose statement?"),
                      (["statement", data, "--user", "zed"], "has no user 'zed'"),
                      (["balance", data, "--provider", "alice"], "has no provider 'alice'"),
                      (["balance", data, "--user", "alice", "--provider", "p1"], "not both"),
                      (["balance"], "give DATA")):
        res = runner.invoke(main, ["exchange", *map(str, args)])
        assert res.exit_code != 0 and why in res.output, (args, res.output)


def test_a_party_asking_the_api_for_anothers_statement_is_refused(tmp_path):
    """The API's statement answers for the token's party only; naming another is a 403 (no
    server: the service the API's route calls)."""
    from marketsched.exchange.api import ExchangeService
    from marketsched.platform.validation import MarketError

    data, cid = _cleared(tmp_path, CliRunner())
    store = ExchangeStore(data)
    service = ExchangeService(store, WallClock(store.settings()["epoch"]))
    try:
        mine = service.statement(("user", "alice"), {"user": "alice"})
        assert (mine["balance"], [e["signed"] for e in mine["entries"]]) == (6.0, [20.0, -14.0])
        assert service.statement(("provider", "p1"), {})["balance"] == 14.0
        for who, q in ((("user", "alice"), {"provider": "p1"}), (("user", "alice"), {"user": "bob"}),
                       (("provider", "p1"), {"user": "alice"}), (("provider", "p1"), {"provider": "p2"})):
            with pytest.raises(MarketError, match="a party sees only its own statement") as e:
                service.statement(who, q)
            assert e.value.status == 403
    finally:
        service.close()
        store.close()


#: What the live market's and the exchange's command lines both name (docs/architecture.md, "One
#: command line"): the same name does the same thing in both.
SHARED = {"serve", "user", "token", "deposit", "cancel", "balance", "statement", "status"}


def test_the_market_and_the_exchange_share_their_command_names():
    from marketsched.exchange.cli import exchange
    from marketsched.live.cli import market

    assert SHARED <= set(market.commands) & set(exchange.commands)
    assert {"add", "token"} <= set(market.commands["user"].commands) & set(exchange.commands["user"].commands)
    # the market's new names are its commands under a second name: the same options
    assert market.commands["token"] is market.commands["user"].commands["token"]
    assert market.commands["status"] is market.commands["price"]
    # both groups' balance and statement print --json; both statements name whose with --user
    for group in (market, exchange):
        opts = {name: {o for p in group.commands[name].params for o in p.opts} for name in ("balance", "statement")}
        assert "--json" in opts["balance"] and {"--json", "--user", "--limit"} <= opts["statement"], group.name


def test_exchange_user_add_and_token_as_the_markets(tmp_path):
    import hashlib

    runner = CliRunner()
    data = tmp_path / "ex"
    _ok(runner, "init", data)
    res = runner.invoke(main, ["exchange", "user", "add", str(data), "alice", "--deposit", "7"])
    assert res.exit_code == 0, res.output
    token = res.stdout.strip()
    assert "user alice created with balance 7" in res.stderr and token in res.stdout
    store = ExchangeStore(data)
    assert store.party(hashlib.sha256(token.encode()).hexdigest()) == ("user", "alice")
    assert store.available("alice")["balance"] == 7_000_000
    again = runner.invoke(main, ["exchange", "user", "add", str(data), "alice"])
    assert again.exit_code != 0 and "has a token already" in again.output
    for args, why in ((["bob", "--deposit", "-1"], "deposit field 'amount'"),
                      (["bob", "--unix", "no-such-account-here"], "no-such-account-here"),
                      (["bad name"], "name")):
        bad = runner.invoke(main, ["exchange", "user", "add", str(data), *args])
        assert bad.exit_code != 0 and why in bad.output, (args, bad.output)
    assert store.rows("SELECT COUNT(*) FROM ex_parties")[0][0] == 1  # a refused add issues nothing
    new = runner.invoke(main, ["exchange", "user", "token", str(data), "alice"]).stdout.strip()
    assert new != token and store.party(hashlib.sha256(new.encode()).hexdigest()) == ("user", "alice")
    assert store.party(hashlib.sha256(token.encode()).hexdigest()) is None
    store.close()
