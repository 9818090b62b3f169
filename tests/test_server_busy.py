"""A busy database answers 503 with Retry-After, never 500, on both servers (the exchange's API
and the live market's), in-process on 127.0.0.1: a second connection holds the database's
write lock (``BEGIN IMMEDIATE``, as another process committing a clearing would) while the
parties write and read. Writes wait a bounded time, then are refused with nothing done and no
traceback in the log; reads answer meanwhile (write-ahead log); once the lock is released the
same writes go through. The check is by status, not by a bound in seconds."""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from contextlib import contextmanager

from exchange_helpers import make_exchange
from live_helpers import http, request
from marketsched.exchange.api import ExchangeServer, ExchangeService, issue_token
from marketsched.exchange.store import ExchangeStore
from marketsched.live.broker import Broker, MarketConfig
from marketsched.live.cli import Client, ClientError
from marketsched.live.server import MarketServer
from marketsched.platform.clock import FakeClock
from marketsched.platform.http import RETRY_AFTER
from test_live_exactly_once import ScriptedExecutor


@contextmanager
def write_lock(path):
    """Another connection holds ``path``'s write lock inside the block."""
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        other.execute("ROLLBACK")
        other.close()


def call(srv, method, path, token, body=None):
    """``(status, headers, JSON)`` of one request."""
    raw = json.dumps(body).encode() if body is not None else b""
    status, headers, out = http(srv.port, request(method, path, raw, token, "Connection: close\r\n"))
    return status, headers, json.loads(out) if out else None


def assert_busy(got) -> None:
    status, headers, body = got
    assert status == 503, got
    assert headers["retry-after"] == str(RETRY_AFTER)
    assert "busy" in body["error"] and "nothing was done" in body["error"] and body["retry_after"] == RETRY_AFTER


def no_tracebacks(caplog) -> list[str]:
    """The busy answers' log lines; none carries a traceback."""
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    return [r.getMessage() for r in caplog.records if "busy" in r.getMessage()]


def test_exchange_writes_get_503_with_retry_after_while_reads_answer(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    ex, clock, _ = make_exchange(tmp_path / "x.db")
    ex.join("p1")
    ex.add_node("p1", "n0", 4, 100)
    user = issue_token(ex.store, "user", "alice", 0.0)
    provider = issue_token(ex.store, "provider", "p1", 0.0)
    service = ExchangeService(ExchangeStore(tmp_path / "x.db"), clock, busy_wait=0.2)
    srv = ExchangeServer(service, "127.0.0.1", 0)
    srv.serve_in_thread()
    slot = ex.slot()
    request_body = {"value": 2, "cpu": 1, "first_slot": slot + 2, "last_slot": slot + 3, "command": "true"}
    offer_body = {"node": "n0", "reserve": 1, "first_slot": slot + 1, "last_slot": slot + 9}
    try:
        with write_lock(tmp_path / "x.db"):
            assert_busy(call(srv, "POST", "/api/requests", user, request_body))  # a user's write
            assert_busy(call(srv, "POST", "/api/offers", provider, offer_body))  # a provider's write
            assert_busy(call(srv, "POST", "/api/nodes", provider, {"name": "n1", "cpu": 1, "mem": 1}))
            # reads answer while the lock is held
            assert call(srv, "GET", "/api/orders", user)[0] == 200
            assert call(srv, "GET", "/api/nodes", provider)[2][0]["name"] == "n0"
            status, _, market = call(srv, "GET", "/api/market", None)
            assert status == 200 and market["slot"] == slot
        assert ex.store.orders() == []  # nothing of the refused writes was done
        lines = no_tracebacks(caplog)
        assert len(lines) == 3 and all("exchange's database is busy" in line for line in lines)
        # the lock released, the same writes go through
        status, _, order = call(srv, "POST", "/api/requests", user, request_body)
        assert status == 200 and order["owner"] == "alice"
        assert call(srv, "POST", "/api/offers", provider, offer_body)[0] == 200
        # the command line's client says it: busy, try again
        with write_lock(tmp_path / "x.db"):
            try:
                Client(srv.url, user).post(f"/api/orders/{order['id']}/cancel", {})
            except ClientError as exc:
                assert exc.status == 503 and "busy" in str(exc) and "try again" in str(exc)
            else:
                raise AssertionError("a cancellation went through while the database was locked")
        assert ex.store.order(order["id"])["state"] == "open"
    finally:
        srv.shutdown()
        service.store.close()
        ex.store.close()


def test_live_market_submit_gets_503_with_retry_after_while_reads_answer(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    b = Broker(tmp_path / "market", MarketConfig(single_user=True), clock=FakeClock(0.0),
               executor=ScriptedExecutor(tmp_path / "jobs"))
    token = b.add_user(True, "alice", 100)["token"]
    srv = MarketServer(b, "127.0.0.1", 0)
    srv.serve_in_thread()
    try:
        with write_lock(tmp_path / "market" / "market.db"):
            assert_busy(call(srv, "POST", "/api/jobs", token, {"bid": 1.0, "command": "true"}))
            assert call(srv, "GET", "/api/price", token)[0] == 200  # a read answers meanwhile
            assert call(srv, "GET", "/api/jobs", token)[2] == []
        lines = no_tracebacks(caplog)
        assert len(lines) == 1 and "/api/jobs" in lines[0] and "database is locked" in lines[0]
        status, _, job = call(srv, "POST", "/api/jobs", token, {"bid": 1.0, "command": "true"})
        assert status == 200 and job["owner"] == "alice"
        assert [j["id"] for j in call(srv, "GET", "/api/jobs", token)[2]] == [job["id"]]
        # the broker itself held (its loop in a long step): a write waits for it no longer either
        held, release = threading.Event(), threading.Event()

        def hold():
            with b.lock:
                held.set()
                release.wait()

        holder = threading.Thread(target=hold)
        holder.start()
        held.wait()
        try:
            got = call(srv, "POST", "/api/jobs", token, {"bid": 1.0, "command": "true"})
        finally:
            release.set()
            holder.join()
        assert_busy(got)
        assert "the market is busy" in got[2]["error"]
        assert len(call(srv, "GET", "/api/jobs", token)[2]) == 1  # nothing was done
        no_tracebacks(caplog)
    finally:
        srv.shutdown()
        b.store.close()


def test_a_busy_database_error_from_any_write_is_a_503(tmp_path, monkeypatch, caplog):
    """SQLite's busy errors raised anywhere in a handler (here the exchange's own write) are
    503; another database error stays a 500 (a bug or a damaged file, logged with its
    traceback)."""
    caplog.set_level(logging.INFO)
    ex, clock, _ = make_exchange(tmp_path / "x.db")
    user = issue_token(ex.store, "user", "alice", 0.0)
    service = ExchangeService(ExchangeStore(tmp_path / "x.db"), clock, busy_wait=0.0)
    errors = iter([sqlite3.OperationalError("database is locked"), sqlite3.OperationalError("disk I/O error")])

    def fails(*args):
        raise next(errors)

    monkeypatch.setattr(service.exchange, "submit_request", fails)
    srv = ExchangeServer(service, "127.0.0.1", 0)
    srv.serve_in_thread()
    body = {"value": 2, "cpu": 1, "first_slot": ex.slot() + 2, "last_slot": ex.slot() + 3, "command": "true"}
    try:
        assert_busy(call(srv, "POST", "/api/requests", user, body))
        status, headers, out = call(srv, "POST", "/api/requests", user, body)
        assert status == 500 and "retry-after" not in headers and "disk I/O error" in out["error"]
    finally:
        srv.shutdown()
        service.store.close()
        ex.store.close()
