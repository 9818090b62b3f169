"""Attacks on the server both markets share (:mod:`marketsched.live.server`), in-process on
127.0.0.1 and a Unix socket: one authenticated party's slow bodies must not hold the request
slots or the connections of the others.

Everything goes to loopback (or the server's own socket), in bounded counts. No assertion
depends on how fast the machine is: the body deadline is far beyond the test's length, and
"the others were answered before the slow bodies' deadlines" is checked by order (the slow
connections the server still waits on are still open, silent, after the others' answers).
"""

from __future__ import annotations

import hashlib
import shutil
import socket
import ssl
import subprocess
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from live_helpers import CALLS, SLOW, flood_and_call, health, request, silent, slow_bodies, wait_for, work
from marketsched.cli import main
from marketsched.live.broker import Broker, MarketConfig
from marketsched.live.cli import Client
from marketsched.live.server import MarketServer
from marketsched.platform.identity import IDENTITY_NAME
from marketsched.platform.server import Limits


def test_slow_bodies_from_one_party_leave_the_others_served(tmp_path):
    """1,000 connections of one user sending a job's body that never finishes: other users'
    calls over TCP, the health check and the Unix socket are all answered while they are
    open. (Before: the body was read inside one of 64 request slots, so 64 slow bodies held
    them all, and 1,000 filled the connection cap: every new connection was reset.)"""
    b = Broker(tmp_path / "market", MarketConfig(single_user=True)).start()
    b.ensure_admin()
    alice = b.add_user(True, "alice", 100)["token"]
    bob = b.add_user(True, "bob", 100)["token"]
    limits = Limits(body_timeout=3600)  # far beyond the test: nothing is cut by its deadline
    srv = MarketServer(b, "127.0.0.1", 0, socket_path=tmp_path / "m.sock", limits=limits)
    srv.serve_in_thread()
    try:
        head = request("POST", "/api/jobs", b"", alice).replace(b"Content-Length: 0", b"Content-Length: 100") + b'{"bid"'
        tcp = Client(srv.url, bob, timeout=120)  # a guard against a hang, not a bound checked
        unix = Client(socket_path=tmp_path / "m.sock", timeout=120)  # this process's account: the administrator

        def submit():
            return tcp.post("/api/jobs", {"bid": 1, "command": "true"})["id"]

        calls = [submit] * CALLS + [lambda: tcp.get("/api/jobs"), lambda: unix.get("/api/balance"),
                                    lambda: health(srv.port)[0]]
        got = flood_and_call(srv, head, calls, limits.max_party_requests)
        assert len(set(got[:CALLS])) == CALLS and got[-1] == 200
        assert [j["id"] for j in got[CALLS]] == sorted(got[:CALLS])
        assert "alice" not in [j["owner"] for j in unix.get("/api/jobs")]  # no slow body became a job
    finally:
        srv.shutdown()
        b.stop()



def test_a_connection_waiting_for_its_body_makes_way_when_the_server_is_full(tmp_path):
    """Every connection the server may hold is one user's slow body: another user's call still
    gets in, in the place of the one waiting longest (before: it was refused)."""
    b = Broker(tmp_path / "market", MarketConfig(single_user=True)).start()
    b.ensure_admin()
    alice = b.add_user(True, "alice", 100)["token"]
    bob = b.add_user(True, "bob", 100)["token"]
    srv = MarketServer(b, "127.0.0.1", 0, limits=Limits(body_timeout=3600, max_connections=4))
    srv.serve_in_thread()
    try:
        head = request("POST", "/api/jobs", b"", alice).replace(b"Content-Length: 0", b"Content-Length: 100") + b'{"bid"'
        socks = slow_bodies(srv.port, head, 4)
        try:
            assert wait_for(lambda: sum(srv.app.state.gate.active.values()) == 4, 60)  # all four wait for bodies
            assert Client(srv.url, bob, timeout=120).get("/api/me")["name"] == "bob"
            assert srv.stats()["evicted"] == 1 and srv.stats()["refused"] == 0
            assert not silent(socks[0]) and all(silent(s) for s in socks[1:])  # the oldest made way
        finally:
            for s in socks:
                s.close()
    finally:
        srv.shutdown()
        b.stop()


# ---------------------------------------------------------------------------- port squatters
class Squatter:
    """A process that took the server's port while the server was down: a plain socket server
    on 127.0.0.1:``port`` (TLS with its own certificate if ``cert``), answering every
    connection with a made-up 200 and recording what it receives. A bounded accept loop on a
    thread of its own, which ends at :meth:`stop`."""

    def __init__(self, port: int, cert=None):
        self.got = b""
        self.connections = 0
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.ctx = None
        if cert is not None:
            self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.ctx.load_cert_chain(*cert)
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.done.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.settimeout(5)
            try:
                if self.ctx is not None:
                    conn = self.ctx.wrap_socket(conn, server_side=True)
                self.got += conn.recv(65536)
                body = b'{"name": "admin", "admin": true}'
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                             + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
            except OSError:  # the client gave up (a failed TLS handshake, say)
                pass
            finally:
                conn.close()

    def stop(self) -> None:
        self.done.set()
        self.thread.join(timeout=30)
        self.sock.close()


def _cert(tmp_path, name):
    if not shutil.which("openssl"):
        pytest.fail("openssl is needed to make a certificate")
    cert, key = tmp_path / f"{name}.pem", tmp_path / f"{name}.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   check=True, capture_output=True)
    return cert, key


def test_the_cli_never_sends_its_token_to_a_port_squatter(tmp_path):
    """The market ran on a port, then went down, leaving its identity file (as a kill -9 does);
    a squatter took the port. `market` and `exchange` commands given a token: over plain HTTP
    with or without the data folder, and over https with the server's certificate pinned (the
    squatter has its own), each refuses, and the squatter receives no token. While the market
    is up, the same command works (the check is not a refusal of everything)."""
    real_cert, real_key = _cert(tmp_path, "real")
    data = tmp_path / "market"
    b = Broker(data, MarketConfig(single_user=True)).start()
    token = b.ensure_admin()
    srv = MarketServer(b, "127.0.0.1", 0)
    srv.serve_in_thread()
    run = CliRunner().invoke
    try:
        up = run(main, ["market", "balance", "--url", srv.url, "--token", token, "--data", str(data)])
        assert up.exit_code == 0 and "revenue" in up.output, up.output
        identity = (data / IDENTITY_NAME).read_text()
    finally:
        srv.shutdown()
        b.stop()
    (data / IDENTITY_NAME).write_text(identity)  # left behind, as by a crash
    (data / "server-cert.pem").write_bytes(real_cert.read_bytes())  # as a server with --tls-cert leaves it
    url = srv.url
    attempts = {
        "plain HTTP, no data folder": ["market", "balance", "--url", url, "--token", token],
        "plain HTTP, the data folder's stale identity": ["market", "balance", "--url", url, "--token", token,
                                                         "--data", str(data)],
        "exchange, plain HTTP": ["exchange", "bid", str(tmp_path / "me.json"), "--url", url, "--token", token,
                                 "--data", str(data), "--for", "0"],
    }
    (tmp_path / "me.json").write_text('{"budget": 1, "jobs": []}')
    squatter = Squatter(srv.port)
    try:
        for what, args in attempts.items():
            r = run(main, args)
            assert r.exit_code != 0, (what, r.output)
            assert "token was not sent" in r.output or "refusing to send your token" in r.output, (what, r.output)
        assert token.encode() not in squatter.got and b"Bearer" not in squatter.got, squatter.got[:300]
        assert squatter.connections == 0  # refused before connecting
    finally:
        squatter.stop()
    own = _cert(tmp_path, "squatter")
    squatter = Squatter(srv.port, cert=own)
    https = url.replace("http://", "https://")
    try:
        for args in (["market", "balance", "--url", https, "--token", token, "--server-cert", str(real_cert)],
                     ["market", "balance", "--url", https, "--token", token, "--data", str(data)],
                     ["exchange", "bid", str(tmp_path / "me.json"), "--url", https, "--token", token, "--server-cert",
                      str(real_cert), "--for", "0"]):
            r = run(main, args)
            assert r.exit_code != 0 and "token was not sent" in r.output, (args, r.output)
        assert token.encode() not in squatter.got and b"Bearer" not in squatter.got, squatter.got[:300]
    finally:
        squatter.stop()


# ---------------------------------------------------------------------------- database growth
def _db_size(b) -> int:
    """The broker's SQLite file's size once its write-ahead log is folded in and emptied."""
    with b.lock:
        b.store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return Path(b.store.location).stat().st_size


def test_submit_and_cancel_cycles_do_not_grow_the_database(tmp_path):
    """1,000 submissions of 64 KiB commands, each cancelled at once, through the broker itself
    (the API adds nothing to what is stored): market.db grows by less than 1 MB (before: by each
    command, about 64 MB). The jobs queue behind another user's job holding the only slot, as
    when the market is busy; a job cancelled after it was launched keeps only its digest too.
    The books are exact throughout."""
    b = Broker(tmp_path / "market", MarketConfig(single_user=True, slots=1, sync="normal")).start()
    try:
        b.ensure_admin()
        b.add_user(True, "mallory", 1000)
        b.add_user(True, "holder", 1000)
        command = "true #" + "x" * (b.config.max_command_bytes - 6)
        digest = hashlib.sha256(command.encode()).hexdigest()
        holder = b.submit("holder", False, 100, work(600, until=tmp_path / "never"), None, 1)

        def cycle(bid=1):
            job = b.submit("mallory", False, bid, command, None, 1)
            b.cancel("mallory", False, job["id"])
            return job["id"]

        for _ in range(10):  # the tables' first pages
            cycle()
        before = _db_size(b)
        ids = [cycle() for _ in range(SLOW)]
        growth = _db_size(b) - before
        assert growth < 1_000_000, growth
        for i in (ids[0], ids[-1]):
            job = b.job("admin", True, i)
            assert (job["state"], job["command"], job["command_sha256"], job["command_bytes"]) == (
                "cancelled", "", digest, len(command))
        # launched, then cancelled: the same (the slot is freed first)
        b.cancel("holder", False, holder["id"])
        launched = b.submit("mallory", False, 1, "sleep 60 #" + "y" * 1000, None, 1)
        assert wait_for(lambda: b.job("admin", True, launched["id"])["attempts"] == 1, 60)
        b.cancel("mallory", False, launched["id"])
        job = b.job("admin", True, launched["id"])
        assert job["command"] == "" and job["command_bytes"] == 1010
        with b.lock:
            b.store.check_books()
    finally:
        b.stop(kill_jobs=True)


def test_ended_jobs_keep_their_commands_within_their_owners_quota(tmp_path):
    """Completed jobs keep their commands whole up to the owner's quota of kept bytes; past it,
    the owner's oldest give way to their digests (another user's are untouched), and the
    count survives a restart."""
    config = MarketConfig(single_user=True, slots=2, sync="normal", kept_command_bytes=2500)
    b = Broker(tmp_path / "market", config).start()
    try:
        b.ensure_admin()
        b.add_user(True, "mallory", 1000)
        b.add_user(True, "alice", 1000)
        other = b.submit("alice", False, 1, "true #" + "a" * 1994, None, 1)["id"]
        ids = []
        for i in range(5):  # 1,000 bytes each, one after the other
            ids.append(b.submit("mallory", False, 1, f"true #{i}" + "x" * 993, None, 1)["id"])
            assert wait_for(lambda: b.job("admin", True, ids[-1])["state"] == "completed", 60)
        kept = [b.job("admin", True, i)["command"] != "" for i in ids]
        assert kept == [False, False, False, True, True]
        assert b.job("admin", True, ids[0])["command_bytes"] == 1000
        assert b.job("admin", True, other)["command"] != ""  # alice's quota is hers
        assert b.kept_bytes["mallory"] == 2000
    finally:
        b.stop(kill_jobs=True)
    b = Broker(tmp_path / "market", config)
    try:
        assert b.kept_bytes == {"mallory": 2000, "alice": 2000}
    finally:
        b.store.close()
