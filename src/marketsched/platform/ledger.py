"""The live market's database: accounts, a double-entry ledger, jobs, events, price history.

Storage
-------
SQLite in WAL mode in the market's data folder by default, with ``synchronous=FULL`` (a
committed transaction survives a crash of the broker and of the machine: one fsync per commit)
or, by choice, ``synchronous=NORMAL`` (a committed transaction survives a crash of the broker,
e.g. kill -9, but the last ones may be lost if the machine loses power; no fsync per commit);
PostgreSQL when given a ``postgresql://`` URL, for a market whose data must live on a shared
server. The PostgreSQL driver (``psycopg``, version 3) is imported only then, and is an optional
dependency (``pip install 'marketsched[postgres]'``). The SQL is the subset both understand;
placeholders are written ``?`` and translated for psycopg.

Money
-----
Amounts are whole **micro-units** (1e-6 of the market's currency unit) in the database, so sums
are exact and the ledger balances to the last unit. The mechanism's payments are floats; the
broker posts ``round(payment * 1e6)`` cumulatively, so a job's posted total is its payment
rounded to a micro-unit.

Double entry
------------
Every entry moves an amount from one account to another (``from_account`` -> ``to_account``);
the ``accounts`` table holds each balance and is updated in the same transaction as the entry,
so the sum of all balances is always 0. Accounts:

* ``external:deposits``: where deposits come from (its balance is minus all deposits);
* ``user:NAME``: a user's money;
* ``provider:revenue``: what the market has charged for running time.

Hence ``sum(user balances) + revenue = total deposits`` at every commit
(:meth:`Store.check_books` verifies it and recomputes every balance from the entries).

Bounds
------
Every balance stays within ``MAX_BALANCE`` (1e12 currency units, 1e18 micro-units) in absolute
value, below 2**63 (about 9.22e18), so a sum of amounts never overflows a 64-bit integer: SQLite
would silently store an overflowing sum as a floating-point number (it did, after 9,301
deposits of 1e9), PostgreSQL would refuse it. :meth:`Store.post` refuses an entry that would
cross the bound; since every account's balance is at most the total deposited, the broker
refuses a deposit that would take the total past it.

Schema version
--------------
The database records its schema version (``meta`` key ``schema_version``; a database made
before versions were recorded is version 1). Opening a database applies the missing upgrades
in order, in one transaction, on SQLite and PostgreSQL alike; a database newer than this code
is refused. Version 2 added ``users.unix_user`` (the Unix account a market user is, unique);
version 3, ``jobs.command_sha256`` and ``jobs.command_bytes`` (retention, below).

Retention
---------
A job's command is stored whole while the job is active, and after it has run to its end
(completed, or failed: what the user paid for, and what an audit reads), within its owner's
quota of kept command bytes (``MarketConfig.kept_command_bytes``, 16 MiB: past it, the
commands of the owner's oldest ended jobs give way, :meth:`Store.retire_oldest_commands`, found
through the partial index ``jobs_kept``). A job that is cancelled, or ends without ever being
launched, keeps only its command's SHA-256 and length in bytes (:meth:`Store.retire_command`;
``command`` becomes empty; the user who cancelled it has the command, and the digest shows
which it was). Its row, events and ledger entries stay, so
the books, the replay (which reads bids, times and run times, never commands) and the audit
are unchanged, but submitting and cancelling large commands (free, or nearly: a cancel within
the first charge interval costs a fraction of a second's price) cannot grow the database
without limit: SQLite reuses the pages the command took.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psycopg

from marketsched.platform.files import private_file, tighten
from marketsched.platform.query import select

MICRO = 1_000_000
MAX_BALANCE = 10**12 * MICRO  # micro-units; any account, in absolute value (< 2**63)
SCHEMA_VERSION = 4
BUSY_TIMEOUT = 30.0  # seconds a SQLite connection waits for another's lock (an API write waits less: live.api.BUSY_WAIT)
DEPOSITS = "external:deposits"
REVENUE = "provider:revenue"

ACTIVE_STATES = ("queued", "running", "preempted", "held")
FINAL_STATES = ("completed", "cancelled", "failed")
# an ended job whose command is kept whole (see Retention; the partial index jobs_kept lists them)
_KEPT = "command_sha256 IS NULL AND state IN ('completed', 'cancelled', 'failed')"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS users (
    name TEXT PRIMARY KEY,
    token_hash TEXT NOT NULL UNIQUE,
    is_admin INTEGER NOT NULL,
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS accounts (name TEXT PRIMARY KEY, balance BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS entries (
    id {pk},
    t REAL NOT NULL,
    kind TEXT NOT NULL,
    from_account TEXT NOT NULL REFERENCES accounts(name),
    to_account TEXT NOT NULL REFERENCES accounts(name),
    amount BIGINT NOT NULL CHECK (amount > 0),
    job_id BIGINT,
    memo TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS entries_from ON entries(from_account);
CREATE INDEX IF NOT EXISTS entries_to ON entries(to_account);
CREATE INDEX IF NOT EXISTS entries_job ON entries(job_id);
CREATE TABLE IF NOT EXISTS jobs (
    id {pk},
    owner TEXT NOT NULL REFERENCES users(name),
    bid REAL NOT NULL,
    procs INTEGER NOT NULL,
    estimate REAL,
    command TEXT NOT NULL,
    submit_t REAL NOT NULL,
    state TEXT NOT NULL,
    first_start REAL,
    end_t REAL,
    run_seconds REAL NOT NULL,
    preemptions INTEGER NOT NULL,
    attempts INTEGER NOT NULL,
    charged BIGINT NOT NULL,
    unpaid BIGINT NOT NULL,
    exit_code INTEGER,
    pid INTEGER,
    start_ticks BIGINT,
    note TEXT NOT NULL,
    restartable INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS jobs_owner ON jobs(owner);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state);
CREATE TABLE IF NOT EXISTS events (
    id {pk},
    job_id BIGINT NOT NULL,
    t REAL NOT NULL,
    kind TEXT NOT NULL,
    detail TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_job ON events(job_id);
CREATE TABLE IF NOT EXISTS prices (
    id {pk},
    t REAL NOT NULL,
    price REAL NOT NULL,
    queued INTEGER NOT NULL,
    running INTEGER NOT NULL
);
"""

JOB_COLUMNS = ("id", "owner", "bid", "procs", "estimate", "command", "submit_t", "state", "first_start", "end_t",
               "run_seconds", "preemptions", "attempts", "charged", "unpaid", "exit_code", "pid", "start_ticks",
               "note", "command_sha256", "command_bytes", "restartable")


class Store:
    """One connection to the market's database, used under the broker's lock.

    ``where`` is a folder (SQLite file ``market.db`` in it), a ``.db`` file path, or a
    ``postgresql://`` URL.
    """

    def __init__(self, where, sync: str = "full"):
        where = str(where)
        if sync not in ("full", "normal"):
            raise ValueError(f"sync must be 'full' or 'normal', got {sync!r}")
        self._lock = threading.RLock()
        self._depth = 0
        self.conn: sqlite3.Connection | psycopg.Connection
        if where.startswith(("postgresql://", "postgres://")):
            try:
                import psycopg  # optional dependency, imported only for a PostgreSQL market
            except ImportError as exc:  # pragma: no cover - depends on the environment
                raise RuntimeError(
                    "a PostgreSQL market needs the psycopg driver: pip install 'marketsched[postgres]'"
                ) from exc
            self.kind = "postgresql"
            self.conn = psycopg.connect(where, autocommit=True)
            self.location = where.split("@")[-1]
            schema = _SCHEMA.format(pk="BIGSERIAL PRIMARY KEY").replace(" REAL", " DOUBLE PRECISION")
            self._lastid = " RETURNING id"
        else:
            path = Path(where)
            if path.suffix not in (".db", ".sqlite", ".sqlite3"):
                path.mkdir(parents=True, exist_ok=True)
                path = path / "market.db"
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
            self.kind = "sqlite"
            self.location = str(path)
            # 0600 whatever the umask; SQLite gives its -wal and -shm files the database's mode
            private_file(path)
            for extra in ("-wal", "-shm", "-journal"):
                tighten(f"{path}{extra}")
            self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT)
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute(f"PRAGMA synchronous={sync.upper()}")
            self.conn.execute("PRAGMA foreign_keys=ON")
            schema = _SCHEMA.format(pk="INTEGER PRIMARY KEY AUTOINCREMENT")
            self._lastid = " RETURNING id"
        with self.transaction():
            for stmt in schema.split(";"):
                if stmt.strip():
                    self._exec(stmt)
            self._upgrade()
            for acct in (DEPOSITS, REVENUE):
                self._ensure_account(acct)

    # ------------------------------------------------------------------ schema version
    def schema_version(self) -> int:
        return int(self.get_meta("schema_version", 1))

    def _upgrade(self) -> None:
        """Bring the schema to ``SCHEMA_VERSION`` (called inside the opening transaction; the
        base schema above is version 1, what every database before versions had)."""
        upgrade_schema(self, "the market's database", self.schema_version(), SCHEMA_VERSION, _UPGRADES,
                       lambda v: self.set_meta("schema_version", v))

    def _columns(self, table: str) -> set[str]:
        if self.kind == "sqlite":
            return {r[1] for r in self._rows(f"PRAGMA table_info({table})")}
        return {r[0] for r in self._rows(
            "SELECT column_name FROM information_schema.columns WHERE table_name = ? AND table_schema = current_schema()",
            (table,))}

    # ------------------------------------------------------------------ plumbing
    def _exec(self, sql: str, params=()):
        if self.kind == "postgresql":
            sql = sql.replace("?", "%s")
        return self.conn.execute(sql, params)

    def _rows(self, sql: str, params=()) -> list[tuple]:
        return list(self._exec(sql, params).fetchall())

    @contextmanager
    def transaction(self):
        """All writes inside commit together (nested uses join the outer transaction)."""
        with self._lock:
            if self._depth:
                self._depth += 1
                try:
                    yield
                finally:
                    self._depth -= 1
                return
            self._exec("BEGIN IMMEDIATE" if self.kind == "sqlite" else "BEGIN")
            self._depth = 1
            try:
                yield
            except BaseException:
                self._depth = 0
                self._exec("ROLLBACK")
                raise
            self._depth = 0
            try:
                self._exec("COMMIT")
            except BaseException:  # a failed COMMIT leaves the transaction open: close it
                self._exec("ROLLBACK")
                raise

    def close(self) -> None:
        self.conn.close()

    # ------------------------------------------------------------------ meta
    def get_meta(self, key: str, default=None):
        rows = self._rows("SELECT value FROM meta WHERE key = ?", (key,))
        return rows[0][0] if rows else default

    def set_meta(self, key: str, value) -> None:
        with self.transaction():
            self._exec("DELETE FROM meta WHERE key = ?", (key,))
            self._exec("INSERT INTO meta (key, value) VALUES (?, ?)", (key, str(value)))

    # ------------------------------------------------------------------ users
    def add_user(self, name: str, token_hash: str, is_admin: bool, t: float, unix_user: str | None = None) -> None:
        with self.transaction():
            self._exec("INSERT INTO users (name, token_hash, is_admin, created, unix_user) VALUES (?, ?, ?, ?, ?)",
                       (name, token_hash, int(is_admin), t, unix_user))
            self._ensure_account(user_account(name))

    def set_token_hash(self, name: str, token_hash: str) -> None:
        """Replace user ``name``'s token (by its hash): the old one stops working."""
        with self.transaction():
            self._exec("UPDATE users SET token_hash = ? WHERE name = ?", (token_hash, name))

    def unix_user(self, name: str) -> str | None:
        """The Unix account market user ``name``'s jobs run as (None: not mapped)."""
        rows = self._rows("SELECT unix_user FROM users WHERE name = ?", (name,))
        return rows[0][0] if rows else None

    def user_by_unix(self, unix_name: str) -> str | None:
        """The market user mapped to Unix account ``unix_name`` (None: nobody)."""
        rows = self._rows("SELECT name FROM users WHERE unix_user = ?", (unix_name,))
        return rows[0][0] if rows else None

    def user_by_token_hash(self, token_hash: str):
        rows = self._rows("SELECT name, is_admin FROM users WHERE token_hash = ?", (token_hash,))
        return (rows[0][0], bool(rows[0][1])) if rows else None

    def users(self) -> list[tuple[str, bool]]:
        return [(n, bool(a)) for n, a in self._rows("SELECT name, is_admin FROM users ORDER BY name")]

    # ------------------------------------------------------------------ ledger
    def _ensure_account(self, name: str) -> None:
        if not self._rows("SELECT 1 FROM accounts WHERE name = ?", (name,)):
            self._exec("INSERT INTO accounts (name, balance) VALUES (?, 0)", (name,))

    def post(self, t: float, kind: str, from_account: str, to_account: str, amount: int, job_id=None,
             memo: str = "") -> None:
        """One double entry: ``amount`` micro-units leave ``from_account`` and reach ``to_account``."""
        if isinstance(amount, bool) or not isinstance(amount, int) or amount <= 0:
            raise ValueError(f"a ledger entry moves a positive whole number of micro-units, got {amount!r}")
        with self.transaction():
            bal = dict(self._rows("SELECT name, balance FROM accounts WHERE name IN (?, ?)", (from_account, to_account)))
            for acct in (from_account, to_account):
                if acct not in bal:
                    raise ValueError(f"no ledger account {acct!r}")
            if bal[from_account] - amount < -MAX_BALANCE or bal[to_account] + amount > MAX_BALANCE:
                raise LedgerBoundError(
                    f"moving {amount} micro-units from {from_account} to {to_account} would take a balance past "
                    f"{MAX_BALANCE // MICRO:.0e} in absolute value, the most the ledger holds exactly")
            self._exec(
                "INSERT INTO entries (t, kind, from_account, to_account, amount, job_id, memo) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (t, kind, from_account, to_account, int(amount), job_id, memo),
            )
            self._exec("UPDATE accounts SET balance = balance - ? WHERE name = ?", (int(amount), from_account))
            self._exec("UPDATE accounts SET balance = balance + ? WHERE name = ?", (int(amount), to_account))

    def balances(self) -> dict[str, int]:
        return dict(self._rows("SELECT name, balance FROM accounts"))

    def balance(self, account: str) -> int:
        rows = self._rows("SELECT balance FROM accounts WHERE name = ?", (account,))
        if not rows:
            raise KeyError(f"no ledger account {account!r}")
        return rows[0][0]

    def entries(self, account: str | None = None, job_id=None, limit: int | None = None,
                before: int | None = None) -> list[dict]:
        """Entries, oldest first (``limit``: the newest N; ``before``: only ids below it)."""
        keys = ("id", "t", "kind", "from_account", "to_account", "amount", "job_id", "memo")
        either = None if account is None else (account, account)
        sql, params = select("entries", keys, [("(from_account = ? OR to_account = ?)", either), ("job_id = ?", job_id)],
                             before=before, limit=limit)
        return [dict(zip(keys, r)) for r in self._rows(sql, params)]

    def charged_by_job(self) -> dict[int, int]:
        """Each job's charges less its refunds (a job whose node failed before the market learnt
        it is refunded what was posted after the failure), micro-units."""
        return dict(self._rows(
            "SELECT job_id, SUM(CASE WHEN kind = 'refund' THEN -amount ELSE amount END) FROM entries "
            "WHERE kind IN ('charge', 'refund') GROUP BY job_id"))

    def check_books(self) -> dict[str, int]:
        """Verify the double entry: balances sum to 0 and each equals its entries' net flow.

        Returns ``{"deposits", "users", "revenue"}`` in micro-units; raises AssertionError
        naming the first account that does not add up.
        """
        bal = self.balances()
        flows: dict[str, int] = {a: 0 for a in bal}
        for frm, to, amount in self._rows("SELECT from_account, to_account, amount FROM entries"):
            flows[frm] -= amount
            flows[to] += amount
        for acct, b in bal.items():
            if not isinstance(b, int):
                raise AssertionError(f"account {acct}: balance {b!r} is not a whole number of micro-units "
                                     "(the database stored an overflowing sum as a float)")
            if flows.get(acct, 0) != b:
                raise AssertionError(f"account {acct}: balance {b} but its entries add up to {flows.get(acct, 0)}")
        if sum(bal.values()) != 0:
            raise AssertionError(f"balances add up to {sum(bal.values())}, not 0")
        users = sum(b for a, b in bal.items() if a.startswith("user:"))
        return {"deposits": -bal[DEPOSITS], "users": users, "revenue": bal[REVENUE]}

    # ------------------------------------------------------------------ jobs
    def insert_job(self, owner: str, bid: float, procs: int, estimate, command: str, submit_t: float,
                   restartable: bool = False) -> int:
        with self.transaction():
            cur = self._exec(
                "INSERT INTO jobs (owner, bid, procs, estimate, command, submit_t, state, run_seconds, preemptions, "
                "attempts, charged, unpaid, note, restartable) VALUES (?, ?, ?, ?, ?, ?, 'queued', 0, 0, 0, 0, 0, '', ?)"
                + self._lastid,
                (owner, bid, procs, estimate, command, submit_t, int(bool(restartable))),
            )
            return int(cur.fetchone()[0])

    def update_job(self, job_id: int, **fields) -> None:
        bad = set(fields) - set(JOB_COLUMNS)
        if bad:
            raise KeyError(f"no job column(s) {sorted(bad)}")
        sets = ", ".join(f"{k} = ?" for k in fields)
        with self.transaction():
            self._exec(f"UPDATE jobs SET {sets} WHERE id = ?", (*fields.values(), job_id))

    def retire_command(self, job_id: int) -> None:
        """Keep only the SHA-256 and the length of job ``job_id``'s command (see Retention)."""
        rows = self._rows("SELECT command FROM jobs WHERE id = ? AND command_sha256 IS NULL", (job_id,))
        if rows:
            digest, size = command_digest(rows[0][0])
            self._exec("UPDATE jobs SET command = '', command_sha256 = ?, command_bytes = ? WHERE id = ?",
                       (digest, size, job_id))

    def kept_command_bytes(self) -> dict[str, int]:
        """Per user, the bytes of the commands of ended jobs kept whole (see Retention)."""
        length = "length(CAST(command AS BLOB))" if self.kind == "sqlite" else "octet_length(command)"
        rows = self._rows(f"SELECT owner, SUM({length}) FROM jobs WHERE {_KEPT} GROUP BY owner")
        return {owner: int(n) for owner, n in rows}

    def retire_oldest_commands(self, owner: str, at_least: int) -> int:
        """Retire the commands of ``owner``'s oldest ended jobs kept whole until ``at_least``
        bytes are freed (or none is left); returns the bytes freed."""
        freed = 0
        while freed < at_least:
            rows = self._rows(f"SELECT id, command FROM jobs WHERE owner = ? AND {_KEPT} ORDER BY id LIMIT 64", (owner,))
            if not rows:
                break
            for job_id, command in rows:
                self.retire_command(job_id)
                freed += command_digest(command)[1]
                if freed >= at_least:
                    break
        return freed

    def job(self, job_id: int) -> dict | None:
        rows = self._rows(f"SELECT {', '.join(JOB_COLUMNS)} FROM jobs WHERE id = ?", (job_id,))
        return dict(zip(JOB_COLUMNS, rows[0])) if rows else None

    def jobs(self, owner: str | None = None, states=None, limit: int | None = None,
             before: int | None = None) -> list[dict]:
        """Jobs, oldest first (``limit``: the newest N; ``before``: only ids below it)."""
        sql, params = jobs_query("jobs", JOB_COLUMNS, owner, states, limit, before)
        return [dict(zip(JOB_COLUMNS, r)) for r in self._rows(sql, params)]

    def count_jobs(self) -> dict[str, int]:
        return dict(self._rows("SELECT state, COUNT(*) FROM jobs GROUP BY state"))

    # ------------------------------------------------------------------ events and prices
    def add_event(self, job_id: int, t: float, kind: str, detail: str = "") -> None:
        with self.transaction():
            self._exec("INSERT INTO events (job_id, t, kind, detail) VALUES (?, ?, ?, ?)", (job_id, t, kind, detail))

    def events(self, job_id: int | None = None, limit: int | None = None) -> list[dict]:
        """Events, oldest first (``limit``: the newest N)."""
        keys = ("id", "job_id", "t", "kind", "detail")
        sql, params = select("events", keys, [("job_id = ?", job_id)], limit=limit)
        return [dict(zip(keys, r)) for r in self._rows(sql, params)]

    def count_events(self, job_id: int) -> int:
        return int(self._rows("SELECT COUNT(*) FROM events WHERE job_id = ?", (job_id,))[0][0])

    def add_price(self, t: float, price: float, queued: int, running: int) -> None:
        with self.transaction():
            self._exec("INSERT INTO prices (t, price, queued, running) VALUES (?, ?, ?, ?)", (t, price, queued, running))

    def prices(self, since: float | None = None, limit: int = 1000) -> list[dict]:
        sql = "SELECT t, price, queued, running FROM prices"
        params: tuple = ()
        if since is not None:
            sql += " WHERE t >= ?"
            params = (since,)
        sql = f"SELECT * FROM ({sql} ORDER BY id DESC LIMIT {int(limit)}) AS last ORDER BY t"
        keys = ("t", "price", "queued", "running")
        return [dict(zip(keys, r)) for r in self._rows(sql, params)]


def jobs_query(table: str, columns, owner: str | None = None, states=None, limit: int | None = None,
               before: int | None = None) -> tuple[str, list]:
    """The query of a jobs table's rows, oldest first: ``owner``'s only, in ``states`` only,
    the newest ``limit``, ids below ``before`` (each optional); returns ``(sql, params)``."""
    return select(table, columns, [("owner = ?", owner)], states, before, limit)


def user_account(name: str) -> str:
    return f"user:{name}"


class LedgerBoundError(ValueError):
    """An entry would take a balance past ``MAX_BALANCE``."""


def _v2_unix_user(store: Store) -> None:
    """Version 2: ``users.unix_user``, the Unix account a market user is (NULL: none), unique."""
    if "unix_user" not in store._columns("users"):
        store._exec("ALTER TABLE users ADD COLUMN unix_user TEXT")
    store._exec("CREATE UNIQUE INDEX IF NOT EXISTS users_unix_user ON users(unix_user)")


def _v3_command_digest(store: Store) -> None:
    """Version 3: ``jobs.command_sha256`` and ``jobs.command_bytes``, set when a job's command
    is retired (NULL: kept whole)."""
    have = store._columns("jobs")
    for column, kind in (("command_sha256", "TEXT"), ("command_bytes", "BIGINT")):
        if column not in have:
            store._exec(f"ALTER TABLE jobs ADD COLUMN {column} {kind}")
    store._exec(f"CREATE INDEX IF NOT EXISTS jobs_kept ON jobs(owner, id) WHERE {_KEPT}")


def upgrade_schema(store, what: str, version: int, target: int, upgrades: dict, record) -> None:
    """Apply ``upgrades[v](store)`` for each version ``v`` after ``version`` up to ``target``,
    ``record(v)`` after each; RuntimeError naming ``what`` if ``version`` is newer than ``target``."""
    if version > target:
        raise RuntimeError(f"{what} has schema version {version}, newer than this marketsched understands "
                           f"({target}): upgrade marketsched")
    for v in range(version + 1, target + 1):
        upgrades[v](store)
        record(v)


def command_digest(command: str) -> tuple[str, int]:
    """A retired command's SHA-256 (hex, of its UTF-8 bytes) and length in bytes."""
    raw = command.encode("utf-8", "surrogatepass")
    return hashlib.sha256(raw).hexdigest(), len(raw)


def _v4_restartable(store: Store) -> None:
    """Version 4: ``jobs.restartable`` (1: the job may be restarted from the beginning elsewhere
    instead of waiting for its node, the Slurm executor's requeue; 0 for every older job)."""
    if "restartable" not in store._columns("jobs"):
        store._exec("ALTER TABLE jobs ADD COLUMN restartable INTEGER NOT NULL DEFAULT 0")


_UPGRADES = {2: _v2_unix_user, 3: _v3_command_digest, 4: _v4_restartable}
