"""The live market on PostgreSQL (the shared-deployment option): same ledger, same broker.

Needs Debian's PostgreSQL server binaries (``/usr/lib/postgresql/*/bin``), the ``postgres``
system user (initdb refuses to run as root) and the psycopg driver; the test starts a
throw-away cluster on 127.0.0.1 and removes it. Skipped where any of these is missing, since
PostgreSQL is optional; ``MARKETSCHED_TEST_POSTGRES_URL`` points the test at an existing
server instead (a database it may fill).
"""

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from marketsched.live.broker import Broker, MarketConfig, MarketError
from marketsched.platform.ledger import Store


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def pg_server():
    psycopg = pytest.importorskip("psycopg", reason="psycopg not installed (pip install 'marketsched[postgres]')")
    url = os.environ.get("MARKETSCHED_TEST_POSTGRES_URL")
    if url:
        yield url.rsplit("/", 1)[0]
        return
    bins = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
    if not bins or not os.path.exists(os.path.join(bins[-1], "initdb")):
        pytest.skip("no PostgreSQL server binaries (Debian package postgresql)")
    try:
        pg_user = pwd.getpwnam("postgres")
    except KeyError:
        pytest.skip("no 'postgres' system user to run the server as")
    if os.geteuid() != 0 or not shutil.which("runuser"):
        pytest.skip("starting a throw-away PostgreSQL cluster needs root (to run it as 'postgres')")
    # not under pytest's tmp folder: its parents are private to root, and the server runs as postgres
    base = Path(tempfile.mkdtemp(prefix="marketsched-pg-"))
    os.chown(base, pg_user.pw_uid, pg_user.pw_gid)
    datadir = base / "data"
    subprocess.run(["runuser", "-u", "postgres", "--", f"{bins[-1]}/initdb", "-D", str(datadir), "-A", "trust",
                    "-U", "market", "-E", "UTF8", "--no-sync"], check=True, capture_output=True)
    port = _free_port()
    log = open(base / "server.log", "wb")
    server = subprocess.Popen(["runuser", "-u", "postgres", "--", f"{bins[-1]}/postgres", "-D", str(datadir),
                               "-k", str(base), "-p", str(port), "-c", "listen_addresses=127.0.0.1",
                               "-c", "fsync=off"],  # a throw-away cluster
                              stdout=log, stderr=log, start_new_session=True)
    root = f"postgresql://market@127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                psycopg.connect(root + "/postgres").close()
                break
            except psycopg.OperationalError:
                if time.monotonic() > deadline or server.poll() is not None:
                    pytest.fail("PostgreSQL did not start: " + (base / "server.log").read_text())
                time.sleep(0.1)
        yield root
    finally:
        os.killpg(server.pid, 2)  # SIGINT: fast shutdown
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, 9)
            server.wait()
        log.close()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def pg_url(pg_server, request):
    import psycopg

    name = "m_" + request.node.name.lower().replace("[", "_").replace("]", "")[:40]
    with psycopg.connect(pg_server + "/postgres", autocommit=True) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{name}"')
        c.execute(f'CREATE DATABASE "{name}"')
    return f"{pg_server}/{name}"


def test_store_on_postgres(pg_url):
    s = Store(pg_url)
    assert s.kind == "postgresql"
    s.add_user("a", "hash-a", False, 0.0)
    s.post(1.0, "deposit", "external:deposits", "user:a", 5_000_000)
    j = s.insert_job("a", 2.0, 1, None, "true", 1.0)
    s.post(2.0, "charge", "user:a", "provider:revenue", 1_500_000, j, "job 1")
    with pytest.raises(RuntimeError):
        with s.transaction():  # rolled back as a whole
            s.post(3.0, "charge", "user:a", "provider:revenue", 1, j)
            raise RuntimeError("boom")
    assert s.check_books() == {"deposits": 5_000_000, "users": 3_500_000, "revenue": 1_500_000}
    assert s.charged_by_job() == {j: 1_500_000}
    with pytest.raises(ValueError, match="positive whole number"):
        s.post(3.0, "charge", "user:a", "provider:revenue", 0)
    s.close()


def test_broker_on_postgres_preempts_charges_and_restarts(pg_url, tmp_path):
    b = Broker(tmp_path / "market", MarketConfig(slots=1, single_user=True), db_url=pg_url).start()
    try:
        b.ensure_admin()
        b.add_user(True, "pg", 50)
        low = b.submit("pg", False, 2.0, "sleep 30")["id"]
        high = b.submit("pg", False, 4.0, "sleep 0.3")["id"]
        assert b.job("pg", False, low)["state"] == "preempted"
        deadline = time.monotonic() + 10
        while b.job("pg", False, high)["state"] != "completed" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert b.job("pg", False, high)["charged"] > 0
        with pytest.raises(MarketError, match="bid must be"):
            b.submit("pg", False, float("nan"), "true")
    finally:
        b.stop(kill_jobs=False)  # running job suspended, for the next broker
    b2 = Broker(tmp_path / "market", MarketConfig(slots=1, single_user=True), db_url=pg_url).start()
    try:
        view = b2.job("admin", True, low)
        assert view["state"] == "running" and [e["kind"] for e in view["events"]][-2:] == ["reattach", "resume"]
        assert b2.job("admin", True, high)["state"] == "completed"
        books = b2.books()
        assert books["users"] + books["revenue"] == pytest.approx(books["deposits"]) == 50
    finally:
        b2.stop(kill_jobs=True)
