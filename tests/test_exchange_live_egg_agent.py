"""Egg mode (Kang & Parkes 2007) with providers of kind ``agent``: an Egg exchange on an injected
clock, its API on 127.0.0.1, and a real provider agent process (``marketsched exchange provider
run``) that runs the awarded job on its own executor and reports it. The trust rule of contracts
run by agents holds under Egg: the escrow is paid to the provider only for a result delivered by
``tau*`` + the grace, and no earlier than ``tau*``; it is refunded otherwise; the provider's
reliability learns from the outcome. Hostile reports are refused and named. Books exact and the
events replay to the recorded choices in every case."""

from __future__ import annotations

import base64
import hashlib
import os
import signal

import pytest

from exchange_helpers import api_with_agents, egg_agent_exchange, run_row, start_agent
from live_helpers import wait_for
from marketsched.exchange import egg
from marketsched.exchange.agent_runs import REPORT_GRACE
from marketsched.exchange.api import issue_token
from marketsched.exchange.store import MICRO
from marketsched.live.cli import Client, ClientError
from marketsched.platform.clock import FakeClock

HANG = 60.0  # a guard against a hang, not a timing claim
RUNS = "ex_egg_runs"


@pytest.fixture
def market(tmp_path):
    """An Egg exchange (slots of 1 s, run-time buckets in seconds; the clock at 1000 s) whose
    providers p1 and p2 are of the kind agent, one node of 2 CPU units each; alice with 100
    deposited; tokens of alice, p1 and p2; the API on 127.0.0.1 on the same clock."""
    data = tmp_path / "ex"
    clock = FakeClock(1000.0)
    ex = egg_agent_exchange(data, clock, ("p1", "p2"), 2, 256)
    store = ex.store
    ex.deposit("alice", 100)
    tokens = {name: issue_token(store, role, name, 0.0)
              for role, name in (("user", "alice"), ("provider", "p1"), ("provider", "p2"))}
    with api_with_agents(data, clock, HANG) as (srv, agents):
        clients = {name: Client(srv.url, tok) for name, tok in tokens.items()}
        clients["p1"].post("/api/egg/prices", {"prices": [1.0] * 9 * 50})  # p1: 1 in every cell; p2 posts none
        yield ex, clock, srv, clients, tokens, data, agents, tmp_path
    ex.close()
    store.close()


def award(clients, command: str) -> dict:
    """alice's bid for a 2 s job (value 90, deadline 40 s), awarded to p1 at price 1 and tau* = now + 2."""
    got = clients["alice"].post("/api/egg/bids", {"description": [2], "value": 90, "deadline": 40,
                                                  "command": command})
    assert got["scheduled"] and got["provider"] == "p1" and got["price"] == 1.0, got
    return got


def contract(ex, cid: int) -> dict:
    return {c["id"]: c for c in egg.contracts(ex.store)}[cid]


def money(ex) -> tuple[int, int, int]:
    """(alice, p1, the escrow) in micro-units."""
    bal = ex.store.balances()
    return bal.get("user:alice", 0), bal.get("provider:p1", 0), bal.get(egg.ESCROW, 0)


def record(clients, provider: str) -> tuple[float, int, int]:
    """The provider's reliability as bidders see it, its completed and its settled contracts."""
    got = {p["provider"]: p for p in clients["alice"].get("/api/egg/market")["providers"]}[provider]
    return got["reliability"], got["completed"], got["settled"]


def books_exact(ex) -> None:
    ex.store.check_books()
    assert egg.replay(ex.store) == egg.recorded(ex.store)


def test_an_egg_contract_runs_on_its_agent_and_its_escrow_is_paid_at_tau(market):
    """The exchange publishes the Egg contract's run; p1's agent runs the job and reports exit 0
    with its output; the contract is delivered at the report, the escrow stays held until tau*
    (Kang & Parkes 2007, rule R6), then goes to p1, whose reliability records a success; alice
    reads the output."""
    ex, clock, srv, clients, tokens, data, agents, tmp = market
    got = award(clients, "echo out-of-$MARKETSCHED_CONTRACT")
    cid = got["contract"]
    ex.tick()
    assert contract(ex, cid)["state"] == "running"
    start_agent(srv, tokens["p1"], data, tmp / "agent", agents)
    assert wait_for(lambda: run_row(ex, cid, "reported_t", RUNS) is not None, HANG), "the agent never reported"
    ex.tick()
    c = contract(ex, cid)
    assert (c["state"], c["escrow"], c["exit_code"]) == ("delivered", "held", 0), c["note"]
    assert "as its provider's agent reported" in c["note"]
    assert money(ex) == (99 * MICRO, 0, MICRO)  # before tau*: held
    clock.set(got["tau"])
    ex.tick()
    c = contract(ex, cid)
    assert c["escrow"] == "paid" and c["settled_t"] >= c["tau"]
    assert money(ex) == (99 * MICRO, MICRO, 0)
    assert record(clients, "p1") == (2 / 3, 1, 1)  # Beta(1, 1) prior: (1 + 1) / (1 + 2)
    out = clients["alice"].get(f"/api/contracts/{cid}/output")
    text = base64.b64decode(out["output"])
    assert text == f"out-of-{cid}\n".encode() and out["digest"] == hashlib.sha256(text).hexdigest()
    assert (out["state"], out["end"], out["code"]) == ("delivered", "exit", 0)
    books_exact(ex)


def test_an_egg_agent_killed_mid_run_is_refunded_and_loses_reliability(market):
    """p1's agent reports the start, then is killed with kill -9: at tau* nothing is judged (the
    report may still come); at tau* + the grace the contract fails, the escrow goes back to alice
    and p1's reliability records a failure."""
    ex, clock, srv, clients, tokens, data, agents, tmp = market
    stop = tmp / "stop"
    got = award(clients, f"while [ ! -e {stop} ]; do sleep 0.05; done")
    cid = got["contract"]
    ex.tick()
    agent = start_agent(srv, tokens["p1"], data, tmp / "agent", agents)
    try:
        assert wait_for(lambda: run_row(ex, cid, "started_t", RUNS) is not None, HANG), "no start report"
        os.kill(agent.pid, signal.SIGKILL)
        agent.wait(timeout=HANG)
        clock.set(got["tau"])
        ex.tick()
        assert (contract(ex, cid)["state"], contract(ex, cid)["escrow"]) == ("running", "held")  # within the grace
        clock.set(got["tau"] + REPORT_GRACE)
        ex.tick()
    finally:
        stop.touch()  # the orphaned job ends
    c = contract(ex, cid)
    assert (c["state"], c["escrow"]) == ("failed", "refunded") and "did not report" in c["note"], c["note"]
    assert money(ex) == (100 * MICRO, 0, 0)
    assert record(clients, "p1") == (1 / 3, 0, 1)
    books_exact(ex)


def test_hostile_egg_reports_are_refused_and_named(market):
    """A report on another provider's Egg contract, on one not yet due, by a user, with a digest
    that does not match, a replayed one and a late one are refused, each naming why; a report
    moves no money by itself; the contract reported in time is paid at tau*, the other refunded."""
    ex, clock, srv, clients, tokens, data, agents, tmp = market
    first = award(clients, "true")
    ex.tick()
    second = award(clients, "true")  # awarded, not started: its run is not published yet
    ok = b"ok\n"
    body = {"end": "exit", "code": 0, "digest": hashlib.sha256(ok).hexdigest(),
            "output": base64.b64encode(ok).decode(), "output_bytes": len(ok)}

    def refused(who: str, cid: int, payload: dict, status: int, words: str) -> None:
        with pytest.raises(ClientError) as err:
            clients[who].post(f"/api/provider/runs/{cid}/ended", payload)
        assert err.value.status == status and words in err.value.message, err.value.message

    a, b = first["contract"], second["contract"]
    refused("p2", a, body, 404, f"no contract {a} of yours")
    refused("p1", b, body, 409, "is not due")
    refused("alice", a, body, 403, "only providers")
    refused("p1", a, {**body, "digest": "0" * 64}, 400, "not the SHA-256")
    assert clients["p1"].post(f"/api/provider/runs/{a}/ended", body)["delivers"] is True
    refused("p1", a, body, 409, "reported already")
    assert money(ex) == (98 * MICRO, 0, 2 * MICRO)  # both prices in escrow; no report moved any
    ex.tick()  # the second starts (its run is published); the first is judged delivered
    assert contract(ex, b)["state"] == "running" and contract(ex, a)["escrow"] == "held"
    clock.set(second["tau"] + REPORT_GRACE)
    refused("p1", b, body, 409, "is late")
    ex.tick()
    assert (contract(ex, a)["state"], contract(ex, a)["escrow"]) == ("delivered", "paid")
    assert (contract(ex, b)["state"], contract(ex, b)["escrow"]) == ("failed", "refunded")
    assert money(ex) == (99 * MICRO, MICRO, 0)
    assert record(clients, "p1") == (0.5, 1, 2)
    books_exact(ex)
