"""Egg mode live: a real ``marketsched exchange run`` (single-user, containment where the machine
has it) and the API serving the same database; providers post price tables with their tokens
(the library's static agent through ``exchange egg prices``), users bid over HTTP, real jobs run,
the escrow is released at tau* after a delivery and refunded after a provider's fault, the
reliability moves, the books balance and the events replay through the library to the recorded
choices and payments. Every wait is for a recorded fact, bounded generously."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from live_helpers import raw, wait_for
from marketsched.cli import main
from marketsched.exchange import egg
from marketsched.exchange.api import ExchangeServer, ExchangeService, issue_token
from marketsched.exchange.core import Exchange, create_exchange
from marketsched.exchange.store import MICRO, ExchangeStore
from marketsched.live.cli import Client, ClientError
from marketsched.platform.clock import WallClock

HANG = 120.0  # a guard against a hang, not a timing claim


@pytest.fixture
def live(tmp_path):
    """Egg exchange in tmp/ex (slots of 1 s, patience 24 slots, run-time buckets in seconds): p1
    (CPU 0) and p2 (CPU 1), one CPU unit and 256 MiB each; alice with 100 deposited; the API in a
    thread; ``exchange run`` as its own process."""
    data = tmp_path / "ex"
    store = ExchangeStore(data)
    create_exchange(store, slot_seconds=1, period_seconds=1, mechanism="egg", epoch=time.time())
    clock = WallClock(store.settings()["epoch"])
    ex = Exchange(store, clock)
    for name, cpu in (("p1", 0), ("p2", 1)):
        ex.join(name)
        ex.add_node(name, "n0", 1, 256, cpus=[cpu])
    ex.deposit("alice", 100)
    tokens = {name: issue_token(store, role, name, 0.0)
              for role, name in (("user", "alice"), ("user", "bob"), ("provider", "p1"), ("provider", "p2"))}
    service = ExchangeService(ExchangeStore(data), clock)
    srv = ExchangeServer(service, "127.0.0.1", 0)
    srv.serve_in_thread()
    log = open(tmp_path / "run.log", "w")
    run = subprocess.Popen([sys.executable, "-m", "marketsched.cli", "exchange", "run", str(data), "--single-user",
                            "--poll", "0.05"], stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    clients = {name: Client(srv.url, tok) for name, tok in tokens.items()}
    yield ex, srv, clients, tokens, data
    run.terminate()
    run.wait(timeout=30)
    log.close()
    srv.shutdown()
    service.store.close()
    store.close()


def _contract(store, cid):
    return {c["id"]: c for c in egg.contracts(store)}[cid]


def _static(srv, token, data):
    out = CliRunner().invoke(main, ["exchange", "egg", "prices", "--url", srv.url, "--token", token, "--data",
                                    str(data), "--agent", "static", "--rate", "3600"])
    assert out.exit_code == 0, out.output


def test_a_real_job_is_delivered_and_paid_from_escrow_at_tau(live):
    ex, srv, c, tokens, data = live
    _static(srv, tokens["p2"], data)  # 3600 per run-time hour: 300 + 360 = 660 for jobs under 300 s
    c["p1"].post("/api/egg/prices", {"prices": [1.0] * 9 * 50})  # p1's first table: 1 in every cell
    info = c["alice"].get("/api/egg/market")
    assert [p["posted"] for p in info["providers"]] == [True, True]
    with pytest.raises(ClientError, match="may cost up to 1000"):  # more than alice has
        c["alice"].post("/api/egg/bids", {"description": [2], "value": 1000, "deadline": 20, "command": "true"})
    got = c["alice"].post("/api/egg/bids", {"description": [2], "value": 90, "deadline": 40, "command": "echo egg"})
    assert got["scheduled"] and got["provider"] == "p1" and got["price"] == 1.0
    assert got["tau"] >= got["t"] + 2  # the run time's estimate: tau* >= a + r
    cid = got["contract"]
    store = ex.store
    assert wait_for(lambda: _contract(store, cid)["escrow"] != "held", HANG)
    done = _contract(store, cid)
    assert (done["state"], done["escrow"]) == ("delivered", "paid"), done["note"]
    assert done["settled_t"] >= done["tau"]  # released no earlier than tau* (rule R6)
    bal = store.balances()
    assert (bal["provider:p1"], bal["user:alice"], bal[egg.ESCROW]) == (MICRO, 99 * MICRO, 0)
    rel = {p["provider"]: p for p in c["bob"].get("/api/egg/market")["providers"]}
    assert (rel["p1"]["reliability"], rel["p1"]["completed"], rel["p2"]["settled"]) == (2 / 3, 1, 0)
    assert egg.replay(store) == egg.recorded(store)
    store.check_books()
    out = CliRunner().invoke(main, ["exchange", "egg", "status", str(data)])
    assert out.exit_code == 0, out.output
    status = json.loads(out.output)
    assert status["replay_equal"] is True and status["contracts"] == {"delivered/paid": 1}
    assert status["providers"][0]["completed"] == 1


def test_a_provider_fault_is_refunded_and_lowers_reliability_and_attacks_fail(live):
    """p1 has one CPU unit: a second job at once finds no room on it (the provider's fault):
    refunded at tau*, p1's reliability falls and a bidder asking for 0.5 goes to p2."""
    ex, srv, c, tokens, data = live
    for p in ("p1", "p2"):
        _static(srv, tokens[p], data)
    ex.deposit("bob", 5000)
    body = {"description": [2], "value": 900, "deadline": 30, "command": "sleep 3"}
    first = c["bob"].post("/api/egg/bids", body)
    second = c["bob"].post("/api/egg/bids", {**body, "min_reliability": 0.5})
    assert first["provider"] == second["provider"] == "p1"  # equal prices: the lower index
    store = ex.store
    assert wait_for(lambda: all(_contract(store, x["contract"])["escrow"] != "held" for x in (first, second)), HANG)
    a, b = _contract(store, first["contract"]), _contract(store, second["contract"])
    assert (a["state"], a["escrow"]) == ("delivered", "paid"), a["note"]
    assert (b["state"], b["escrow"]) == ("failed", "refunded") and "no node" in b["note"]
    rel = {p["provider"]: p["reliability"] for p in c["bob"].get("/api/egg/market")["providers"]}
    assert rel == {"p1": 0.5, "p2": 0.5}  # (1 + 1) / (2 + 2)
    third = c["bob"].post("/api/egg/bids", {**body, "command": "true", "min_reliability": 0.51})
    assert third["scheduled"] is False  # nobody reaches 0.51 yet
    # attacks: another provider's table, negative prices, a user posting a table, no money
    status, out = raw(srv, "POST", "/api/egg/prices", json.dumps({"provider": "p2", "prices": [0] * 450}).encode(),
                      token=tokens["p1"])
    assert status == 400 and b"unknown field" in out
    status, out = raw(srv, "POST", "/api/egg/prices", json.dumps({"prices": [-1] * 450}).encode(), token=tokens["p1"])
    assert status == 400 and b"got -1" in out
    status, _ = raw(srv, "POST", "/api/egg/prices", json.dumps({"prices": [0] * 450}).encode(), token=tokens["bob"])
    assert status == 403
    before = store.balances()
    status, out = raw(srv, "POST", "/api/egg/bids", json.dumps({**body, "value": 1e6}).encode(), token=tokens["bob"])
    assert status == 400 and b"has available" in out
    assert store.balances() == before
    bal = store.balances()
    assert bal["user:bob"] == 5000 * MICRO - a["price"] and bal["provider:p1"] == a["price"]
    assert egg.replay(store) == egg.recorded(store)
    store.check_books()
