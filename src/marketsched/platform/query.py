"""The SQL of a filtered, paged read of one table, oldest row first: the ledger's jobs and
entries, the exchange's orders and contracts, Egg mode's contracts and the day-ahead market's
bids are all read this way.

The SQL is the subset SQLite and PostgreSQL both understand (:mod:`.ledger`); placeholders are
written ``?``. Column and table names come from the code, never from a request; every value
from a request is a parameter.
"""

from __future__ import annotations

from collections.abc import Sequence


def where(conds: Sequence[tuple[str, object]] = (), states=None, before: int | None = None) -> tuple[str, list]:
    """``(" WHERE ...", params)``, or ``("", [])`` when nothing filters.

    Steps: each ``(clause, value)`` of ``conds`` whose value is not None, in order (a tuple
    value gives the clause's parameters in order, e.g. ``("a = ? OR b = ?", (x, x))``; any
    other value is the clause's one parameter); then ``state IN (states)`` when ``states`` is
    non-empty; then ``id < before`` when ``before`` is given; all joined by AND (a clause
    with OR brings its own parentheses)."""
    cond: list[str] = []
    params: list[object] = []
    for clause, value in conds:
        if value is None:
            continue
        cond.append(clause)
        params += list(value) if isinstance(value, tuple) else [value]
    if states:
        cond.append("state IN (" + ", ".join("?" * len(states)) + ")")
        params += list(states)
    if before is not None:
        cond.append("id < ?")
        params.append(before)
    return (" WHERE " + " AND ".join(cond)) if cond else "", params


def select(table: str, columns: Sequence[str], conds: Sequence[tuple[str, object]] = (), states=None,
           before: int | None = None, limit: int | None = None) -> tuple[str, list]:
    """``(sql, params)`` reading ``columns`` of ``table``'s rows that pass :func:`where`
    (``conds``, ``states``, ``before``), in id order; with ``limit``, only the newest
    ``limit`` of them (still in id order)."""
    cond, params = where(conds, states, before)
    sql = f"SELECT {', '.join(columns)} FROM {table}{cond} ORDER BY id"
    if limit is not None:
        sql = f"SELECT * FROM ({sql} DESC LIMIT {int(limit)}) AS last ORDER BY id"
    return sql, params
