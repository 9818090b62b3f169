"""The exchange's API under the shared server's limits, in-process on 127.0.0.1: one party's
slow bodies leave the other parties served (as for the live market: the check is by order,
not by a bound in seconds; see tests/test_live_attacks_server.py)."""

from __future__ import annotations

from exchange_helpers import make_exchange
from live_helpers import CALLS, flood_and_call, health, request
from marketsched.exchange.api import ExchangeServer, ExchangeService, issue_token
from marketsched.exchange.store import ExchangeStore
from marketsched.live.cli import Client
from marketsched.platform.server import Limits


def test_slow_bodies_from_one_party_leave_the_others_served(tmp_path):
    """1,000 connections of user alice sending a request's body that never finishes: user bob's
    requests, provider p1's reads and the public market information are answered while they
    are open."""
    ex, clock, _ = make_exchange(tmp_path / "x.db")
    ex.join("p1")
    ex.add_node("p1", "n0", 4, 100)
    tokens = {name: issue_token(ex.store, role, name, 0.0)
              for role, name in (("user", "alice"), ("user", "bob"), ("provider", "p1"))}
    service = ExchangeService(ExchangeStore(tmp_path / "x.db"), clock)
    limits = Limits(body_timeout=3600)  # far beyond the test: nothing is cut by its deadline
    srv = ExchangeServer(service, "127.0.0.1", 0, limits=limits)
    srv.serve_in_thread()
    try:
        head = request("POST", "/api/requests", b"", tokens["alice"]).replace(
            b"Content-Length: 0", b"Content-Length: 100") + b'{"value"'
        bob = Client(srv.url, tokens["bob"], timeout=120)  # a guard against a hang, not a bound checked
        p1 = Client(srv.url, tokens["p1"], timeout=120)
        slot = ex.slot()

        def submit():
            return bob.post("/api/requests", {"value": 1, "cpu": 1, "first_slot": slot + 2, "last_slot": slot + 3,
                                              "command": "true"})["id"]

        calls = [submit] * CALLS + [lambda: bob.get("/api/orders"), lambda: p1.get("/api/nodes"),
                                    lambda: Client(srv.url).get("/api/market"), lambda: health(srv.port)[0]]
        got = flood_and_call(srv, head, calls, limits.max_party_requests)
        assert len(set(got[:CALLS])) == CALLS and got[-1] == 200
        assert sorted(o["id"] for o in got[CALLS]) == sorted(got[:CALLS])
        assert [n["name"] for n in got[CALLS + 1]] == ["n0"]
        assert all(o["owner"] != "alice" for o in ex.store.orders())  # no slow body became an order
    finally:
        srv.shutdown()
        service.store.close()
        ex.store.close()
