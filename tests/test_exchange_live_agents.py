"""Provider agents as their own processes (``marketsched exchange provider run``) answering the
distributed randomized clearing (Stößer 2009, section 4.4, fig. 4.4) over the exchange's API:
the result equals the central mechanism with the same random numbers; hostile answers are
dropped and named; an agent killed with kill -9 between fetching its ask and answering it is
left out at the deadline (an injected clock), with its capacity, and its contracts settle by
the fault rules with the books exact."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from exchange_helpers import Machines, api_with_agents
from marketsched.exchange.api import issue_token
from marketsched.exchange.book import ClearingBook, contracts_of, period_rng
from marketsched.exchange.core import Exchange, create_exchange
from marketsched.exchange.distributed import MECHANISM, answer, assign_runs, request_id
from marketsched.exchange.provider_protocol import period_messages
from marketsched.exchange.replay import contract_terms, replay_session
from marketsched.exchange.store import ExchangeStore
from marketsched.live.cli import Client, ClientError
from marketsched.mechanisms.clearing.distributed import combine_and_price, local_step, run_seeds
from marketsched.mechanisms.clearing.randomized import distributed_randomized
from marketsched.platform.clock import FakeClock

TERMS = ("request_id", "offer_id", "node_id", "cpu", "mem", "first_slot", "last_slot", "user_price",
         "provider_price")
ANSWER_SECONDS = 20.0
HANG = 120.0  # seconds before a test that hangs is failed (never reached when it works)


@pytest.fixture
def market(tmp_path):
    """An exchange in the distributed mode whose providers answer through agents (deadline
    ``ANSWER_SECONDS`` of its fake clock), providers p1-p3 with one node of 8 CPUs each offered
    for 100 slots, their tokens, and the API on 127.0.0.1 (its identity in the data folder)."""
    data = tmp_path / "ex"
    store = ExchangeStore(data)
    create_exchange(store, slot_seconds=10.0, period_seconds=30.0, mechanism=MECHANISM, seed=3, alpha=4.0,
                    answer_seconds=ANSWER_SECONDS)
    clock = FakeClock()
    ex = Exchange(store, clock, Machines(clock))
    ex.single_user = True
    for i, p in enumerate(("p1", "p2", "p3")):
        ex.join(p)
        ex.add_node(p, "n0", 8, 64)
        ex.submit_offer(p, "n0", 1.0 + i, 1, 100)
    tokens = {p: issue_token(store, "provider", p, 0.0) for p in ("p1", "p2", "p3")}
    with api_with_agents(data, clock, HANG) as (srv, agents):
        yield ex, clock, srv, tokens, data, agents
    ex.store.close()


def start_agent(srv, token, data: Path, agents: list, gate: Path | None = None) -> subprocess.Popen:
    env = {**os.environ, "MARKETSCHED_TOKEN": token}
    if gate is not None:
        env["MARKETSCHED_TEST_AGENT_GATE"] = str(gate)
    proc = subprocess.Popen([sys.executable, "-m", "marketsched.cli", "exchange", "provider", "run", "--url", srv.url,
                             "--data", str(data), "--poll", "0.05"], env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    agents.append(proc)
    return proc


def submit(ex, rng, n: int = 6) -> None:
    now = ex.slot()
    for u in range(n):
        first = now + int(rng.integers(2, 5))
        ex.submit_request(f"u{u}", round(float(rng.uniform(0.5, 6.0)), 2), int(rng.choice([2, 4, 6])),
                          int(rng.integers(0, 8)), first, first + int(rng.integers(0, 3)), "true")


def clear_in_thread(ex) -> threading.Thread:
    """``ex.clear()`` in a thread (it waits for the agents' answers or the deadline)."""
    def run():
        ex.clear()
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def wait_for(cond, what: str) -> None:
    end = time.monotonic() + HANG
    while not cond():
        assert time.monotonic() < end, f"never happened: {what}"
        time.sleep(0.02)


def rows(ex, sql: str, params=()) -> list[tuple]:
    """A read on a connection of its own (a clearing is using the exchange's meanwhile)."""
    store = ExchangeStore(ex.store.path)
    try:
        return store.rows(sql, params)
    finally:
        store.close()


def open_ask(ex, provider: str) -> tuple[int, str] | None:
    got = rows(ex, "SELECT id, request FROM ex_asks WHERE provider = ? AND closed_t IS NULL ORDER BY id DESC LIMIT 1",
               (provider,))
    return (got[0][0], got[0][1]) if got else None


def answers_in(ex, period: int) -> int:
    return rows(ex, "SELECT COUNT(*) FROM ex_asks WHERE period = ? AND answered_t IS NOT NULL AND closed_t IS NULL",
                (period,))[0][0]


def terms(ex, period: int) -> list[tuple]:
    return sorted(tuple(c[k] for k in TERMS) for c in ex.store.contracts() if c["period"] == period)


def reference(cb: ClearingBook, alpha: float, seed: int, period: int, honest: list[str], owners: list[str]):
    """The contracts of combining the runs of the ``honest`` providers, computed here by the
    library's participant step with the period's random numbers (the others' runs left out)."""
    book = cb.book
    runs = assign_runs(book, owners)
    seeds = run_seeds(period_rng(seed, period), book.n_jobs + book.n_nodes)
    got = local_step(book, alpha, {r: seeds[r] for p in honest for r in runs[p]})
    out = combine_and_price(book, got)
    return sorted(tuple(leg[k] for k in TERMS) for leg in contracts_of(cb, out.allocation, out.payments))


def owners_of(ex, cb: ClearingBook) -> list[str]:
    return [ex.store.order(o)["owner"] for o in cb.piece_offer]


def test_agent_processes_equal_the_central_mechanism_and_hostile_answers_are_dropped(market):
    """Three clearings with three agent processes: each period's contracts, prices to the
    micro-unit, are those of the central ``distributed_randomized`` on the recorded book with the
    period's random numbers, and the period records its messages. Then p3's agent is stopped and
    the test plays p3 against the API: another provider's ask (404), a second answer (409), an
    earlier period's answer replayed on a new ask, runs it was not asked for, an answer to a
    closed ask, and one after the deadline: each is refused or dropped and named, and every
    clearing goes on with the honest answers. The replay reproduces every period."""
    ex, clock, srv, tokens, data, agents = market
    procs = {p: start_agent(srv, tokens[p], data, agents) for p in ("p1", "p2", "p3")}
    rng = np.random.default_rng(11)
    alpha, seed = ex.settings["alpha"], ex.settings["seed"]
    for period in (1, 2, 3):
        submit(ex, rng)
        if period < 3:
            t = clear_in_thread(ex)
            t.join(HANG)
            assert not t.is_alive()
        else:  # as `exchange run` does: computed in a worker thread, committed at a later step
            ex.background = True
            wait_for(lambda: ex.step_clearing() is not None, "the background clearing of period 3")
            ex.background = False
        cb = ClearingBook.from_json(ex.store.periods()[-1]["book"])
        central = distributed_randomized(cb.book, alpha, period_rng(seed, period))
        assert terms(ex, period) == sorted(tuple(leg[k] for k in TERMS)
                                           for leg in contracts_of(cb, central.allocation, central.payments))
        msgs = period_messages(ex.store, period)
        assert msgs["calls"] == 3 and msgs["answers"] == 3 and msgs["dropped"] == [] and msgs["left_out"] == []
        assert msgs["bytes_sent"] > 0 and msgs["bytes_received"] > 0
        clock.advance(ex.settings["period_seconds"])
    assert sum(len(terms(ex, p)) for p in (1, 2, 3)) > 0
    procs["p3"].send_signal(signal.SIGTERM)
    out, err_text = procs["p3"].communicate(timeout=HANG)

    assert json.loads(out.strip().splitlines()[-1])["answered"] == 3

    p3 = Client(srv.url, tokens["p3"])
    # period 4: p3 answers honestly, after trying p1's ask and before trying a second answer
    submit(ex, rng)
    t = clear_in_thread(ex)
    wait_for(lambda: open_ask(ex, "p3") is not None, "p3's ask of period 4")
    ask4, req4 = open_ask(ex, "p3")
    assert p3.get("/api/provider/ask") == {"ask": ask4, "period": 4, "deadline": clock() + ANSWER_SECONDS,
                                           "request": req4}
    with pytest.raises(ClientError, match="no ask") as err:
        p3.post("/api/provider/answer", {"ask": ask4 - 1, "answer": answer(req4)})  # p1's or p2's ask
    assert err.value.status == 404
    honest4 = answer(req4)
    assert p3.post("/api/provider/answer", {"ask": ask4, "answer": honest4})["received"] is True
    with pytest.raises(ClientError, match="answered already") as err:
        p3.post("/api/provider/answer", {"ask": ask4, "answer": honest4})
    assert err.value.status == 409
    t.join(HANG)
    assert period_messages(ex.store, 4)["dropped"] == []
    clock.advance(ex.settings["period_seconds"])

    # period 5: period 4's answer replayed; then an answer to the closed ask of period 4
    submit(ex, rng)
    t = clear_in_thread(ex)
    wait_for(lambda: open_ask(ex, "p3") is not None and open_ask(ex, "p3")[0] != ask4, "p3's ask of period 5")
    ask5, req5 = open_ask(ex, "p3")
    p3.post("/api/provider/answer", {"ask": ask5, "answer": honest4})
    with pytest.raises(ClientError, match="closed") as err:
        p3.post("/api/provider/answer", {"ask": ask4, "answer": answer(req5)})
    assert err.value.status == 409
    t.join(HANG)
    dropped = period_messages(ex.store, 5)["dropped"]
    assert len(dropped) == 1 and "provider 'p3' answered another request" in dropped[0] and "replayed" in dropped[0]
    cb = ClearingBook.from_json(ex.store.periods()[-1]["book"])
    assert terms(ex, 5) == reference(cb, alpha, seed, 5, ["p1", "p2"], owners_of(ex, cb))
    clock.advance(ex.settings["period_seconds"])

    # period 6: runs that were asked of the others
    submit(ex, rng)
    t = clear_in_thread(ex)
    wait_for(lambda: open_ask(ex, "p3") is not None and open_ask(ex, "p3")[0] != ask5, "p3's ask of period 6")
    ask6, req6 = open_ask(ex, "p3")
    msg6 = json.loads(req6)
    mine = {r["run"] for r in msg6["runs"]}
    others = [{"run": r, "jobs": []} for r in range(len(msg6["book"]["jobs"]) + len(msg6["book"]["nodes"]))
              if r not in mine]
    p3.post("/api/provider/answer", {"ask": ask6, "answer": json.dumps({"request": request_id(req6), "runs": others})})
    t.join(HANG)
    dropped = period_messages(ex.store, 6)["dropped"]
    assert len(dropped) == len(others) and all("provider 'p3' answered run" in d and "not asked" in d for d in dropped)
    cb = ClearingBook.from_json(ex.store.periods()[-1]["book"])
    assert terms(ex, 6) == reference(cb, alpha, seed, 6, ["p1", "p2"], owners_of(ex, cb))
    clock.advance(ex.settings["period_seconds"])

    # period 7: p3 does not answer by the deadline; its answer after it is refused as late
    submit(ex, rng)
    t = clear_in_thread(ex)
    wait_for(lambda: answers_in(ex, 7) == 2, "p1's and p2's answers of period 7")
    ask7, req7 = open_ask(ex, "p3")
    clock.advance(ANSWER_SECONDS)
    with pytest.raises(ClientError, match="late") as err:
        p3.post("/api/provider/answer", {"ask": ask7, "answer": answer(req7)})
    assert err.value.status == 409
    t.join(HANG)
    msgs = period_messages(ex.store, 7)
    assert msgs["answers"] == 2 and msgs["dropped"][0].startswith("provider 'p3' did not answer")
    assert not any(c["provider"] == "p3" for c in ex.store.contracts() if c["period"] == 7)
    assert replay_session(ex.store) == contract_terms(ex.store)


def test_an_agent_killed_between_fetching_and_answering_is_left_out_and_its_contracts_settle(market, tmp_path):
    """p2's agent is killed with kill -9 after fetching its ask of period 2 and before answering
    it: at the deadline (the fake clock moved past it, after p1 and p3 answered) period 2 clears
    without p2's runs and capacity (no contract on its node; its offer stays open), the period
    records why; p2's contracts of period 1 then settle by the fault rules (one delivered, one
    ended by the provider's side: its penalty), and the books are exact."""
    ex, clock, srv, tokens, data, agents = market
    gate = tmp_path / "p2-gate"
    gate.touch()  # period 1: p2 answers at once
    start_agent(srv, tokens["p1"], data, agents)
    p2 = start_agent(srv, tokens["p2"], data, agents, gate=gate)
    start_agent(srv, tokens["p3"], data, agents)
    now = ex.slot()
    for u in range(6):  # period 1: 24 CPUs of demand above every reserve, one slot: each node sells two jobs
        ex.submit_request(f"u{u}", 9.0, 4, 8, now + 8, now + 8, "true")  # after period 2 and its deadline
    t = clear_in_thread(ex)
    t.join(HANG)
    first = [c for c in ex.store.contracts() if c["provider"] == "p2"]
    assert len(first) == 2 and period_messages(ex.store, 1)["answers"] == 3
    gate.unlink()
    clock.advance(ex.settings["period_seconds"])

    now = ex.slot()
    for u in range(3):
        ex.submit_request(f"v{u}", 9.0, 8, 8, now + 2, now + 3, "true")
    t = clear_in_thread(ex)
    wait_for(lambda: Path(f"{gate}.fetched").exists(), "p2's agent fetching its ask of period 2")
    os.kill(p2.pid, signal.SIGKILL)
    p2.wait(timeout=HANG)
    wait_for(lambda: answers_in(ex, 2) == 2, "p1's and p3's answers of period 2")
    clock.advance(ANSWER_SECONDS)
    t.join(HANG)
    assert not t.is_alive()
    msgs = period_messages(ex.store, 2)
    assert msgs["calls"] == 3 and msgs["answers"] == 2
    assert msgs["dropped"][0].startswith("provider 'p2' did not answer: no answer to ask")
    second = [c for c in ex.store.contracts() if c["period"] == 2]
    assert second and not any(c["provider"] == "p2" for c in second)  # p2's capacity not sold
    cb = ClearingBook.from_json(ex.store.periods()[-1]["book"])
    assert "p2" not in owners_of(ex, cb)
    assert terms(ex, 2) == reference(cb, ex.settings["alpha"], ex.settings["seed"], 2, ["p1", "p3"], owners_of(ex, cb))
    assert [o["state"] for o in ex.store.orders("offer") if o["owner"] == "p2"] == ["open"]

    # p2's contracts of period 1 run and settle by the rules (the exchange runs them, not the agent)
    clock.set(max(c["start_t"] for c in first))
    ex.execute()
    backend = ex.backend("p2")
    started = [c["id"] for c in first]
    assert sorted(backend.live) == sorted(started)
    backend.exit(started[0], 0)  # the job ends by itself: delivered
    backend.fail(started[1], "node lost")  # the provider's side ends it: its penalty
    clock.set(max(c["end_t"] for c in first))
    ex.execute()
    got = {c["id"]: c for c in ex.store.contracts()}
    assert got[started[0]]["state"] == "delivered" and got[started[1]]["state"] == "failed"
    books = ex.store.check_books()
    paid = sum(got[i]["provider_price"] for i in started if got[i]["state"] == "delivered")
    penalties = sum(got[i]["penalty"] for i in started if got[i]["state"] == "failed")
    assert ex.store.ledger.balance("provider:p2") == paid - penalties
    assert books is not None
    assert replay_session(ex.store) == contract_terms(ex.store)
