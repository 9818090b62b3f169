"""What a market attached to the live broker (``market serve --mechanism ...``: a mechanism
with its own tables beside the broker's users, ledger, lock and server) needs besides its
mechanism: its own job and event tables, its loop thread, the command line of a submission, and
the collection of its HTTP routes. Used by the DLGM and EES markets
(:mod:`marketsched.live.dlgm_service`, :mod:`marketsched.live.ees_service` and their
``*_api`` modules)."""

from __future__ import annotations

import shlex
import threading
from typing import Any

from marketsched.platform import validation
from marketsched.platform.http import Route
from marketsched.platform.ledger import jobs_query
from marketsched.platform.query import select
from marketsched.platform.rounds import start_rounds
from marketsched.platform.validation import MarketError

EVENT_COLUMNS = ("id", "job_id", "t", "kind", "detail")


class JobTables:
    """An attached market's own tables in the broker's store (same connection, same
    transactions): ``NAME_jobs`` (``id``, then ``columns``: ``(name, SQL type)`` pairs) and
    ``NAME_events`` (:data:`EVENT_COLUMNS`), each indexed by owner and job. The broker's restart
    recovery reads ``jobs`` and never sees them. Everything else (money, meta, a market's other
    tables) is the store's: attributes this class lacks are the store's.

    ``insert_job`` takes the ledger store's arguments ``(owner, bid, procs, runtime, command,
    t)``; ``submit`` names the column each goes to (None: not kept) and ``initial`` gives the
    other columns' values at submission. ``what`` names the jobs in errors ("DLGM job")."""

    def __init__(self, store, name: str, what: str, columns: tuple[tuple[str, str], ...],
                 submit: tuple[str | None, ...], initial: dict):
        self.store, self.name, self.what = store, name, what
        self.columns = ("id", *(c for c, _ in columns))
        self._submit = submit
        self._initial = initial
        pk = "BIGSERIAL PRIMARY KEY" if store.kind == "postgresql" else "INTEGER PRIMARY KEY AUTOINCREMENT"
        cols = "".join(f",\n    {c} {sql}" for c, sql in columns)
        schema = (f"CREATE TABLE IF NOT EXISTS {name}_jobs (\n    id {pk}{cols}\n);\n"
                  f"CREATE INDEX IF NOT EXISTS {name}_jobs_owner ON {name}_jobs(owner);\n"
                  f"CREATE TABLE IF NOT EXISTS {name}_events (\n    id {pk},\n    job_id BIGINT NOT NULL,\n"
                  "    t REAL NOT NULL,\n    kind TEXT NOT NULL,\n    detail TEXT NOT NULL\n);\n"
                  f"CREATE INDEX IF NOT EXISTS {name}_events_job ON {name}_events(job_id)")
        if store.kind == "postgresql":
            schema = schema.replace(" REAL", " DOUBLE PRECISION")
        with store.transaction():
            for stmt in schema.split(";"):
                store._exec(stmt)

    def __getattr__(self, name):
        return getattr(self.store, name)

    def insert_job(self, owner: str, bid: float, procs: int, runtime: float, command: str, t: float) -> int:
        given = {c: v for c, v in zip(self._submit, (owner, bid, procs, runtime, command, t)) if c is not None}
        fields = {**given, **self._initial}
        cur = self.store._exec(f"INSERT INTO {self.name}_jobs ({', '.join(fields)}) VALUES "
                               f"({', '.join('?' * len(fields))})" + self.store._lastid, tuple(fields.values()))
        return int(cur.fetchone()[0])

    def update_job(self, job_id: int, **fields) -> None:
        bad = set(fields) - set(self.columns)
        if bad:
            raise KeyError(f"no {self.what} column(s) {sorted(bad)}")
        sets = ", ".join(f"{k} = ?" for k in fields)
        self.store._exec(f"UPDATE {self.name}_jobs SET {sets} WHERE id = ?", (*fields.values(), job_id))

    def add_event(self, job_id: int, t: float, kind: str, detail: str = "") -> None:
        self.store._exec(f"INSERT INTO {self.name}_events (job_id, t, kind, detail) VALUES (?, ?, ?, ?)",
                         (job_id, t, kind, detail))

    def events(self, job_id: int | None = None, kinds=None) -> list[dict]:
        """Events, oldest first: of ``job_id`` only, of ``kinds`` only (each optional)."""
        kind_in = ("kind IN (" + ", ".join("?" * len(kinds)) + ")", tuple(kinds)) if kinds else ("", None)
        sql, params = select(f"{self.name}_events", EVENT_COLUMNS, [("job_id = ?", job_id), kind_in])
        return [dict(zip(EVENT_COLUMNS, r)) for r in self.store._rows(sql, params)]

    def job(self, job_id: int) -> dict | None:
        rows = self.store._rows(f"SELECT {', '.join(self.columns)} FROM {self.name}_jobs WHERE id = ?", (job_id,))
        return dict(zip(self.columns, rows[0])) if rows else None

    def jobs(self, owner: str | None = None, limit: int | None = None, states=None,
             before: int | None = None) -> list[dict]:
        """Jobs, oldest first (``owner``: only theirs; ``limit``: the newest N; ``states``: only
        these; ``before``: only ids below it)."""
        sql, params = jobs_query(f"{self.name}_jobs", self.columns, owner, states, limit, before)
        return [dict(zip(self.columns, r)) for r in self.store._rows(sql, params)]


def command_line(command, max_bytes: int) -> str:
    """A submission's command: a string, or a list of arguments quoted into one; 400 for
    anything else, 413 beyond ``max_bytes`` (the market then checks it is not empty)."""
    if isinstance(command, list):
        if not all(isinstance(c, str) for c in command):
            raise MarketError("command must be a string or a list of strings")
        command = shlex.join(command) if command else ""
    if isinstance(command, str) and len(validation.utf8(command, "command")) > max_bytes:
        raise MarketError(f"command is longer than the {max_bytes} bytes this market accepts", 413)
    return command


def collector(routes: list[Route]):
    """A decorator ``route(method, path, summary, **kw)`` that appends each handler to ``routes``."""

    def route(method: str, path: str, summary: str, **kw):
        def deco(f):
            routes.append(Route(method, path, f, summary, **kw))
            return f

        return deco

    return route


def attached(broker, name: str, serve: str):
    """The market ``name`` attached to ``broker`` (``broker.ees``, ``broker.dlgm``); 404 naming
    how to start one (``serve``: the ``market serve`` options) when this market does not run it."""
    svc = getattr(broker, name, None)
    if svc is None:
        raise MarketError(f"this market does not run {name.upper()} (start it with {serve})", 404)
    return svc


class Loop:
    """The loop thread of an attached market: it sleeps until ``next_event()`` (market time, at
    most 0.5 s, woken by the executor) and calls ``step()``; an error is printed and kept in
    :attr:`last_error`, and the loop goes on. Subclasses set ``broker``, ``executor``, ``name``
    and define ``next_event`` and ``step``."""

    broker: Any
    executor: Any
    name: str
    _thread: threading.Thread | None = None
    last_error: str | None = None

    def next_event(self) -> float:
        raise NotImplementedError

    def step(self) -> None:
        raise NotImplementedError

    def start(self):
        self._stopping = threading.Event()
        self._thread = start_rounds(self, self.name, self._wait, self.step)
        return self

    def _wait(self) -> bool:
        """Wait for the next round (``next_event()``, at most 0.5 s, woken by the executor);
        True: the market is stopping."""
        if self._stopping.is_set():
            return True
        with self.broker.lock:
            wait = min(max(self.next_event() - float(self.broker.wall()), 0.0), 0.5)
        self.executor.wait(wait)
        return self._stopping.is_set()

    def stop(self, kill: bool = False) -> None:
        """Stop the loop; jobs run on (a restarted market re-attaches them), or with ``kill``
        their processes are killed."""
        if self._thread is not None:
            self._stopping.set()
            self.executor.wake()
            self._thread.join(timeout=10)
        self.executor.shutdown(kill=kill)
