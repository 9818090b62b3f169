"""Restart from the database (nothing committed is lost, running jobs are re-attached, nothing
runs twice) and replay (a recorded session re-cleared offline gives the same contracts)."""

from __future__ import annotations

import numpy as np
import pytest

from exchange_helpers import make_exchange, one_contract, reopen
from marketsched.exchange.replay import contract_terms, replay_session
from marketsched.exchange.store import ExchangeStore


def _snapshot(store):
    tables = ("ex_providers", "ex_nodes", "ex_orders", "ex_periods", "ex_contracts", "accounts", "entries")
    return {t: store.rows(f"SELECT * FROM {t} ORDER BY 1") for t in tables}


def _populate(ex, clock, rng, periods=6):
    """Providers with nodes, offers and requests over several periods (a compressed day)."""
    for p in ("p1", "p2", "p3"):
        ex.join(p)
        for n in range(2):
            ex.add_node(p, f"n{n}", int(rng.integers(2, 9)), int(rng.integers(50, 200)))
    for p in ("p1", "p2", "p3"):
        for n in range(2):
            ex.submit_offer(p, f"n{n}", float(rng.integers(5, 12)), 1, 40)
    for _ in range(periods):
        now = ex.slot()
        for _ in range(int(rng.integers(2, 7))):
            first = now + 1 + int(rng.integers(0, 4))
            ex.submit_request(f"u{int(rng.integers(1, 4))}", float(rng.integers(8, 20)), int(rng.integers(1, 4)),
                              int(rng.integers(10, 60)), first, first + int(rng.integers(0, 4)), "true")
        clock.advance(30)
        ex.tick()


def test_restart_loses_nothing_and_reattaches_running_jobs(tmp_path):
    ex, clock, machines = make_exchange(tmp_path / "x.db")
    _populate(ex, clock, np.random.default_rng(3))
    running = sorted(cid for m in machines.by_name.values() for cid in m.live)
    assert running, "the scenario should leave jobs running"
    before = _snapshot(ex.store)
    # kill -9: the object is dropped without closing anything; jobs keep running meanwhile
    m_of = {cid: m for m in machines.by_name.values() for cid in m.live}
    m_of[running[0]].exit(running[0], 0)  # one ends while the exchange is down
    ex2 = reopen(tmp_path / "x.db", clock, machines)
    after = _snapshot(ex2.store)
    assert {t: after[t] for t in ("ex_providers", "ex_nodes", "ex_orders", "ex_periods")} == \
           {t: before[t] for t in ("ex_providers", "ex_nodes", "ex_orders", "ex_periods")}
    c0 = ex2.store.contract(running[0])
    assert c0["state"] == "delivered" and c0["exit_code"] == 0
    for cid in running[1:]:
        assert ex2.store.contract(cid)["state"] == "running"
    clock.advance(2000)
    ex2.tick()  # FakeBackend.start asserts that no contract starts twice
    assert not ex2.open_contracts()
    ex2.store.check_books()


def test_a_contract_caught_starting_is_started_once(tmp_path):
    ex, clock, machines = make_exchange(tmp_path / "x.db")
    ex.join("p1")
    ex.add_node("p1", "n", 4, 100)
    ex.submit_offer("p1", "n", 5, 2, 5)
    ex.submit_request("u1", 12, 2, 10, 2, 3, "true")
    ex.tick()
    (c,) = ex.store.contracts()
    with ex.store.transaction():  # the exchange died between recording the start and launching
        ex.store.update_contract(c["id"], state="starting", started_t=20.0)
    clock.set(21)
    ex2 = reopen(tmp_path / "x.db", clock, machines)
    assert ex2.store.contract(c["id"])["state"] == "pending"
    ex2.tick()
    assert [s[0] for s in machines.by_name["p1"].started] == [c["id"]]


class Crash(Exception):
    """The exchange is killed (kill -9) at this point."""


@pytest.mark.parametrize("started", [False, True])
@pytest.mark.parametrize("stopped", [True, False])
def test_a_crash_in_the_stop_at_a_windows_end_keeps_the_windows_verdict(tmp_path, started, stopped):
    """The exchange stops a job at its window's end (a Slurm job still queued there: cancelled,
    or a running one: cancelled too) and dies before recording the verdict. The restarted
    exchange judges the window, by what was true at its end: a job never started fails its
    provider (not started by its window's end), a job that ran is delivered and paid, and the
    end is never read as the provider's cancel (Slurm's "CANCELLED by 0"). ``stopped`` False:
    it died just before the stop (the job is still there, and may start meanwhile: late)."""
    ex, clock, machines, c = one_contract(tmp_path, penalty=2.0)
    clock.set(20)
    ex.tick()
    assert ex.store.contract(c["id"])["state"] == "running"
    backend = machines.by_name["p1"]
    if not started:
        backend.pending.add(c["id"])  # the provider's queue holds it past its window
    clock.set(c["end_t"])
    real_stop = backend.stop

    def dying_stop(cid):  # as Slurm records the exchange's own cancel (the exchange's account: root)
        if stopped:
            real_stop(cid)
            backend.faults[cid] = "slurm: CANCELLED by 0 (not by the job's account)"
            backend._news.append((cid, None))
        raise Crash

    backend.stop = dying_stop
    with pytest.raises(Crash):
        ex.tick()
    backend.stop = real_stop
    backend.pending.discard(c["id"])  # not stopped: the provider starts it now, too late
    clock.advance(1)
    ex2 = reopen(tmp_path / "x.db", clock, machines)
    ex2.tick()
    got = ex2.store.contract(c["id"])
    if started:
        assert (got["state"], got["note"]) == ("delivered", "served its whole window")
    else:
        assert (got["state"], got["note"]) == ("failed", "the provider had not started the job by its window's end")
    assert c["id"] not in backend.live  # stopped once judged
    books = ex2.store.check_books()
    assert books["penalties"] == (0 if started else got["penalty"]) and got["penalty"] > 0


@pytest.mark.parametrize("mechanism", ["critical-value", "k-pricing", "pay-as-bid", "randomized-distributed", "exact"])
def test_replay_of_a_recorded_session_gives_the_same_contracts(tmp_path, mechanism):
    ex, clock, machines = make_exchange(tmp_path / "x.db", mechanism=mechanism, k=0.3)
    _populate(ex, clock, np.random.default_rng(5), periods=8)
    for m in machines.by_name.values():  # execution outcomes do not change the clearing
        for cid in sorted(m.live)[:2]:
            m.fail(cid)
    clock.advance(100)
    ex.tick()
    recorded = contract_terms(ex.store)
    assert len(recorded) >= 8 and len({c["period"] for c in recorded}) >= 3
    assert replay_session(ex.store) == recorded


def test_replay_notices_a_changed_record(tmp_path):
    """A winner's report changed in the record changes its k-price: the replay differs."""
    ex, clock, _ = make_exchange(tmp_path / "x.db", mechanism="k-pricing", k=0.5)
    _populate(ex, clock, np.random.default_rng(5), periods=4)
    recorded = contract_terms(ex.store)
    store = ExchangeStore(tmp_path / "x.db")
    rid = recorded[0]["request_id"]
    with store.transaction():
        store.conn.execute("UPDATE ex_orders SET value = value + 7 WHERE id = ?", (rid,))
    assert replay_session(store) != recorded


def test_cancelled_orders_leave_the_book_and_the_replay_agrees(tmp_path):
    ex, clock, _ = make_exchange(tmp_path / "x.db", mechanism="k-pricing")
    _populate(ex, clock, np.random.default_rng(8), periods=2)
    s = ex.slot()
    ex.join("p9")
    ex.add_node("p9", "n", 8, 500)
    cheap = ex.submit_offer("p9", "n", 0.5, s + 2, s + 30)  # the cheapest node: it would win
    big = ex.submit_request("u1", 50, 2, 10, s + 5, s + 6, "true")
    ex.cancel("p9", cheap)
    with pytest.raises(ValueError, match="cancel field 'order': 'u2' has no order"):
        ex.cancel("u2", big)
    clock.advance(30)
    ex.tick()
    assert all(c["offer_id"] != cheap for c in ex.store.contracts())
    assert ex.store.order(big)["state"] == "filled"
    with pytest.raises(ValueError, match=f"order {big} is filled, not open"):
        ex.cancel("u1", big)
    late = ex.submit_request("u2", 40, 1, 10, ex.slot() + 5, ex.slot() + 6, "true")
    ex.cancel("u2", late)
    other = ex.submit_request("u3", 30, 1, 10, ex.slot() + 5, ex.slot() + 6, "true")
    clock.advance(30)
    ex.tick()
    assert ex.store.order(late)["state"] == "cancelled" and ex.store.order(other)["state"] == "filled"
    assert replay_session(ex.store) == contract_terms(ex.store)
