"""The exchange's database: its schema version and upgrades (an old database is upgraded on
opening, a newer one refused), and retention (cancelled and expired requests keep only their
command's digest, so submitting and cancelling large commands cannot grow the database)."""

from __future__ import annotations

import hashlib
import json
import sqlite3

import pytest
from click.testing import CliRunner

from exchange_helpers import make_exchange
from marketsched.cli import main
from marketsched.exchange.orders import MAX_COMMAND_BYTES
from marketsched.exchange.replay import contract_terms, replay_session
from marketsched.exchange.store import KEPT_CANCELLED, SCHEMA_KEY, SCHEMA_VERSION, ExchangeStore

CYCLES = 10_000


def _size(path) -> int:
    """The database file's size once its write-ahead log is folded in and emptied."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return path.stat().st_size


def test_submit_and_cancel_cycles_do_not_grow_the_database(tmp_path):
    """10,000 requests with 64 KiB commands, each cancelled at once between two clearings: the
    database grows by less than 1 MB (before: by each command, about 64 MB; then by each order's
    row, about 190 bytes a cycle). The newest ``KEPT_CANCELLED`` keep their rows with the
    command's SHA-256 and length, the older ones are counted in the owner's summary; an order a
    clearing saw is kept whole; the replay, the books and the status's order counts stay exact."""
    data = tmp_path / "ex"
    ex, clock, _ = make_exchange(data, mechanism="k-pricing")
    ex.join("p1")
    ex.add_node("p1", "n0", 2, 100)
    command = "true #" + "x" * (MAX_COMMAND_BYTES - 6)
    digest = hashlib.sha256(command.encode()).hexdigest()
    slot = ex.slot()
    ex.submit_offer("p1", "n0", 1.0, slot + 1, slot + 50)
    seen = ex.submit_request("mallory", 0.5, 1, 0, slot + 2, slot + 3, "echo seen")  # below the reserve
    ex.clear()  # a clearing sees it ...
    ex.cancel("mallory", seen)  # ... so its cancellation is kept for the replay
    filled = ex.submit_request("alice", 9.0, 1, 0, slot + 2, slot + 3, "echo filled")

    def cycle():
        oid = ex.submit_request("mallory", 1.0, 1, 0, slot + 2, slot + 3, command)
        ex.cancel("mallory", oid)
        return oid

    first = [cycle() for _ in range(KEPT_CANCELLED + 10)]  # the tables' first pages and the kept rows
    before = _size(data / "exchange.db")
    ids = [cycle() for _ in range(CYCLES)]
    growth = _size(data / "exchange.db") - before
    assert growth < 1_000_000, growth
    for oid in ids[-KEPT_CANCELLED:]:
        o = ex.store.order(oid)
        assert (o["state"], o["command"], o["command_sha256"], o["command_bytes"]) == (
            "cancelled", "", digest, MAX_COMMAND_BYTES)
    assert ex.store.order(first[0]) is None and ex.store.order(ids[-KEPT_CANCELLED - 1]) is None
    retired = len(first) + CYCLES - KEPT_CANCELLED
    assert ex.store.retired() == {("mallory", "request"): {
        "orders": retired, "command_bytes": retired * MAX_COMMAND_BYTES, "last_id": ids[-KEPT_CANCELLED - 1]}}
    assert ex.store.order(seen)["state"] == "cancelled"
    ex.submit_request("bob", 0.5, 1, 0, slot + 2, slot + 3, "true")  # below the reserve: not filled
    ex.clear()
    assert [c["request_id"] for c in ex.store.contracts()] == [filled]
    assert replay_session(ex.store) == contract_terms(ex.store)
    ex.store.check_books()
    status = json.loads(CliRunner().invoke(main, ["exchange", "status", str(data), "--json"]).output)
    assert status["orders"]["request:cancelled"] == 1 + len(first) + CYCLES  # the statement counts retired ones
    ex.store.close()


def test_expired_requests_keep_their_digest_filled_ones_their_command_and_replay_holds(tmp_path):
    ex, clock, _ = make_exchange(tmp_path / "x.db", mechanism="pay-as-bid")
    ex.join("p1")
    ex.add_node("p1", "n0", 4, 100)
    slot = ex.slot()
    ex.submit_offer("p1", "n0", 1.0, slot + 1, slot + 4)
    filled = ex.submit_request("alice", 9.0, 2, 0, slot + 1, slot + 2, "echo filled")
    late = ex.submit_request("bob", 9.0, 8, 0, slot + 1, slot + 1, "echo too-big")  # 8 CPUs: never fits
    ex.tick()
    assert ex.store.order(filled)["state"] == "filled" and ex.store.order(filled)["command"] == "echo filled"
    clock.advance(10 * ex.settings["slot_seconds"])
    ex.tick()
    o = ex.store.order(late)
    assert o["state"] == "expired" and o["command"] == ""
    assert o["command_sha256"] == hashlib.sha256(b"echo too-big").hexdigest() and o["command_bytes"] == 12
    assert replay_session(ex.store) == contract_terms(ex.store)  # replay needs no command
    ex.store.close()


def _previous_schema(path) -> None:
    """Make ``path`` a database as the code before schema versions left it: no version, no
    digest columns (an order in it)."""
    ex, _, _ = make_exchange(path)
    ex.submit_request("alice", 1.0, 1, 0, ex.slot() + 2, ex.slot() + 3, "echo old")
    ex.store.close()
    conn = sqlite3.connect(path)
    conn.execute("ALTER TABLE ex_orders DROP COLUMN command_sha256")
    conn.execute("ALTER TABLE ex_orders DROP COLUMN command_bytes")
    conn.execute("DROP TABLE ex_moves")
    conn.execute("DROP TABLE ex_retired")
    conn.execute("DROP INDEX ex_orders_retire")
    conn.execute("ALTER TABLE ex_orders DROP COLUMN retire")
    conn.execute("DROP TABLE ex_egg_runs")
    conn.execute("DROP TABLE ex_runs")
    conn.execute("DROP TABLE ex_egg_contracts")
    conn.execute("DROP TABLE ex_egg_events")
    conn.execute("DROP TABLE ex_asks")
    conn.execute("DROP TABLE ex_period_messages")
    conn.execute("DELETE FROM meta WHERE key = ?", (SCHEMA_KEY,))
    conn.commit()
    conn.close()


def test_an_old_database_is_upgraded_and_a_newer_one_refused(tmp_path):
    path = tmp_path / "x.db"
    _previous_schema(path)
    store = ExchangeStore(path)
    assert store.schema_version() == SCHEMA_VERSION == 7
    assert store.moves() == []  # version 3: the moves table
    assert store.rows("SELECT COUNT(*) FROM ex_egg_events") == [(0,)]  # version 4: Egg mode's tables
    assert store.rows("SELECT COUNT(*) FROM ex_asks") == [(0,)]  # version 5: the provider agents' tables
    assert store.rows("SELECT COUNT(*) FROM ex_runs") == [(0,)]  # version 6: the agents' contract runs
    assert store.rows("SELECT COUNT(*) FROM ex_egg_runs") == [(0,)]  # version 7: Egg contracts on agents
    (o,) = store.orders()
    assert (o["command"], o["command_sha256"], o["command_bytes"]) == ("echo old", None, None)
    with store.transaction():
        store.close_order(o["id"], "cancelled", 5.0)
    assert store.order(o["id"])["command_sha256"] == hashlib.sha256(b"echo old").hexdigest()
    store.close()
    store = ExchangeStore(path)  # opening again changes nothing
    assert store.schema_version() == SCHEMA_VERSION
    store.ledger.set_meta(SCHEMA_KEY, 99)
    store.close()
    with pytest.raises(RuntimeError, match="schema version 99, newer than this marketsched understands"):
        ExchangeStore(path)


def test_a_newer_database_is_refused_by_the_command_line_with_an_error(tmp_path):
    data = tmp_path / "ex"
    assert CliRunner().invoke(main, ["exchange", "init", str(data)]).exit_code == 0
    store = ExchangeStore(data)
    store.ledger.set_meta(SCHEMA_KEY, SCHEMA_VERSION + 1)
    store.close()
    r = CliRunner().invoke(main, ["exchange", "status", str(data)])
    assert r.exit_code == 1 and "newer than this marketsched understands" in r.output, r.output
    assert "Traceback" not in r.output
