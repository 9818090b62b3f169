"""The live market's database: schema versions and upgrades, bounded balances (integers never
overflow into floats), the Unix account of a market user, and file modes whatever the umask.
Each database test runs on SQLite and on PostgreSQL (skipped where PostgreSQL cannot be started:
see tests/test_live_postgres.py)."""

import os
import sqlite3
import stat

import pytest

from marketsched.live.broker import Broker, MarketConfig, MarketError
from marketsched.platform.ledger import DEPOSITS, MAX_BALANCE, MICRO, REVENUE, SCHEMA_VERSION, LedgerBoundError, Store
from test_live_postgres import pg_server, pg_url  # noqa: F401 - fixtures

# The schema as every version before 2 made it (a frozen copy: what an old database holds).
OLD_SCHEMA = """
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
    note TEXT NOT NULL
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


def _old_database(where) -> None:
    """A database as the code before schema versions left it: one user with a deposit."""
    if str(where).startswith("postgresql://"):
        import psycopg

        conn = psycopg.connect(where, autocommit=True)
        sql = OLD_SCHEMA.format(pk="BIGSERIAL PRIMARY KEY").replace(" REAL", " DOUBLE PRECISION")
        ph = "%s"
    else:
        conn = sqlite3.connect(where / "market.db", isolation_level=None)
        sql = OLD_SCHEMA.format(pk="INTEGER PRIMARY KEY AUTOINCREMENT")
        ph = "?"
    for stmt in sql.split(";"):
        if stmt.strip():
            conn.execute(stmt)
    rows = [("INSERT INTO meta (key, value) VALUES (?, ?)", ("epoch", "1000.0")),
            ("INSERT INTO users (name, token_hash, is_admin, created) VALUES (?, ?, ?, ?)", ("old", "h-old", 0, 1.0)),
            ("INSERT INTO accounts (name, balance) VALUES (?, ?)", (DEPOSITS, -7 * MICRO)),
            ("INSERT INTO accounts (name, balance) VALUES (?, ?)", (REVENUE, 0)),
            ("INSERT INTO accounts (name, balance) VALUES (?, ?)", ("user:old", 7 * MICRO)),
            ("INSERT INTO entries (t, kind, from_account, to_account, amount, job_id, memo) VALUES (?, ?, ?, ?, ?, ?, ?)",
             (1.0, "deposit", DEPOSITS, "user:old", 7 * MICRO, None, "deposit"))]
    for q, params in rows:
        conn.execute(q.replace("?", ph), params)
    conn.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def where(request, tmp_path):
    if request.param == "postgresql":
        return request.getfixturevalue("pg_url")
    d = tmp_path / "db"
    d.mkdir()
    return d


def test_old_database_is_upgraded_on_open(where):
    _old_database(where)
    s = Store(where)
    assert s.schema_version() == SCHEMA_VERSION == 4
    assert "unix_user" in s._columns("users")
    assert {"command_sha256", "command_bytes"} <= s._columns("jobs")  # version 3: retired commands
    assert "restartable" in s._columns("jobs")  # version 4: jobs that may restart elsewhere
    assert s.users() == [("old", False)] and s.check_books() == {"deposits": 7 * MICRO, "users": 7 * MICRO, "revenue": 0}
    assert s.unix_user("old") is None and s.user_by_unix("nobody") is None
    s.add_user("new", "h-new", False, 2.0, unix_user="nobody")
    assert s.unix_user("new") == "nobody" and s.user_by_unix("nobody") == "new"
    with pytest.raises(Exception, match="(?i)unique"):  # a Unix account is at most one market user
        s.add_user("other", "h-other", False, 2.0, unix_user="nobody")
    assert s.user_by_unix("nobody") == "new" and s.unix_user("other") is None
    s.close()
    s = Store(where)  # opening again changes nothing
    assert s.schema_version() == SCHEMA_VERSION and s.user_by_unix("nobody") == "new"
    s.set_meta("schema_version", 99)
    s.close()
    with pytest.raises(RuntimeError, match="schema version 99, newer than"):
        Store(where)


def test_a_new_database_starts_at_the_current_version(where):
    s = Store(where)
    assert s.schema_version() == SCHEMA_VERSION and "unix_user" in s._columns("users")
    s.close()


def test_balances_are_bounded_so_they_stay_whole_numbers(where):
    s = Store(where)
    s.add_user("a", "h-a", False, 0.0)
    for _ in range(2):  # up to the bound exactly, in two entries
        s.post(1.0, "deposit", DEPOSITS, "user:a", MAX_BALANCE // 2)
    assert s.balance("user:a") == MAX_BALANCE
    with pytest.raises(LedgerBoundError, match="most the ledger holds exactly"):
        s.post(1.0, "deposit", DEPOSITS, "user:a", 1)
    s.post(1.0, "charge", "user:a", REVENUE, MAX_BALANCE)
    with pytest.raises(LedgerBoundError):  # the deposits account is at -MAX_BALANCE
        s.post(1.0, "deposit", DEPOSITS, REVENUE, 1)
    for bad in (0, -1, 1.5, 2.0, True, 2**70):
        with pytest.raises(ValueError):
            s.post(1.0, "charge", REVENUE, "user:a", bad)
    books = s.check_books()
    assert books == {"deposits": MAX_BALANCE, "users": 0, "revenue": MAX_BALANCE}
    assert all(type(b) is int for b in s.balances().values())
    if s.kind == "sqlite":
        assert {t for (t,) in s._rows("SELECT DISTINCT typeof(balance) FROM accounts")} == {"integer"}
    s.close()


def test_deposits_stop_at_the_bound_and_the_admin_balance_still_works(where, tmp_path):
    db = where if str(where).startswith("postgresql://") else None
    b = Broker(tmp_path / "market", MarketConfig(sync="normal"), db_url=db)
    try:
        b.ensure_admin()
        b.add_user(True, "rich", 0)
        n = 0
        while True:  # 1e9 at a time (the most one deposit may be) until the ledger's bound
            try:
                b.deposit(True, "rich", 1e9)
            except MarketError as exc:
                assert exc.status == 409 and "total deposits past 1e+12" in str(exc)
                break
            n += 1
        assert n == MAX_BALANCE // (10**9 * MICRO) == 1000
        with pytest.raises(MarketError, match="total deposits past"):
            b.add_user(True, "late", 1e-6)
        bal = b.balances("admin", True)  # once broken for good by an overflow to floating point
        assert bal["deposits"] == bal["users"]["rich"]["balance"] == 1e12
        assert b.store.check_books()["deposits"] == MAX_BALANCE
        with pytest.raises(MarketError, match="larger than the market accepts"):
            b.deposit(True, "rich", 1e308)
    finally:
        b.stop()


def test_file_modes_whatever_the_umask(tmp_path):
    data = tmp_path / "market"
    data.mkdir(mode=0o755)
    (data / "admin.token").write_text("old\n")  # left world-readable by an older version
    os.chmod(data / "admin.token", 0o644)
    old = os.umask(0o022)
    try:
        b = Broker(data, MarketConfig())
        b.ensure_admin()
        b.add_user(True, "u", 5)
        b.stop()
        b = Broker(data, MarketConfig())  # a new broker opens the same folder
        b.stop()
    finally:
        os.umask(old)
    mode = lambda p: stat.S_IMODE(os.lstat(p).st_mode)  # noqa: E731
    assert mode(data) == 0o711
    files = {p.name: mode(p) for p in data.iterdir() if p.is_file()}
    assert {"market.db", "admin.token"} <= set(files) and set(files.values()) == {0o600}, files
    assert files.get("market.db-wal", 0o600) == 0o600 and files.get("market.db-shm", 0o600) == 0o600
    # a live database's -wal and -shm files, which SQLite creates with the database's mode
    old = os.umask(0o022)
    try:
        s = Store(data)
        s.add_user("w", "h-w", False, 0.0)
        assert mode(data / "market.db-wal") == mode(data / "market.db-shm") == 0o600
        s.close()
    finally:
        os.umask(old)


def test_data_folder_must_be_the_brokers_own(tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / "link").symlink_to(target)
    with pytest.raises(OSError, match="must be a folder, not a link"):
        Broker(tmp_path / "link", MarketConfig())
    other = tmp_path / "theirs"
    other.mkdir()
    os.chown(other, 65534, 65534) if os.geteuid() == 0 else pytest.skip("needs root to give a folder away")
    with pytest.raises(OSError, match="belongs to uid 65534"):
        Broker(other, MarketConfig())


def test_a_market_user_is_linked_to_a_unix_account(tmp_path):
    b = Broker(tmp_path / "market", MarketConfig())
    try:
        b.ensure_admin()
        assert b.add_user(True, "nob", 1, unix="nobody")["unix"] == "nobody"
        assert b.store.unix_user("nob") == "nobody" and b.store.user_by_unix("nobody") == "nob"
        for unix, msg in [("no-such-account-x", "does not exist"), ("root", "is root"), ("a b", "Unix account name"),
                          (5, "Unix account name"), ("\ud800", "Unix account name")]:
            with pytest.raises(MarketError, match=msg) as e:
                b.add_user(True, "x", 1, unix=unix)
            assert e.value.status == 400
        with pytest.raises(MarketError, match="already mapped to user 'nob'") as e:
            b.add_user(True, "y", 1, unix="nobody")
        assert e.value.status == 409
        assert [n for n, _ in b.store.users()] == ["admin", "nob"]  # nothing half-made
        assert b.authenticate_unix(0) == ("admin", True) and b.authenticate_unix(os.geteuid()) == ("admin", True)
        assert b.authenticate_unix(65534) == ("nob", False)
        with pytest.raises(MarketError, match="uid 4000321 has no Unix account") as e:
            b.authenticate_unix(4000321)
        assert e.value.status == 401
    finally:
        b.stop()


def test_a_failed_commit_rolls_back_and_leaves_the_store_usable(tmp_path):
    """A COMMIT SQLite refuses (the market thread and an unlocked reader of the same connection
    once met so: "cannot commit transaction - SQL statements in progress") once left the
    transaction open, and every later transaction failed with "cannot start a transaction
    within a transaction". The refusal is injected here, as a connection whose next COMMIT fails."""
    d = tmp_path / "db"
    d.mkdir()
    s = Store(d)
    real = s.conn

    class RefusesOneCommit:
        refused = False

        def execute(self, sql, params=()):
            if sql == "COMMIT" and not self.refused:
                self.refused = True
                raise sqlite3.OperationalError("cannot commit transaction - SQL statements in progress")
            return real.execute(sql, params)

    s.conn = RefusesOneCommit()
    with pytest.raises(sqlite3.OperationalError, match="in progress"):
        s.set_meta("lost", 1)
    assert s.get_meta("lost") is None  # rolled back
    s.set_meta("after", 1)  # a new transaction starts
    assert s.get_meta("after") == "1"
    s.conn = real
    s.close()
