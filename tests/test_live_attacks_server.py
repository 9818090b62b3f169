"""Attacks on the server both markets share (:mod:`marketsched.live.server`), in-process on
127.0.0.1 and a Unix socket: one authenticated party's slow bodies must not hold the request
slots or the connections of the others.

Everything goes to loopback (or the server's own socket), in bounded counts. No assertion
depends on how fast the machine is: the body deadline is far beyond the test's length, and
"the others were answered before the slow bodies' deadlines" is checked by order (the slow
connections the server still waits on are still open, silent, after the others' answers).
"""

from __future__ import annotations

from live_helpers import CALLS, flood_and_call, health, request
from marketsched.live.cli import Client


def test_slow_bodies_from_one_party_leave_the_others_served(tmp_path):
    """1,000 connections of one user sending a job's body that never finishes: other users'
    calls over TCP, the health check and the Unix socket are all answered while they are
    open. (Before: the body was read inside one of 64 request slots, so 64 slow bodies held
    them all, and 1,000 filled the connection cap: every new connection was reset.)"""
    from marketsched.live.broker import Broker, MarketConfig
    from marketsched.live.server import Limits, MarketServer

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
