"""The filtered, paged read of one table (:mod:`marketsched.platform.query`) against a plain
reference: a Python filter of every row, on random tables with ties (few owners, few states)."""

from __future__ import annotations

import random
import sqlite3

import pytest

from marketsched.platform.query import select, where

STATES = ("queued", "running", "completed", "cancelled")
OWNERS = ("alice", "bob", "carol")


def table(rng: random.Random) -> tuple[sqlite3.Connection, list[tuple]]:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, owner TEXT, state TEXT, x INTEGER)")
    rows = [(i, rng.choice(OWNERS), rng.choice(STATES), rng.randint(0, 3)) for i in range(1, rng.randint(0, 30) + 1)]
    conn.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", rows)
    return conn, rows


def reference(rows, owner, other, states, before, limit):
    """Every row, in id order, kept by each filter that is given; then the last ``limit``."""
    kept = [r for r in sorted(rows)
            if (owner is None or r[1] == owner)
            and (other is None or r[1] == other or r[3] == 2)
            and (not states or r[2] in states)
            and (before is None or r[0] < before)]
    return kept if limit is None else kept[max(0, len(kept) - limit):]


def test_select_equals_a_plain_filter_on_random_tables_with_ties():
    rng = random.Random(20261128)
    for _ in range(200):
        conn, rows = table(rng)
        owner = rng.choice((None, *OWNERS))
        other = rng.choice((None, *OWNERS))  # a clause taking two values: owner = ? OR x = ?
        states = rng.choice((None, (), tuple(rng.sample(STATES, rng.randint(1, 3)))))
        before = rng.choice((None, rng.randint(0, 32)))
        limit = rng.choice((None, 0, rng.randint(1, 12)))
        sql, params = select("t", ("id", "owner", "state", "x"),
                             [("owner = ?", owner), ("(owner = ? OR x = ?)", None if other is None else (other, 2))],
                             states, before, limit)
        got = conn.execute(sql, params).fetchall()
        assert got == reference(rows, owner, other, states, before, limit), (sql, params)
        conn.close()


@pytest.mark.parametrize("conds,states,before,expected", [
    ((), None, None, ("", [])),
    ((), (), None, ("", [])),
    ([("a = ?", None)], None, None, ("", [])),  # None: no such filter
    ([("a = ?", 0), ("b = ?", "")], None, None, (" WHERE a = ? AND b = ?", [0, ""])),  # falsy values still filter
    ([("a = ?", (None,))], None, None, (" WHERE a = ?", [None])),  # a tuple is never left out
    ([("(a = ? OR b = ?)", (1, 2))], ("x", "y"), 5, (" WHERE (a = ? OR b = ?) AND state IN (?, ?) AND id < ?",
                                                     [1, 2, "x", "y", 5])),
])
def test_where_keeps_each_given_filter_in_order(conds, states, before, expected):
    assert where(conds, states, before) == expected
