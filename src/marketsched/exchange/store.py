"""The exchange's database: providers, nodes, orders, clearing periods, contracts and the ledger.

One SQLite file in WAL mode (``synchronous=FULL``: a committed order or contract survives a
kill -9 of the exchange and a crash of the machine). The double-entry ledger (``accounts``,
``entries``, ``meta``) is the live market's :class:`marketsched.platform.ledger.Store` on the same
file, amounts in integer micro-units; that store's other tables (``users``, ``jobs``, ...)
stay empty here. The exchange's own tables are prefixed ``ex_``.

Ledger accounts: ``external:deposits`` (where users' deposits come from: minus all deposits),
``user:NAME`` (a user), ``provider:NAME`` (a provider), ``exchange:clearing``
(the exchange as central counterparty: users pay it, it pays providers; it holds only the
rounding residue of each clearing and the difference on a job whose contracts were settled
differently). Entries carry the contract id in ``job_id`` (a deposit: none). An exchange made
with ``deposits`` set takes a request only if the user's deposited balance covers it
(:meth:`ExchangeStore.available`), so a user's balance never goes below zero; without it, users
trade on credit. Providers' balances may go below zero (a penalty they cannot cover).

Schema version: the exchange's tables have their own (``meta`` key ``exchange.schema_version``;
the ledger's tables have the live market's, :mod:`marketsched.platform.ledger`). A database made
before versions were recorded is version 1. Opening one applies the missing upgrades in order,
in the opening transaction; a database newer than this code is refused, never half-understood.
Version 2 added ``ex_orders.command_sha256`` and ``ex_orders.command_bytes``; version 3 the
table ``ex_moves`` (contracts moved off lost capacity, :meth:`ExchangeStore.move_contract`), which
a replay needs, so an older marketsched refuses such a database rather than replay it wrongly,
and the retention of cancelled orders (``ex_orders.retire``, ``ex_retired``); version 4 the
tables of Egg mode (``ex_egg_events``, ``ex_egg_contracts``, :mod:`.egg`); version 7 the runs of
Egg contracts on agent providers (``ex_egg_runs``, :mod:`.agent_runs`).

Retention: a request that is cancelled or expires keeps only its command's SHA-256 and length in
bytes (``command`` becomes empty; :meth:`ExchangeStore.close_order`), as the live market does
for a cancelled job. No contract ever runs it, the replay re-clears from values, sizes and
windows alone, and the order's row stays; but submitting and cancelling large commands cannot
grow the database without limit. A filled request keeps its command (its contract runs it).
A cancelled order that no clearing saw is, beyond its owner's newest ``KEPT_CANCELLED``, deleted
and counted per owner (:meth:`ExchangeStore._retire`), so submit-and-cancel cycles grow the
database by a bounded amount however many there are.
"""

from __future__ import annotations

import json
from pathlib import Path

from marketsched.platform.files import data_folder
from marketsched.platform.ledger import DEPOSITS, MICRO, REVENUE, Store, command_digest, upgrade_schema
from marketsched.platform.query import select
from marketsched.platform.statement import signed_entries

from .egg_books import check_books as check_egg
from .posted import check_posted

CLEARING = "exchange:clearing"
RUN_MODE_KEY = "exchange.run_mode"  # meta: whose account contract jobs run as (ExchangeStore.run_mode)
RUN_MODES = ("single-user", "multi-user")
SETTINGS = {"slot_seconds": float, "period_seconds": float, "mechanism": str, "k": float, "alpha": float,
            "penalty": float, "seed": int, "epoch": float, "deposits": int, "answer_seconds": float}
# settings added after the first version, and their value in an exchange made before them
LATER_SETTINGS = {"deposits": 0, "answer_seconds": 0.0}

_SCHEMA = """
CREATE TABLE IF NOT EXISTS ex_providers (
    name TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    partition TEXT,
    joined REAL NOT NULL,
    left_t REAL
);
CREATE TABLE IF NOT EXISTS ex_nodes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    provider TEXT NOT NULL REFERENCES ex_providers(name),
    name TEXT NOT NULL,
    cpu INTEGER NOT NULL,
    mem INTEGER NOT NULL,
    cpus TEXT,
    left_t REAL,
    UNIQUE (provider, name)
);
CREATE TABLE IF NOT EXISTS ex_orders (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    side TEXT NOT NULL CHECK (side IN ('request', 'offer')),
    owner TEXT NOT NULL,
    node_id INTEGER REFERENCES ex_nodes(id),
    value REAL NOT NULL,
    cpu INTEGER NOT NULL,
    mem INTEGER NOT NULL,
    first_slot INTEGER NOT NULL,
    last_slot INTEGER NOT NULL,
    command TEXT NOT NULL,
    submit_t REAL NOT NULL,
    state TEXT NOT NULL,
    closed_t REAL,
    closed_after INTEGER
);
CREATE INDEX IF NOT EXISTS ex_orders_state ON ex_orders(state);
CREATE INDEX IF NOT EXISTS ex_orders_node ON ex_orders(node_id);
CREATE TABLE IF NOT EXISTS ex_periods (
    id INTEGER PRIMARY KEY,
    t REAL NOT NULL,
    base_slot INTEGER NOT NULL,
    last_order INTEGER NOT NULL,
    mechanism TEXT NOT NULL,
    k REAL NOT NULL,
    seed INTEGER NOT NULL,
    book TEXT NOT NULL,
    requests INTEGER NOT NULL,
    offers INTEGER NOT NULL,
    welfare REAL NOT NULL,
    latency REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS ex_contracts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    period INTEGER NOT NULL REFERENCES ex_periods(id),
    request_id INTEGER NOT NULL REFERENCES ex_orders(id),
    offer_id INTEGER NOT NULL REFERENCES ex_orders(id),
    user TEXT NOT NULL,
    provider TEXT NOT NULL,
    node_id INTEGER NOT NULL REFERENCES ex_nodes(id),
    cpu INTEGER NOT NULL,
    mem INTEGER NOT NULL,
    first_slot INTEGER NOT NULL,
    last_slot INTEGER NOT NULL,
    start_t REAL NOT NULL,
    end_t REAL NOT NULL,
    user_price BIGINT NOT NULL,
    provider_price BIGINT NOT NULL,
    penalty BIGINT NOT NULL,
    state TEXT NOT NULL,
    started_t REAL,
    ended_t REAL,
    exit_code INTEGER,
    cpu_seconds REAL,
    note TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS ex_contracts_state ON ex_contracts(state);
CREATE INDEX IF NOT EXISTS ex_contracts_node ON ex_contracts(node_id);
CREATE INDEX IF NOT EXISTS ex_contracts_last ON ex_contracts(last_slot);
CREATE INDEX IF NOT EXISTS ex_orders_owner ON ex_orders(owner, side);
CREATE INDEX IF NOT EXISTS ex_contracts_user ON ex_contracts(user);
CREATE INDEX IF NOT EXISTS ex_contracts_provider ON ex_contracts(provider);
CREATE INDEX IF NOT EXISTS ex_contracts_request ON ex_contracts(request_id);
CREATE TABLE IF NOT EXISTS ex_moves (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    contract_id INTEGER NOT NULL REFERENCES ex_contracts(id),
    from_node INTEGER NOT NULL REFERENCES ex_nodes(id),
    to_node INTEGER NOT NULL REFERENCES ex_nodes(id),
    after_period INTEGER NOT NULL,
    t REAL NOT NULL,
    why TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS ex_retired (
    owner TEXT NOT NULL,
    side TEXT NOT NULL,
    orders INTEGER NOT NULL,
    command_bytes INTEGER NOT NULL,
    last_id INTEGER NOT NULL,
    PRIMARY KEY (owner, side)
);
CREATE TABLE IF NOT EXISTS ex_parties (
    role TEXT NOT NULL CHECK (role IN ('user', 'provider')),
    name TEXT NOT NULL,
    token_hash TEXT NOT NULL UNIQUE,
    issued REAL NOT NULL,
    PRIMARY KEY (role, name)
);
CREATE TABLE IF NOT EXISTS ex_unix (
    user TEXT PRIMARY KEY,
    account TEXT NOT NULL UNIQUE
);
CREATE TABLE IF NOT EXISTS ex_egg_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    t REAL NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('prices', 'bid', 'settle')),
    provider INTEGER,
    data TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS ex_egg_contracts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    event INTEGER NOT NULL UNIQUE REFERENCES ex_egg_events(id),
    user TEXT NOT NULL,
    provider TEXT NOT NULL,
    node_id INTEGER REFERENCES ex_nodes(id),
    cpu INTEGER NOT NULL,
    mem INTEGER NOT NULL,
    command TEXT NOT NULL,
    value REAL NOT NULL,
    price BIGINT NOT NULL,
    entry INTEGER NOT NULL,
    award_t REAL NOT NULL,
    tau REAL NOT NULL,
    slot INTEGER NOT NULL,
    state TEXT NOT NULL,
    started_t REAL,
    ended_t REAL,
    exit_code INTEGER,
    cpu_seconds REAL,
    note TEXT NOT NULL,
    escrow TEXT NOT NULL,
    settled_t REAL
);
CREATE INDEX IF NOT EXISTS ex_egg_contracts_state ON ex_egg_contracts(state);
CREATE INDEX IF NOT EXISTS ex_egg_contracts_escrow ON ex_egg_contracts(escrow);
CREATE TABLE IF NOT EXISTS ex_asks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    period INTEGER NOT NULL,
    provider TEXT NOT NULL,
    request TEXT NOT NULL,
    request_id TEXT NOT NULL,
    posted_t REAL NOT NULL,
    deadline_t REAL NOT NULL,
    answer TEXT,
    answered_t REAL,
    closed_t REAL
);
CREATE INDEX IF NOT EXISTS ex_asks_open ON ex_asks(provider, closed_t);
CREATE TABLE IF NOT EXISTS ex_period_messages (
    period INTEGER PRIMARY KEY REFERENCES ex_periods(id),
    calls INTEGER NOT NULL,
    answers INTEGER NOT NULL,
    bytes_sent INTEGER NOT NULL,
    bytes_received INTEGER NOT NULL,
    dropped TEXT NOT NULL,
    left_out TEXT NOT NULL,
    replies TEXT
);
"""


def _runs_schema(table: str, contracts: str) -> str:
    """A table of the runs published to provider agents (:mod:`.agent_runs`), one per contract
    of the table ``contracts``: ``ex_runs`` for the periodic contracts, ``ex_egg_runs`` for Egg's."""
    return f"""
CREATE TABLE IF NOT EXISTS {table} (
    contract INTEGER PRIMARY KEY REFERENCES {contracts}(id),
    provider TEXT NOT NULL,
    spec TEXT NOT NULL,
    posted_t REAL NOT NULL,
    deadline_t REAL NOT NULL,
    started_t REAL,
    reported_t REAL,
    end TEXT,
    code INTEGER,
    cpu_seconds REAL,
    digest TEXT,
    output BLOB,
    output_bytes INTEGER
);
CREATE INDEX IF NOT EXISTS {table}_provider ON {table}(provider, reported_t);
"""


_SCHEMA += _runs_schema("ex_runs", "ex_contracts") + _runs_schema("ex_egg_runs", "ex_egg_contracts")

ORDER_COLUMNS = ("id", "side", "owner", "node_id", "value", "cpu", "mem", "first_slot", "last_slot", "command",
                 "submit_t", "state", "closed_t", "closed_after", "command_sha256", "command_bytes")
CONTRACT_COLUMNS = ("id", "period", "request_id", "offer_id", "user", "provider", "node_id", "cpu", "mem",
                    "first_slot", "last_slot", "start_t", "end_t", "user_price", "provider_price", "penalty", "state",
                    "started_t", "ended_t", "exit_code", "cpu_seconds", "note")
PERIOD_COLUMNS = ("id", "t", "base_slot", "last_order", "mechanism", "k", "seed", "book", "requests", "offers",
                  "welfare", "latency")
NODE_COLUMNS = ("id", "provider", "name", "cpu", "mem", "cpus", "left_t")
MOVE_COLUMNS = ("id", "contract_id", "from_node", "to_node", "after_period", "t", "why")
# columns added before schema versions were recorded: a database made before them gets them on opening
_ADDED_COLUMNS = (("ex_providers", "left_t", "REAL"), ("ex_nodes", "left_t", "REAL"))
SCHEMA_VERSION = 7
SCHEMA_KEY = "exchange.schema_version"
RETIRED_STATES = ("cancelled", "expired")  # a request closed so keeps only its command's digest
KEPT_CANCELLED = 100  # cancelled orders no clearing saw, kept as rows per owner and side (ExchangeStore._retire)
OPEN_CONTRACT_STATES = ("pending", "starting", "running")
FINAL_CONTRACT_STATES = ("delivered", "failed", "lapsed")
# a running contract's note while the exchange stops its job at its window's end (Exchange.execute, egg_run)
STOPPED_RAN = "its window ended: the exchange stops its job"
STOPPED_UNSTARTED = "its window ended before its provider started the job: the exchange cancels it"


def stop_recorded(c: dict) -> bool:
    """Whether the exchange recorded that it stops running contract ``c``'s job at its window's
    end (``Exchange.execute``; the verdict follows the stop)."""
    return c["ended_t"] is not None and c["note"] in (STOPPED_RAN, STOPPED_UNSTARTED)


class ExchangeStore:
    """The exchange's database at ``path`` (a ``.db`` file, or a folder holding ``exchange.db``)."""

    def __init__(self, path, sync: str = "full"):
        path = Path(path)
        if path.suffix not in (".db", ".sqlite", ".sqlite3"):
            path = data_folder(path) / "exchange.db"  # 0711: jobs reach their folders, list nothing
        self.ledger = Store(path, sync=sync)
        self.path = path
        self.conn = self.ledger.conn
        with self.transaction():
            for stmt in _SCHEMA.split(";"):
                if stmt.strip():
                    self.conn.execute(stmt)
            for table, column, kind in _ADDED_COLUMNS:
                self._add_column(table, column, kind)
            self._upgrade()
            self.conn.execute("CREATE INDEX IF NOT EXISTS ex_orders_retire ON ex_orders(owner, side, id) "
                              "WHERE retire = 1")
            self.ensure_account(CLEARING)
            self.ensure_account(DEPOSITS)

    def transaction(self):
        """All writes inside commit together (nested uses join the outer transaction)."""
        return self.ledger.transaction()

    # ------------------------------------------------------------------ schema version
    def schema_version(self) -> int:
        return int(self.ledger.get_meta(SCHEMA_KEY, 1))

    def _upgrade(self) -> None:
        """Bring the exchange's tables to ``SCHEMA_VERSION`` (inside the opening transaction)."""
        upgrade_schema(self, f"the exchange's database {self.path}", self.schema_version(), SCHEMA_VERSION, _UPGRADES,
                       lambda v: self.ledger.set_meta(SCHEMA_KEY, v))

    def _add_column(self, table: str, column: str, kind: str) -> None:
        if column not in {r[1] for r in self.rows(f"PRAGMA table_info({table})")}:
            self.conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")

    def close(self) -> None:
        self.ledger.close()

    def rows(self, sql: str, params=()) -> list[tuple]:
        return list(self.conn.execute(sql, params).fetchall())

    def dicts(self, columns, sql: str, params=()) -> list[dict]:
        return [dict(zip(columns, r)) for r in self.rows(sql, params)]

    # ------------------------------------------------------------------ settings
    def settings(self) -> dict | None:
        """The exchange's settings (None before :meth:`init_settings`)."""
        got = {k: self.ledger.get_meta(f"exchange.{k}") for k in SETTINGS}
        if got["mechanism"] is None:
            return None
        for k, default in LATER_SETTINGS.items():
            if got[k] is None:
                got[k] = default
        return {k: SETTINGS[k](v) for k, v in got.items()}

    def init_settings(self, **settings) -> None:
        missing = set(SETTINGS) - set(settings)
        if missing:
            raise ValueError(f"exchange settings missing: {sorted(missing)}")
        with self.transaction():
            if self.settings() is not None:
                raise ValueError(f"the exchange at {self.path} is already set up")
            for key, value in settings.items():
                self.ledger.set_meta(f"exchange.{key}", value)

    # ------------------------------------------------------------------ ledger
    def ensure_account(self, name: str) -> None:
        self.conn.execute("INSERT OR IGNORE INTO accounts (name, balance) VALUES (?, 0)", (name,))

    def post(self, t: float, kind: str, from_account: str, to_account: str, amount: int, contract: int | None,
             memo: str = "") -> None:
        """One double entry of ``amount`` micro-units (nothing for 0)."""
        if amount:
            self.ledger.post(t, kind, from_account, to_account, int(amount), job_id=contract, memo=memo)

    def balances(self) -> dict[str, int]:
        return self.ledger.balances()

    def deposit(self, user: str, amount: int, t: float) -> None:
        """``amount`` micro-units (> 0) reach user ``user``'s account from outside."""
        with self.transaction():
            self.ensure_account(user_account(user))
            self.post(t, "deposit", DEPOSITS, user_account(user), amount, None, "deposit")

    def statement(self, account: str, limit: int | None = 200, before: int | None = None) -> dict:
        """Ledger account ``account``'s statement, in currency units: ``balance`` (0 for an account
        with no entry yet) and ``entries`` (:func:`marketsched.platform.statement.signed_entries`:
        oldest first, the newest ``limit``; a contract's entries carry its id in ``job_id``). A read
        takes no write lock: an entry committed between the two reads may show in one only."""
        rows = self.rows("SELECT balance FROM accounts WHERE name = ?", (account,))
        entries = signed_entries(self.ledger, account, limit, before)
        return {"balance": (int(rows[0][0]) if rows else 0) / MICRO, "entries": entries}

    def available(self, user: str) -> dict[str, int]:
        """User ``user``'s money in micro-units: ``balance``, ``committed`` (what its open
        requests may still cost, :func:`~.orders.commitment`, plus the prices of its contracts
        not yet settled) and ``available`` (the balance less the committed)."""
        rows = self.rows("SELECT balance FROM accounts WHERE name = ?", (user_account(user),))
        balance = int(rows[0][0]) if rows else 0
        committed = sum(commitment(v, c, f, last) for v, c, f, last in self.rows(
            "SELECT value, cpu, first_slot, last_slot FROM ex_orders WHERE side = 'request' AND state = 'open' "
            "AND owner = ?", (user,)))
        committed += int(self.rows("SELECT COALESCE(SUM(user_price), 0) FROM ex_contracts WHERE user = ? AND state IN "
                                   f"({', '.join('?' * len(OPEN_CONTRACT_STATES))})",
                                   (user, *OPEN_CONTRACT_STATES))[0][0])
        return {"balance": balance, "committed": committed, "available": balance - committed}

    # ------------------------------------------------------------------ providers and nodes
    def add_provider(self, name: str, kind: str, t: float, partition: str | None = None) -> None:
        if provider_account(name) in (REVENUE, DEPOSITS):  # the ledger's own accounts
            raise ValueError(f"provider name {name!r} is reserved: its account {provider_account(name)!r} "
                             "is the ledger's own")
        with self.transaction():
            if self.rows("SELECT 1 FROM ex_providers WHERE name = ?", (name,)):
                raise ValueError(f"provider {name!r} has already joined")
            self.conn.execute("INSERT INTO ex_providers (name, kind, partition, joined) VALUES (?, ?, ?, ?)",
                              (name, kind, partition, t))
            self.ensure_account(provider_account(name))

    def providers(self) -> list[dict]:
        """Every provider that joined (``left_t``: when it left, or None)."""
        return self.dicts(("name", "kind", "partition", "joined", "left_t"),
                          "SELECT name, kind, partition, joined, left_t FROM ex_providers ORDER BY name")

    def provider(self, name: str) -> dict | None:
        return next((p for p in self.providers() if p["name"] == name), None)

    def leave(self, provider: str, node: str | None, t: float) -> list[int]:
        """Node ``node`` of ``provider`` leaves (None: every node, and the provider): its open
        offers are cancelled (the contracts it made stand) and it takes no new offers; returns
        the cancelled offers' ids."""
        with self.transaction():
            p = self.provider(provider)
            if p is None or p["left_t"] is not None:
                raise ValueError(f"provider {provider!r} " + ("has left" if p else "has not joined"))
            if node is None:
                ids = [r[0] for r in self.rows("SELECT id FROM ex_nodes WHERE provider = ? AND left_t IS NULL",
                                               (provider,))]
                self.conn.execute("UPDATE ex_providers SET left_t = ? WHERE name = ?", (t, provider))
            else:
                ids = [self.node_id(provider, node, "leave")]
            cancelled = []
            for node_id in ids:
                for o in self.orders("offer", "open", node_id=node_id):
                    self.close_order(o["id"], "cancelled", t)
                    cancelled.append(o["id"])
                self.conn.execute("UPDATE ex_nodes SET left_t = ? WHERE id = ?", (t, node_id))
            return cancelled

    def add_node(self, node: dict, node_id: int | None = None) -> int:
        with self.transaction():
            p = self.provider(node["provider"])
            if p is None:
                raise ValueError(f"node field 'provider': no provider {node['provider']!r} has joined")
            if p["left_t"] is not None and node_id is None:
                raise ValueError(f"node field 'provider': provider {node['provider']!r} has left the exchange")
            if self.rows("SELECT 1 FROM ex_nodes WHERE provider = ? AND name = ?", (node["provider"], node["name"])):
                raise ValueError(f"node field 'name': provider {node['provider']!r} already has a node {node['name']!r}")
            cpus = json.dumps(node["cpus"]) if node.get("cpus") is not None else None
            cur = self.conn.execute(
                "INSERT INTO ex_nodes (id, provider, name, cpu, mem, cpus, left_t) VALUES (?, ?, ?, ?, ?, ?, ?) "
                "RETURNING id", (node_id, node["provider"], node["name"], node["cpu"], node["mem"], cpus,
                                 node.get("left_t")))
            return _new_id(cur)

    def nodes(self, node_id: int | None = None) -> dict[int, dict]:
        """Nodes by id (all, or the one ``node_id``)."""
        out = {}
        where, params = ("", ()) if node_id is None else (" WHERE id = ?", (node_id,))
        for row in self.dicts(NODE_COLUMNS, f"SELECT {', '.join(NODE_COLUMNS)} FROM ex_nodes{where} ORDER BY id",
                              params):
            row["cpus"] = json.loads(row["cpus"]) if row["cpus"] else None
            out[row["id"]] = row
        return out

    def node_id(self, provider: str, name: str, kind: str = "offer") -> int:
        """The id of ``provider``'s node ``name``; ValueError (naming field 'node' of a ``kind``)
        if it has none, or the node has left."""
        rows = self.rows("SELECT id, left_t FROM ex_nodes WHERE provider = ? AND name = ?", (provider, name))
        if not rows:
            raise ValueError(f"{kind} field 'node': provider {provider!r} has no node {name!r}")
        if rows[0][1] is not None:
            raise ValueError(f"{kind} field 'node': node {name!r} of {provider!r} has left the exchange")
        return int(rows[0][0])

    # ------------------------------------------------------------------ parties (the HTTP API's tokens)
    def set_token_hash(self, role: str, name: str, token_hash: str, t: float) -> None:
        """Give party ``(role, name)`` the token whose hash is ``token_hash``; its old one stops
        working."""
        with self.transaction():
            self.conn.execute("INSERT INTO ex_parties (role, name, token_hash, issued) VALUES (?, ?, ?, ?) "
                              "ON CONFLICT (role, name) DO UPDATE SET token_hash = excluded.token_hash, "
                              "issued = excluded.issued", (role, name, token_hash, t))

    def set_unix(self, user: str, account: str) -> None:
        """Map user ``user`` to Unix account ``account`` (replacing its earlier one); ValueError
        if another user has that account."""
        with self.transaction():
            taken = self.rows("SELECT user FROM ex_unix WHERE account = ? AND user != ?", (account, user))
            if taken:
                raise ValueError(f"Unix account {account!r} is already mapped to user {taken[0][0]!r}")
            self.conn.execute("INSERT INTO ex_unix (user, account) VALUES (?, ?) "
                              "ON CONFLICT (user) DO UPDATE SET account = excluded.account", (user, account))

    def unix_accounts(self) -> dict[str, str]:
        """User -> the Unix account its contract jobs run as (``marketsched exchange unix``)."""
        return dict(self.rows("SELECT user, account FROM ex_unix"))

    def run_mode(self) -> str | None:
        """Whose account contract jobs run as, as the last ``exchange run`` started:
        ``"single-user"`` (the exchange's own) or ``"multi-user"`` (each user's mapped
        account); None before any run."""
        return self.ledger.get_meta(RUN_MODE_KEY)

    def set_run_mode(self, mode: str) -> None:
        if mode not in RUN_MODES:
            raise ValueError(f"run mode must be one of {', '.join(RUN_MODES)}, got {mode!r}")
        self.ledger.set_meta(RUN_MODE_KEY, mode)

    def party(self, token_hash: str) -> tuple[str, str] | None:
        """``(role, name)`` of the party holding the token with this hash, or None."""
        rows = self.rows("SELECT role, name FROM ex_parties WHERE token_hash = ?", (token_hash,))
        return (rows[0][0], rows[0][1]) if rows else None

    # ------------------------------------------------------------------ orders
    def insert_order(self, side: str, order: dict, t: float, order_id: int | None = None) -> int:
        with self.transaction():
            if side == "request":
                self.ensure_account(user_account(order["owner"]))
            cur = self.conn.execute(
                "INSERT INTO ex_orders (id, side, owner, node_id, value, cpu, mem, first_slot, last_slot, command, "
                "submit_t, state) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'open') RETURNING id",
                (order_id, side, order["owner"], order.get("node_id"), order["value"], order["cpu"], order["mem"],
                 order["first_slot"], order["last_slot"], order.get("command", ""), t))
            return _new_id(cur)

    def orders(self, side: str | None = None, state: str | None = None, upto: int | None = None,
               node_id: int | None = None) -> list[dict]:
        """Orders in id order: of one side, in one state, up to id ``upto``, of one node."""
        sql, params = select("ex_orders", ORDER_COLUMNS, [("side = ?", side), ("state = ?", state),
                                                          ("node_id = ?", node_id), ("id <= ?", upto)])
        return self.dicts(ORDER_COLUMNS, sql, params)

    def order(self, order_id: int) -> dict | None:
        rows = self.dicts(ORDER_COLUMNS, f"SELECT {', '.join(ORDER_COLUMNS)} FROM ex_orders WHERE id = ?", (order_id,))
        return rows[0] if rows else None

    def last_order_id(self) -> int:
        return int(self.rows("SELECT COALESCE(MAX(id), 0) FROM ex_orders")[0][0])

    def close_order(self, order_id: int, state: str, t: float) -> None:
        """Close an order; ``closed_after`` records the last clearing before it (for replays).
        A cancelled or expired order keeps only its command's digest (the module docstring)."""
        self.conn.execute("UPDATE ex_orders SET state = ?, closed_t = ?, closed_after = "
                          "(SELECT COALESCE(MAX(id), 0) FROM ex_periods) WHERE id = ?", (state, t, order_id))
        if state in RETIRED_STATES:
            rows = self.rows("SELECT command FROM ex_orders WHERE id = ? AND command_sha256 IS NULL AND command != ''",
                             (order_id,))
            if rows:
                digest, size = command_digest(rows[0][0])
                self.conn.execute("UPDATE ex_orders SET command = '', command_sha256 = ?, command_bytes = ? "
                                  "WHERE id = ?", (digest, size, order_id))
        if state == "cancelled":
            self._retire(order_id)

    def _retire(self, order_id: int) -> None:
        """Retention of cancelled orders that no clearing saw (inside :meth:`close_order`).

        1. The order just cancelled is *unseen* when its id is above the last order id the
           last committed clearing saw: no committed clearing had it in its book, and none will
           (a clearing computed meanwhile finds it cancelled and is stale, :mod:`.clearing`).
           Such an order is marked retirable. (Orders of ids a clearing covered are kept,
           even if cancelled before it: the rule stays one comparison.)
        2. Its owner keeps its newest ``KEPT_CANCELLED`` retirable orders of that side as rows
           (so a party still sees what it just cancelled). An older one is deleted and counted
           in ``ex_retired`` (per owner and side: orders, command bytes, the last id), one row
           per owner and side.

        A replay needs none of them (it cancels an order before the first clearing after its
        cancellation: an unseen one never enters a book), no contract or ledger entry refers to
        them, and SQLite's ``AUTOINCREMENT`` never gives their ids again. So submitting and
        cancelling grows the database by a bounded amount, however many times."""
        seen = self.rows("SELECT last_order FROM ex_periods ORDER BY id DESC LIMIT 1")
        if order_id <= (seen[0][0] if seen else 0):
            return
        self.conn.execute("UPDATE ex_orders SET retire = 1 WHERE id = ?", (order_id,))
        owner, side = self.rows("SELECT owner, side FROM ex_orders WHERE id = ?", (order_id,))[0]
        for oid, size in self.rows(
                "SELECT id, COALESCE(command_bytes, LENGTH(CAST(command AS BLOB))) FROM ex_orders WHERE owner = ? "
                "AND side = ? AND retire = 1 ORDER BY id DESC LIMIT -1 OFFSET ?", (owner, side, KEPT_CANCELLED)):
            self.conn.execute("DELETE FROM ex_orders WHERE id = ?", (oid,))
            self.conn.execute(
                "INSERT INTO ex_retired (owner, side, orders, command_bytes, last_id) VALUES (?, ?, 1, ?, ?) "
                "ON CONFLICT (owner, side) DO UPDATE SET orders = orders + 1, "
                "command_bytes = command_bytes + excluded.command_bytes, last_id = MAX(last_id, excluded.last_id)",
                (owner, side, size, oid))

    def retired(self) -> dict[tuple[str, str], dict]:
        """The cancelled orders retired to a count (:meth:`_retire`): (owner, side) -> ``orders``,
        ``command_bytes``, ``last_id``."""
        return {(o, s): {"orders": n, "command_bytes": b, "last_id": last}
                for o, s, n, b, last in self.rows("SELECT owner, side, orders, command_bytes, last_id FROM ex_retired")}

    # ------------------------------------------------------------------ periods and contracts
    def periods(self) -> list[dict]:
        return self.dicts(PERIOD_COLUMNS, f"SELECT {', '.join(PERIOD_COLUMNS)} FROM ex_periods ORDER BY id")

    def insert_period(self, row: dict) -> None:
        cols = [c for c in PERIOD_COLUMNS]
        self.conn.execute(f"INSERT INTO ex_periods ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                          [row[c] for c in cols])

    def insert_contract(self, row: dict) -> int:
        cols = [c for c in CONTRACT_COLUMNS if c != "id" and c in row]
        cur = self.conn.execute(
            f"INSERT INTO ex_contracts ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))}) RETURNING id",
            [row[c] for c in cols])
        return _new_id(cur)

    def contracts(self, states=None, node_id: int | None = None, ending_from: int | None = None) -> list[dict]:
        """Contracts in id order: in ``states``, of one node, with a last slot >= ``ending_from``."""
        sql, params = select("ex_contracts", CONTRACT_COLUMNS,
                             [("last_slot >= ?", ending_from), ("node_id = ?", node_id)], states)
        return self.dicts(CONTRACT_COLUMNS, sql, params)

    def contract(self, contract_id: int) -> dict:
        rows = self.dicts(CONTRACT_COLUMNS, f"SELECT {', '.join(CONTRACT_COLUMNS)} FROM ex_contracts WHERE id = ?",
                          (contract_id,))
        if not rows:
            raise KeyError(f"no contract {contract_id}")
        return rows[0]

    def move_contract(self, contract_id: int, to_node: int, t: float, why: str) -> None:
        """Contract ``contract_id`` runs on node ``to_node`` from now on (inside a transaction):
        its node changes, and the move is recorded with the last clearing before it, so that a
        replay moves it at the same point (:mod:`.replay`)."""
        c = self.contract(contract_id)
        after = int(self.rows("SELECT COALESCE(MAX(id), 0) FROM ex_periods")[0][0])
        self.conn.execute("INSERT INTO ex_moves (contract_id, from_node, to_node, after_period, t, why) "
                          "VALUES (?, ?, ?, ?, ?, ?)", (contract_id, c["node_id"], to_node, after, t, why))
        self.update_contract(contract_id, node_id=to_node)

    def moves(self) -> list[dict]:
        """Every move of a contract between nodes, in order."""
        return self.dicts(MOVE_COLUMNS, f"SELECT {', '.join(MOVE_COLUMNS)} FROM ex_moves ORDER BY id")

    def move_count(self) -> int:
        return int(self.rows("SELECT COUNT(*) FROM ex_moves")[0][0])

    def update_contract(self, contract_id: int, **fields) -> None:
        bad = set(fields) - set(CONTRACT_COLUMNS)
        if bad:
            raise KeyError(f"no contract column(s) {sorted(bad)}")
        sets = ", ".join(f"{k} = ?" for k in fields)
        self.conn.execute(f"UPDATE ex_contracts SET {sets} WHERE id = ?", (*fields.values(), contract_id))

    def check_books(self) -> dict[str, int]:
        """The ledger's double-entry check, plus the exchange's: each settled contract moved
        exactly its price (delivered) or its penalty (failed), and nothing else was posted.
        Returns the clearing account's balance and the sums; AssertionError naming the first
        contract that does not add up."""
        self.ledger.check_books()
        posted: dict[tuple[int, str], int] = {}
        deposits = 0
        for cid, kind, amount, src in self.rows("SELECT job_id, kind, amount, from_account FROM entries"):
            if kind == "deposit" and cid is None and src == DEPOSITS:
                deposits += amount
                continue
            posted[(cid, kind)] = posted.get((cid, kind), 0) + amount
        if self.ledger.balance(DEPOSITS) != -deposits:
            raise AssertionError(f"the deposits account holds {self.ledger.balance(DEPOSITS)}, expected {-deposits}")
        egg = {key: posted.pop(key) for key in [key for key in posted if key[1].startswith("egg-")]}
        settings = self.settings()
        if egg or (settings is not None and settings["mechanism"] == "egg"):
            check_egg(self, egg)
        users = providers = penalties = 0
        wanted = []
        for c in self.contracts():
            want = {}
            if c["state"] == "delivered":
                want = {"user-price": c["user_price"], "provider-price": c["provider_price"]}
                users += c["user_price"]
                providers += c["provider_price"]
            elif c["state"] == "failed":
                want = {"penalty": c["penalty"]}
                penalties += c["penalty"]
            wanted.append((c["id"], f"contract {c['id']} ({c['state']})", want))
        check_posted(posted, wanted, ("user-price", "provider-price", "penalty"), "ledger entries for no contract")
        clearing = self.ledger.balance(CLEARING)
        if clearing != users - providers:
            raise AssertionError(f"clearing account holds {clearing}, expected {users - providers}")
        return {"clearing": clearing, "users_paid": users, "providers_paid": providers, "penalties": penalties,
                "deposits": deposits}


def _new_id(cur) -> int:
    row = cur.fetchone()
    assert row is not None  # INSERT ... RETURNING id returns the row
    return int(row[0])


def user_account(name: str) -> str:
    return f"user:{name}"


def provider_account(name: str) -> str:
    return f"provider:{name}"


def commitment(value: float, cpu: int, first_slot: int, last_slot: int) -> int:
    """The most a request can cost its user, in micro-units: its value per CPU unit per slot
    times its CPU units and slots (every mechanism of the exchange charges at most the bid)."""
    return to_micro(value * cpu * (last_slot - first_slot + 1))


def to_micro(amount: float) -> int:
    """A library payment (float, currency units) in whole micro-units, rounded to nearest."""
    return int(round(float(amount) * MICRO))


def _v2_command_digest(store: ExchangeStore) -> None:
    """Version 2: ``ex_orders.command_sha256`` and ``ex_orders.command_bytes``, set when a
    request's command is retired (NULL: kept whole)."""
    store._add_column("ex_orders", "command_sha256", "TEXT")
    store._add_column("ex_orders", "command_bytes", "INTEGER")


def _v3_moves(store: ExchangeStore) -> None:
    """Version 3: the tables ``ex_moves`` and ``ex_retired`` (made by the schema itself,
    ``CREATE TABLE IF NOT EXISTS``) and ``ex_orders.retire`` (1: a cancelled order no clearing
    saw, which retention may retire)."""
    store._add_column("ex_orders", "retire", "INTEGER")


def _v4_egg(store: ExchangeStore) -> None:
    """Version 4: the tables of Egg mode, ``ex_egg_events`` and ``ex_egg_contracts`` (:mod:`.egg`;
    made by the schema itself, ``CREATE TABLE IF NOT EXISTS``)."""


def _v5_agents(store: ExchangeStore) -> None:
    """Version 5: the provider agents' tables ``ex_asks`` and ``ex_period_messages`` (made by the
    schema itself, ``CREATE TABLE IF NOT EXISTS``; :mod:`.provider_protocol`) and the setting
    ``answer_seconds`` (0 when absent). An older marketsched refuses the database, since it
    would replay agent periods in its own process."""


def _v6_agent_runs(store: ExchangeStore) -> None:
    """Version 6: the table ``ex_runs`` of contracts run by their provider's agent (provider
    kind ``agent``, :mod:`.agent_runs`; made by the schema itself). An older marketsched refuses
    the database, since it would try to run an agent provider's contracts itself."""


def _v7_egg_agent_runs(store: ExchangeStore) -> None:
    """Version 7: the table ``ex_egg_runs`` of Egg contracts run by their provider's agent
    (:mod:`.agent_runs`; made by the schema itself). An older marketsched refuses the database,
    since it would try to publish an Egg contract's run among the periodic contracts' runs."""


_UPGRADES = {2: _v2_command_digest, 3: _v3_moves, 4: _v4_egg, 5: _v5_agents, 6: _v6_agent_runs, 7: _v7_egg_agent_runs}
