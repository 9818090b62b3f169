"""A clearing off the critical path: the book comes from a snapshot, the mechanism runs outside
any transaction (in the exchange's loop, in a worker thread), and the commit is one short
transaction that finds a stale result (an order withdrawn meanwhile) and clears again.
Event order only: the mechanism is held at a gate until the test has checked what it wants."""

from __future__ import annotations

import sqlite3
import threading

import pytest

from exchange_helpers import make_exchange, trade
from marketsched.exchange import clearing
from marketsched.exchange.clearing import STALE_RETRIES, commit, compute, snapshot
from marketsched.exchange.replay import contract_terms, replay_session


class Gate:
    """Holds every computation of a clearing until ``release``; ``waiting`` is set while one waits."""

    def __init__(self, monkeypatch):
        self.waiting = threading.Event()
        self.open = threading.Event()
        self.computed = 0
        monkeypatch.setattr(clearing, "_wait_for_gate", self._wait)

    def _wait(self, snap):
        self.waiting.set()
        assert self.open.wait(60), "the test never released the clearing"
        self.computed += 1

    def release(self):
        self.open.set()


def _market(tmp_path, **kw):
    ex, clock, machines = make_exchange(tmp_path / "x.db", mechanism="critical-value", **kw)
    trade(ex, clock, 2, seed=3)
    return ex, clock, machines


def _requests(ex, n=4, user="v", ahead=2):
    first = ex.slot() + ahead
    return [ex.submit_request(f"{user}{i}", 9.0, 1, 1, first, first + 1, "true") for i in range(n)]


def test_a_cancellation_during_a_clearing_makes_it_stale_and_the_replay_agrees(tmp_path):
    ex, clock, _ = _market(tmp_path)
    ids = _requests(ex)
    snap = snapshot(ex.store, clock(), ex.slot() + 1)
    out = compute(snap, ex.settings)
    assert any(leg["request_id"] == ids[0] for leg in out.legs)  # the computation fills it
    ex.cancel("v0", ids[0])  # withdrawn before the commit
    periods = len(ex.store.periods())
    assert commit(ex.store, snap, out, ex.settings) is None  # stale: nothing written
    assert len(ex.store.periods()) == periods
    assert ex.store.order(ids[0])["state"] == "cancelled"
    ex.clear()  # a new snapshot, without the withdrawn order
    assert ex.store.order(ids[0])["state"] == "cancelled"
    assert all(c["request_id"] != ids[0] for c in ex.store.contracts())
    assert {ex.store.order(i)["state"] for i in ids[1:]} == {"filled"}
    assert replay_session(ex.store) == contract_terms(ex.store)
    ex.store.check_books()


def test_an_order_submitted_during_a_clearing_waits_for_the_next(tmp_path):
    ex, clock, _ = _market(tmp_path)
    _requests(ex)
    snap = snapshot(ex.store, clock(), ex.slot() + 1)
    late = _requests(ex, 1, user="late", ahead=6)[0]
    period = commit(ex.store, snap, compute(snap, ex.settings), ex.settings)
    assert period == snap.period
    assert ex.store.periods()[-1]["last_order"] == late - 1
    assert ex.store.order(late)["state"] == "open"
    clock.advance(ex.settings["period_seconds"])
    ex.clear()
    assert ex.store.order(late)["state"] == "filled"
    assert replay_session(ex.store) == contract_terms(ex.store)


def test_a_clearing_committed_meanwhile_makes_a_result_stale(tmp_path):
    ex, clock, _ = _market(tmp_path)
    _requests(ex)
    snap = snapshot(ex.store, clock(), ex.slot() + 1)
    out = compute(snap, ex.settings)
    ex.clear()  # another clearing of the same period committed first
    assert commit(ex.store, snap, out, ex.settings) is None
    assert [p["id"] for p in ex.store.periods()] == list(range(1, snap.period + 1))


def test_windows_are_enforced_and_the_database_is_writable_while_a_clearing_computes(tmp_path, monkeypatch):
    """A contract's window ends while a background clearing is held in its mechanism: the tick
    stops and settles the job; reads and writes from another connection succeed at once."""
    ex, clock, machines = _market(tmp_path)
    ex.background = True
    for _ in range(10):  # start some contracts
        clock.advance(ex.settings["slot_seconds"])
        ex.tick()
        if ex.store.contracts(("running",)):
            break
    while ex.clearing():  # let a clearing started meanwhile commit
        ex._clearing._thread.join()
        ex.step_clearing()
    running = ex.store.contracts(("running",))
    assert running
    gate = Gate(monkeypatch)
    _requests(ex)
    due = ex.store.periods()[-1]["t"] + ex.settings["period_seconds"]
    clock.set(max([due] + [c["end_t"] for c in running]))
    ex.tick()  # the period is due: the clearing starts in its thread, and the windows end
    assert gate.waiting.wait(60) and ex.clearing()
    for c in running:
        assert ex.store.contract(c["id"])["state"] == "delivered", "a window was not enforced during the clearing"
    other = sqlite3.connect(ex.store.path, timeout=0)  # no waiting: a lock held would fail here
    assert other.execute("SELECT COUNT(*) FROM ex_orders").fetchone()[0] > 0
    other.execute("BEGIN IMMEDIATE")
    other.execute("UPDATE ex_orders SET command = command WHERE id = 1")
    other.execute("COMMIT")
    other.close()
    periods = len(ex.store.periods())
    ex.tick()
    assert len(ex.store.periods()) == periods  # still computing: nothing committed
    gate.release()
    while ex.clearing():
        ex.tick()
    assert len(ex.store.periods()) == periods + 1
    assert replay_session(ex.store) == contract_terms(ex.store)
    ex.store.check_books()


def test_cancellations_in_every_background_computation_end_in_a_locked_clearing(tmp_path, monkeypatch):
    ex, clock, _ = _market(tmp_path)
    ex.background = True
    ids = _requests(ex, STALE_RETRIES + 2, ahead=3)
    cancels = iter(ids)
    gate = Gate(monkeypatch)
    gate.release()
    periods = len(ex.store.periods())

    def cancel_one():  # a user withdraws an order while each background computation runs
        rid = next(cancels)
        ex.cancel(f"v{ids.index(rid)}", rid)

    for _ in range(STALE_RETRIES + 1):
        ex.tick()  # starts a clearing (the first) or commits a stale one and starts the next
        assert ex.clearing()
        cancel_one()
        ex._clearing._thread.join()
    ex.tick()  # the last stale result: the clearing is made inside the write transaction
    assert not ex.clearing()
    assert len(ex.store.periods()) == periods + 1
    assert gate.computed == STALE_RETRIES + 2
    states = [ex.store.order(i)["state"] for i in ids]
    assert states == ["cancelled"] * (STALE_RETRIES + 1) + ["filled"]
    assert replay_session(ex.store) == contract_terms(ex.store)


def test_a_mechanism_error_in_the_worker_reaches_the_loop(tmp_path, monkeypatch):
    ex, clock, _ = _market(tmp_path)
    ex.background = True
    clock.advance(ex.settings["period_seconds"])
    _requests(ex)

    def broken(snap):
        raise RuntimeError("the mechanism failed")

    monkeypatch.setattr(clearing, "_wait_for_gate", broken)
    ex.tick()
    ex._clearing._thread.join()
    with pytest.raises(RuntimeError, match="the mechanism failed"):
        ex.tick()
    monkeypatch.setattr(clearing, "_wait_for_gate", lambda snap: None)
    ex.tick()  # the next tick starts the clearing again
    ex._clearing._thread.join()
    ex.tick()
    assert not ex.clearing()


def test_a_database_error_is_a_message_not_a_traceback(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from marketsched.cli import main
    from marketsched.exchange import cli_open

    (tmp_path / "ex").mkdir()
    make_exchange(tmp_path / "ex" / "exchange.db")

    def locked(*args, **kw):
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(cli_open, "ExchangeStore", locked)
    data = tmp_path / "ex"
    result = CliRunner().invoke(main, ["exchange", "status", str(data)])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "the exchange's database: database is locked (try again" in result.output


def test_a_contract_moved_during_a_clearing_makes_it_stale(tmp_path):
    """A contract moved off lost capacity between the snapshot and the commit changes the
    capacity sold: the result is stale and the clearing is computed again."""
    ex, clock, _ = _market(tmp_path)
    _requests(ex)
    snap = snapshot(ex.store, clock(), ex.slot() + 1)
    out = compute(snap, ex.settings)
    c = ex.store.contracts(("pending",))[0]
    ex.join("p9")
    spare = ex.add_node("p9", "n", 8, 64)
    with ex.store.transaction():  # a move (its node is another provider's only to keep the test short)
        ex.store.move_contract(c["id"], spare, clock(), "test")
    assert commit(ex.store, snap, out, ex.settings) is None
    ex.clear()
    assert replay_session(ex.store) == contract_terms(ex.store)
