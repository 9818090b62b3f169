"""The exchange's HTTP API on 127.0.0.1: parties' tokens, orders, contracts, market information,
price alerts (server-sent events), and attacks (another party's order or contract, bad numbers,
oversize bodies). The exchange runs on a fake clock in the test, on its own connection to the
database, as `exchange run` does beside `exchange serve`."""

from __future__ import annotations

import hashlib
import json
import socket
import urllib.error
import urllib.request

import pytest
from click.testing import CliRunner

from exchange_helpers import fake_slurm_partitions, make_exchange
from live_helpers import raw
from marketsched.cli import main
from marketsched.exchange.api import MAX_STREAMS_PER_PARTY, ExchangeServer, ExchangeService, issue_token
from marketsched.exchange.info import market_info
from marketsched.exchange.store import ExchangeStore
from marketsched.live.cli import Client, ClientError
from marketsched.platform.http import MAX_BODY


@pytest.fixture
def market(tmp_path):
    """An exchange (slots of 10 s, clearing every 30 s) with provider p1 (node n0: 4 CPUs) and
    p2 (node m0: 2 CPUs), users alice and bob, all with tokens, and the API serving it."""
    ex, clock, machines = make_exchange(tmp_path / "x.db")
    ex.join("p1")
    ex.add_node("p1", "n0", 4, 100)
    ex.join("p2")
    ex.add_node("p2", "m0", 2, 100)
    tokens = {name: issue_token(ex.store, role, name, 0.0)
              for role, name in (("user", "alice"), ("user", "bob"), ("provider", "p1"), ("provider", "p2"))}
    service = ExchangeService(ExchangeStore(tmp_path / "x.db"), clock)
    srv = ExchangeServer(service, "127.0.0.1", 0)
    srv.serve_in_thread()
    clients = {name: Client(srv.url, tok) for name, tok in tokens.items()}
    yield ex, clock, srv, clients, tokens
    srv.shutdown()
    service.store.close()
    ex.store.close()


def test_tokens_are_hashed_at_rest_and_name_the_party(market, tmp_path):
    ex, clock, srv, c, tokens = market
    assert c["alice"].get("/api/me") == {"role": "user", "name": "alice"}
    assert c["p1"].get("/api/me") == {"role": "provider", "name": "p1", "joined": True, "kind": "local",
                                      "partition": None, "left_t": None}
    stored = ex.store.rows("SELECT token_hash FROM ex_parties")
    assert len(stored) == 4 and not any(t in h for (h,) in stored for t in tokens.values())
    assert tmp_path.joinpath("x.db").read_bytes().find(tokens["alice"].encode()) == -1
    status, body = raw(srv, "GET", "/api/orders")
    assert status == 401 and b"no token" in body
    status, body = raw(srv, "GET", "/api/orders", token="not-a-token")
    assert status == 401 and json.loads(body)["error"] == "wrong token: no party has this token"
    # a new token replaces the old one at once
    new = issue_token(ex.store, "user", "alice", 1.0)
    assert raw(srv, "GET", "/api/me", token=tokens["alice"])[0] == 401
    assert Client(srv.url, new).get("/api/me")["name"] == "alice"
    # a provider's token may come before it joins (it joins through the API)
    p9 = Client(srv.url, issue_token(ex.store, "provider", "p9", 1.0))
    assert p9.get("/api/me") == {"role": "provider", "name": "p9", "joined": False}


def test_orders_clear_into_contracts_each_party_sees_its_own(market):
    ex, clock, srv, c, _ = market
    offer = c["p1"].post("/api/offers", {"node": "n0", "reserve": 2, "first_slot": 1, "last_slot": 20})
    assert (offer["side"], offer["owner"], offer["state"], offer["cpu"]) == ("offer", "p1", "open", 4)
    ra = c["alice"].post("/api/requests", {"value": 9, "cpu": 2, "mem": 10, "first_slot": 2, "last_slot": 3,
                                           "command": "echo a"})
    rb = c["bob"].post("/api/requests", {"value": 5, "cpu": 2, "first_slot": 2, "last_slot": 4, "command": "echo b"})
    assert ra["command"] == "echo a" and rb["mem"] == 0
    with pytest.raises(ClientError, match="only users submit requests") as e:
        c["p1"].post("/api/requests", {"value": 9, "cpu": 1, "first_slot": 2, "last_slot": 3, "command": "x"})
    assert e.value.status == 403
    with pytest.raises(ClientError, match="only providers submit offers") as e:
        c["alice"].post("/api/offers", {"node": "n0", "reserve": 0, "first_slot": 1, "last_slot": 2})
    assert e.value.status == 403
    assert [o["id"] for o in c["alice"].get("/api/orders")] == [ra["id"]]
    assert [o["id"] for o in c["p1"].get("/api/orders")] == [offer["id"]]
    assert c["p2"].get("/api/orders") == []
    ex.clear()
    mine = c["alice"].get("/api/contracts")
    assert len(mine) == 1 and mine[0]["user"] == "alice" and mine[0]["provider"] == "p1"
    recorded = ex.store.contracts()
    assert mine[0]["user_price"] == next(x for x in recorded if x["user"] == "alice")["user_price"] / 1e6
    assert {x["id"] for x in c["p1"].get("/api/contracts")} == {x["id"] for x in recorded}
    assert c["p2"].get("/api/contracts") == []
    assert c["alice"].get(f"/api/orders/{ra['id']}")["state"] == "filled"
    assert [o["id"] for o in c["alice"].get("/api/orders?state=filled")] == [ra["id"]]
    assert c["alice"].get("/api/orders?state=open") == []
    # market information: public, and the same figures as the exchange's own
    info = c["alice"].get("/api/market/history")
    assert info == json.loads(json.dumps(market_info(ex.store)))
    m = json.loads(raw(srv, "GET", "/api/market")[1])
    assert m["last"]["period"] == 1 and m["mechanism"] == "critical-value" and m["slot"] == 0
    assert m["open_book"] == [{"side": "offer", "cpu": 4, "orders": 1, "cpu_slots": 80}]
    # a cancelled offer leaves the book; a second cancel is refused
    assert c["p1"].request("DELETE", f"/api/orders/{offer['id']}")["state"] == "cancelled"
    with pytest.raises(ClientError, match="is cancelled, not open"):
        c["p1"].post(f"/api/orders/{offer['id']}/cancel")


def test_lists_are_paged(market):
    ex, clock, srv, c, tokens = market
    ids = [c["bob"].post("/api/requests", {"value": 1, "cpu": 1, "first_slot": 5, "last_slot": 5,
                                           "command": f"echo {i}"})["id"] for i in range(7)]
    req = urllib.request.Request(srv.url + "/api/orders?limit=3", headers={"Authorization": f"Bearer {tokens['bob']}"})
    with urllib.request.urlopen(req, timeout=10) as r:
        page = json.loads(r.read())
        link = r.headers["link"]
    assert [o["id"] for o in page] == ids[-3:]
    assert link == f'</api/orders?limit=3&before={ids[-3]}>; rel="next"'
    assert [o["id"] for o in c["bob"].get(f"/api/orders?limit=3&before={ids[-3]}")] == ids[1:4]
    assert [o["id"] for o in c["bob"].get(f"/api/orders?limit=3&before={ids[1]}")] == ids[:1]


def test_another_partys_orders_and_contracts_are_denied(market):
    ex, clock, srv, c, _ = market
    offer = c["p1"].post("/api/offers", {"node": "n0", "reserve": 2, "first_slot": 1, "last_slot": 20})
    ra = c["alice"].post("/api/requests", {"value": 9, "cpu": 2, "first_slot": 2, "last_slot": 3, "command": "a"})
    rb = c["bob"].post("/api/requests", {"value": 1, "cpu": 1, "first_slot": 8, "last_slot": 9, "command": "b"})
    ex.clear()
    (contract,) = [x for x in ex.store.contracts() if x["user"] == "alice"]
    for who, path in (("bob", f"/api/orders/{ra['id']}"), ("bob", f"/api/contracts/{contract['id']}"),
                      ("p2", f"/api/contracts/{contract['id']}"), ("p2", f"/api/orders/{offer['id']}"),
                      ("alice", f"/api/orders/{offer['id']}"),  # a provider's order of the same number space
                      ("bob", "/api/orders/999"), ("bob", "/api/contracts/999")):
        with pytest.raises(ClientError, match="of yours") as e:
            c[who].get(path)
        assert e.value.status == 404, (who, path)
    for who, oid in (("alice", rb["id"]), ("p2", offer["id"]), ("p1", rb["id"])):
        with pytest.raises(ClientError, match="of yours") as e:
            c[who].post(f"/api/orders/{oid}/cancel")
        assert e.value.status == 404
        with pytest.raises(ClientError, match="of yours"):
            c[who].request("DELETE", f"/api/orders/{oid}")
    assert ex.store.order(rb["id"])["state"] == "open" and ex.store.order(offer["id"])["state"] == "open"
    # a provider cannot offer another provider's node
    with pytest.raises(ClientError, match="provider 'p2' has no node 'n0'") as e:
        c["p2"].post("/api/offers", {"node": "n0", "reserve": 0, "first_slot": 30, "last_slot": 31})
    assert e.value.status == 400
    assert [o["owner"] for o in ex.store.orders("offer")] == ["p1"]


@pytest.mark.parametrize("body, msg", [
    (b'{"value": NaN, "cpu": 1, "first_slot": 2, "last_slot": 3, "command": "x"}', "'value' must be a finite number"),
    (b'{"value": Infinity, "cpu": 1, "first_slot": 2, "last_slot": 3, "command": "x"}', "'value' must be a finite"),
    (b'{"value": 1e300, "cpu": 1, "first_slot": 2, "last_slot": 3, "command": "x"}', "from 0 to 1e+09"),
    (b'{"value": -1, "cpu": 1, "first_slot": 2, "last_slot": 3, "command": "x"}', "from 0 to 1e+09"),
    (b'{"value": "9", "cpu": 1, "first_slot": 2, "last_slot": 3, "command": "x"}', "'value' must be a finite number"),
    (b'{"value": 1, "cpu": 0, "first_slot": 2, "last_slot": 3, "command": "x"}', "'cpu' must be a whole number"),
    (b'{"value": 1, "cpu": 1.5, "first_slot": 2, "last_slot": 3, "command": "x"}', "'cpu' must be a whole number"),
    (b'{"value": 1, "cpu": 10000001, "first_slot": 2, "last_slot": 3, "command": "x"}', "from 1 to 1000000"),
    (b'{"value": 1, "cpu": 1, "mem": -5, "first_slot": 2, "last_slot": 3, "command": "x"}', "'mem' must be"),
    (b'{"value": 1, "cpu": 1, "first_slot": 2, "last_slot": ' + b"9" * 400 + b', "command": "x"}',
     "'last_slot' must be a whole number"),
    (b'{"value": 1, "cpu": 1, "first_slot": 2, "last_slot": 100000, "command": "x"}', "longer than the 1000"),
    (b'{"value": 1, "cpu": 1, "first_slot": 99999999, "last_slot": 99999999, "command": "x"}', "more than 1000 slots"),
    (b'{"value": 1, "cpu": 1, "first_slot": 900, "last_slot": 1001, "command": "x"}', "'last_slot' (1001) is more"),
    (b'{"value": 1, "cpu": 1, "first_slot": 0, "last_slot": 3, "command": "x"}', "after the current slot"),
    (b'{"value": 1, "cpu": 1, "first_slot": 3, "last_slot": 2, "command": "x"}', "is before first_slot"),
    (b'{"value": 1, "cpu": 1, "first_slot": 2, "last_slot": 3, "command": ""}', "non-empty shell command"),
    (b'{"value": 1, "cpu": 1, "first_slot": 2, "last_slot": 3, "command": "a\\u0000b"}', "NUL character"),
    (b'{"value": 1, "cpu": 1, "first_slot": 2, "last_slot": 3, "command": "\\ud800"}', "lone surrogate"),
    (b'{"value": 1, "cpu": 1, "first_slot": 2, "last_slot": 3}', "needs command"),
    (b'{"value": 1, "cpu": 1, "first_slot": 2, "last_slot": 3, "command": "x", "owner": "bob"}', "unknown field"),
    (b'{"value": 1, "cpu": 1, "first_slot": 2, "last_slot": 3, "command": {"a": 1}}', "must not be a JSON object"),
    (b'{"value": 1, "value": 2}', "given twice"),
    (b'{"value": 1,', "not valid JSON"),
    (b'[1]', "must be a JSON object"),
    (b'\xff', "not UTF-8"),
])
def test_bad_requests_get_400_naming_the_problem(market, body, msg):
    ex, clock, srv, c, tokens = market
    status, out = raw(srv, "POST", "/api/requests", body, tokens["alice"])
    assert status == 400, out
    assert msg in json.loads(out)["error"], out
    assert ex.store.orders() == []


@pytest.mark.parametrize("path, msg", [
    ("/api/orders?limit=0", "limit must be a whole number"),
    ("/api/orders?limit=99999", "limit must be a whole number"),
    ("/api/orders?before=-1", "before must be a whole number"),
    ("/api/orders?state=bogus", "state must be among"),
    ("/api/orders?colour=red", "unknown query parameter"),
    ("/api/orders/abc", "order id must be a whole number"),
    ("/api/orders/" + "9" * 30, "order id must be a whole number"),
    ("/api/contracts/0", "contract id must be a whole number"),
    ("/api/market/history?after=x", "after must be a whole number"),
    ("/api/alerts?below=nan", "below must be a finite number"),
    ("/api/alerts?below=1e400", "below must be a finite number"),
    ("/api/alerts?below=-1", "below must be a number from 0"),
    ("/api/alerts?above=1&cpu=0", "cpu must be a whole number"),
    ("/api/alerts?cpu=2", "give the alert's condition"),
])
def test_bad_numbers_in_paths_and_queries_get_400(market, path, msg):
    ex, clock, srv, c, tokens = market
    status, out = raw(srv, "GET", path, token=tokens["bob"])
    assert status == 400, out
    assert msg in json.loads(out)["error"], out


def test_bad_offers_get_400(market):
    ex, clock, srv, c, tokens = market
    for body, msg in ((b'{"node": "n0", "reserve": 1e10, "first_slot": 1, "last_slot": 2}', "'reserve' must be"),
                      (b'{"node": ["n0"], "reserve": 1, "first_slot": 1, "last_slot": 2}', "'node' must be 1-64"),
                      (b'{"node": "n0", "reserve": 1, "first_slot": 1, "last_slot": 10001}', "longer than"),
                      (b'{"node": "n0", "reserve": true, "first_slot": 1, "last_slot": 2}', "'reserve' must be")):
        status, out = raw(srv, "POST", "/api/offers", body, tokens["p1"])
        assert status == 400 and msg in json.loads(out)["error"], out
    c["p1"].post("/api/offers", {"node": "n0", "reserve": 1, "first_slot": 1, "last_slot": 5})
    with pytest.raises(ClientError, match="already has open offer") as e:
        c["p1"].post("/api/offers", {"node": "n0", "reserve": 1, "first_slot": 5, "last_slot": 9})
    assert e.value.status == 400


def test_oversize_bodies_are_refused_before_they_are_read(market):
    ex, clock, srv, c, tokens = market
    big = b'{"value": 1, "cpu": 1, "first_slot": 2, "last_slot": 3, "command": "' + b"x" * MAX_BODY + b'"}'
    status, out = raw(srv, "POST", "/api/requests", big, tokens["alice"])
    assert status == 413 and "too large" in json.loads(out)["error"]
    # a chunked body that never says how long it is: counted as it streams in
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        s.sendall(b"POST /api/requests HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + tokens["alice"].encode()
                  + b"\r\nTransfer-Encoding: chunked\r\n\r\n")
        chunk = b"x" * 65536
        answer = b""
        try:
            for _ in range(MAX_BODY // len(chunk) + 4):
                s.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        except (BrokenPipeError, ConnectionResetError):
            pass
        try:
            while b"\r\n\r\n" not in answer:
                got = s.recv(65536)
                if not got:
                    break
                answer += got
        except ConnectionResetError:
            pass
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    # a command within the body limit but beyond the exchange's bound
    status, out = raw(srv, "POST", "/api/requests", json.dumps(
        {"value": 1, "cpu": 1, "first_slot": 2, "last_slot": 3, "command": "y" * 70000}).encode(), tokens["alice"])
    assert status == 400 and "more than the 65536" in json.loads(out)["error"]
    assert ex.store.orders() == []
    assert c["alice"].get("/api/me")["name"] == "alice"  # the server still answers


def _stream(srv, path, token, headers=None):
    """An open alert stream (a urllib response: lines as they come)."""
    req = urllib.request.Request(srv.url + path, headers={"Authorization": f"Bearer {token}", **(headers or {})})
    return urllib.request.urlopen(req, timeout=30)


def _events(resp):
    """Server-sent events from a streaming response: (id, event, data) as they come."""
    fields: dict = {}
    for raw_line in resp:
        line = raw_line.decode().rstrip("\r\n")
        if line == "":
            if "data" in fields:
                yield fields.get("id"), fields.get("event"), json.loads(fields["data"])
            fields = {}
        elif not line.startswith(":"):
            k, _, v = line.partition(": ")
            fields[k] = v


def test_price_alerts_are_pushed_to_subscribers(market):
    ex, clock, srv, c, tokens = market
    # period 1: alice's 2 CPUs trade on p1's node (reserve 2)
    c["p1"].post("/api/offers", {"node": "n0", "reserve": 2, "first_slot": 1, "last_slot": 40})
    c["alice"].post("/api/requests", {"value": 9, "cpu": 2, "first_slot": 2, "last_slot": 3, "command": "a"})
    ex.clear()
    got = []
    with _stream(srv, "/api/alerts?below=3&cpu=2&after=0", tokens["bob"]) as resp:
        assert resp.status == 200 and resp.headers["content-type"].startswith("text/event-stream")
        events = _events(resp)
        got.append(next(events))  # the clearing before the subscription (after=0)
        # period 2: p1 withdraws its offer, bob buys on p2's node at reserve 5 or more: no alert
        clock.set(30)
        c["p1"].post("/api/orders/1/cancel")
        c["p2"].post("/api/offers", {"node": "m0", "reserve": 5, "first_slot": 6, "last_slot": 40})
        c["bob"].post("/api/requests", {"value": 9, "cpu": 2, "first_slot": 6, "last_slot": 6, "command": "b"})
        ex.clear()
        # period 3: p1 offers again at reserve 1: an alert
        c["p1"].post("/api/offers", {"node": "n0", "reserve": 1, "first_slot": 7, "last_slot": 40})
        c["bob"].post("/api/requests", {"value": 9, "cpu": 2, "first_slot": 8, "last_slot": 8, "command": "c"})
        clock.set(60)
        ex.clear()
        got.append(next(events))
    info = {r["period"]: r for r in market_info(ex.store)}
    assert len(info) == 3 and all(info[p]["contracts"] == 1 for p in info)
    assert [g[0] for g in got] == ["1", "3"] and all(g[1] == "price" for g in got)
    for _, _, data in got:
        assert data["cpu"] == 2 and data["price"] == info[data["period"]]["classes"][2]["price"] < 3
    assert info[2]["classes"][2]["price"] >= 5  # the clearing in between, no alert
    rows = json.loads(json.dumps(list(info.values())))
    assert c["bob"].get("/api/market/history?after=1&limit=1") == rows[1:2]
    assert c["bob"].get("/api/market/history?limit=2") == rows[1:] == c["bob"].get("/api/market/history?after=1")
    # a subscriber that comes back with Last-Event-ID gets what it missed since
    with _stream(srv, "/api/alerts?above=0", tokens["bob"], {"Last-Event-ID": "1"}) as resp:
        events = _events(resp)
        assert [next(events)[0], next(events)[0]] == ["2", "3"]


def test_alert_streams_per_party_are_capped(market):
    ex, clock, srv, c, tokens = market
    opened = [_stream(srv, "/api/alerts?above=1", tokens["bob"]) for _ in range(MAX_STREAMS_PER_PARTY)]
    try:
        assert all(r.status == 200 for r in opened)
        status, out = raw(srv, "GET", "/api/alerts?above=1", token=tokens["bob"])
        assert status == 429 and "alert streams open" in json.loads(out)["error"]
        assert raw(srv, "GET", "/api/alerts?above=1")[0] == 401
    finally:
        for r in opened:
            r.close()


def test_the_page_is_served_with_its_policy(market):
    ex, clock, srv, c, tokens = market
    req = urllib.request.Request(srv.url + "/")
    with urllib.request.urlopen(req, timeout=10) as r:
        body, csp = r.read(), r.headers["content-security-policy"]
    assert b"marketsched grid exchange" in body and b"/api/market/history" in body
    assert "script-src 'sha256-" in csp and "connect-src 'self'" in csp


def test_cli_token_and_serve(tmp_path):
    data = tmp_path / "ex"
    run = CliRunner().invoke
    assert run(main, ["exchange", "init", str(data)]).exit_code == 0
    assert run(main, ["exchange", "join", str(data), "p1"]).exit_code == 0
    out = run(main, ["exchange", "token", str(data), "p1", "--provider"])
    assert out.exit_code == 0 and len(out.output.strip()) >= 40
    out9 = run(main, ["exchange", "token", str(data), "p9", "--provider"])  # p9 will join through the API
    assert out9.exit_code == 0 and len(out9.output.strip()) >= 40
    assert "give --user or --provider" in run(main, ["exchange", "token", str(data), "x"]).output
    store = ExchangeStore(data)
    assert store.party(hashlib.sha256(out.output.strip().encode()).hexdigest()) == ("provider", "p1")
    store.close()
    res = run(main, ["exchange", "serve", str(data), "--host", "0.0.0.0", "--port", "0", "--for", "0"])
    assert res.exit_code != 0 and "refusing plain HTTP" in res.output


def test_providers_join_register_nodes_and_leave_through_the_api(market, monkeypatch):
    ex, clock, srv, c, tokens = market
    p3, p4 = (Client(srv.url, issue_token(ex.store, "provider", name, 0.0)) for name in ("p3", "p4"))
    with pytest.raises(ClientError, match="'p3' has not joined: POST /api/join first") as e:
        p3.post("/api/nodes", {"name": "a", "cpu": 1, "mem": 10, "cpus": [0]})
    assert e.value.status == 400
    assert p3.post("/api/join", {"kind": "local"})["joined"] is True
    with pytest.raises(ClientError, match="'p3' has already joined"):
        p3.post("/api/join", {"kind": "local"})
    node = p3.post("/api/nodes", {"name": "a", "cpu": 1, "mem": 10, "cpus": [0]})
    assert node == {"id": node["id"], "name": "a", "cpu": 1, "mem": 10, "cpus": [0], "left_t": None}
    with pytest.raises(ClientError, match="CPU 0 backs a node of this provider"):  # a CPU is sold once
        p3.post("/api/nodes", {"name": "a2", "cpu": 1, "mem": 10, "cpus": [0]})
    assert p3.get("/api/nodes") == [node] and c["p1"].get("/api/nodes")[0]["name"] == "n0"
    offer = p3.post("/api/offers", {"node": "a", "reserve": 0.5, "first_slot": 1, "last_slot": 9})
    c["alice"].post("/api/requests", {"value": 2, "cpu": 1, "first_slot": 2, "last_slot": 2, "command": "x"})
    ex.clear()
    (contract,) = ex.store.contracts()
    assert contract["provider"] in ("p1", "p3")
    # another provider cannot claim p3's CPU, nor leave p3's node, nor name p3 in a body
    p4.post("/api/join", {"kind": "local"})
    with pytest.raises(ClientError, match="CPU 0 backs a node of another provider") as e:
        p4.post("/api/nodes", {"name": "b", "cpu": 1, "mem": 10, "cpus": [0]})
    assert e.value.status == 400
    with pytest.raises(ClientError, match="provider 'p4' has no node 'a'"):
        p4.post("/api/nodes/a/leave")
    with pytest.raises(ClientError, match="unknown field"):
        p4.post("/api/nodes", {"name": "b", "cpu": 1, "mem": 10, "cpus": [1], "provider": "p3"})
    with pytest.raises(ClientError, match="only providers register nodes") as e:
        c["alice"].post("/api/nodes", {"name": "b", "cpu": 1, "mem": 10, "cpus": [1]})
    assert e.value.status == 403
    assert ex.store.order(offer["id"])["state"] == "open" and len(p3.get("/api/nodes")) == 1
    # p3's node leaves: its open offer is cancelled, its contract stands, it takes no new offer
    out = p3.post("/api/nodes/a/leave")
    assert out["cancelled_offers"] == [offer["id"]] and ex.store.order(offer["id"])["state"] == "cancelled"
    assert ex.store.contract(contract["id"])["state"] == "pending"
    with pytest.raises(ClientError, match="node 'a' of 'p3' has left the exchange"):
        p3.post("/api/offers", {"node": "a", "reserve": 0.5, "first_slot": 10, "last_slot": 12})
    assert p3.get("/api/nodes")[0]["left_t"] == clock()
    # its CPU stays taken while a contract of the node is unsettled (its job would run there), then is free
    assert contract["provider"] == "p3"  # its reserve, 0.5, is the lowest
    with pytest.raises(ClientError, match="CPU 0 backs a node of another provider"):
        p4.post("/api/nodes", {"name": "b", "cpu": 1, "mem": 10, "cpus": [0]})
    ex.settle(contract["id"], "lapsed", clock(), note="settled by the test")
    assert p4.post("/api/nodes", {"name": "b", "cpu": 1, "mem": 10, "cpus": [0]})["cpus"] == [0]
    assert p3.post("/api/leave")["left_t"] == clock()
    with pytest.raises(ClientError, match="provider 'p3' has left the exchange"):
        p3.post("/api/nodes", {"name": "c", "cpu": 1, "mem": 10, "cpus": [1]})
    with pytest.raises(ClientError, match="provider 'p3' has left"):
        p3.post("/api/leave")
    # at most MAX_NODES_PER_PROVIDER nodes that have not left (here 2)
    monkeypatch.setattr("marketsched.exchange.core.MAX_NODES_PER_PROVIDER", 2)
    p5 = Client(srv.url, issue_token(ex.store, "provider", "p5", 0.0))
    fake_slurm_partitions(monkeypatch)  # debug: 64 CPUs
    p5.post("/api/join", {"kind": "slurm", "partition": "debug"})
    for name in ("s1", "s2"):
        p5.post("/api/nodes", {"name": name, "cpu": 4, "mem": 100})
    with pytest.raises(ClientError, match=r"'p5' has 2 nodes, the most one provider may have \(2\)"):
        p5.post("/api/nodes", {"name": "s3", "cpu": 4, "mem": 100})
    p5.post("/api/nodes/s1/leave")
    p5.post("/api/nodes", {"name": "s3", "cpu": 4, "mem": 100})
    assert [n["name"] for n in p5.get("/api/nodes") if n["left_t"] is None] == ["s2", "s3"]
    # joining and leaving cannot grow the nodes table without end: 4 x the cap, those that left included
    for i in range(4, 9):
        p5.post(f"/api/nodes/s{i - 1}/leave")
        p5.post("/api/nodes", {"name": f"s{i}", "cpu": 4, "mem": 100})
    p5.post("/api/nodes/s8/leave")
    with pytest.raises(ClientError, match=r"'p5' has registered 8 nodes \(those that left included\)"):
        p5.post("/api/nodes", {"name": "s9", "cpu": 4, "mem": 100})


def test_a_slurm_partition_is_sold_by_one_provider_joining_through_the_api(market, monkeypatch):
    # the Slurm counterpart of "a CPU is sold once": a provider joining by itself cannot sell
    # the partition another provider sells (Slurm's default one included), until that one left
    # and its contracts are settled
    ex, clock, srv, c, tokens = market
    fake_slurm_partitions(monkeypatch)
    s = {name: Client(srv.url, issue_token(ex.store, "provider", name, 0.0)) for name in ("s1", "s2", "s3", "s4")}
    s["s1"].post("/api/join", {"kind": "slurm", "partition": "debug"})
    with pytest.raises(ClientError, match="Slurm partition 'debug' is sold by another provider") as e:
        s["s2"].post("/api/join", {"kind": "slurm", "partition": "debug"})
    assert e.value.status == 400 and ex.store.provider("s2") is None
    assert s["s2"].post("/api/join", {"kind": "slurm"})["partition"] is None  # Slurm's default: free
    with pytest.raises(ClientError, match="Slurm's default partition is sold by another provider"):
        s["s3"].post("/api/join", {"kind": "slurm"})
    ex.join("op", kind="slurm", partition="debug")  # the library called directly is not bound
    # s2 sells a contract, then leaves: the default partition stays taken until it is settled
    s["s2"].post("/api/nodes", {"name": "main", "cpu": 1, "mem": 10})
    now = ex.slot()
    s["s2"].post("/api/offers", {"node": "main", "reserve": 0.1, "first_slot": now + 1, "last_slot": now + 9})
    c["alice"].post("/api/requests", {"value": 2, "cpu": 1, "first_slot": now + 2, "last_slot": now + 2,
                                      "command": "x"})
    ex.clear()
    (contract,) = [k for k in ex.store.contracts() if k["provider"] == "s2"]
    s["s2"].post("/api/leave")
    with pytest.raises(ClientError, match="Slurm's default partition is sold by another provider"):
        s["s3"].post("/api/join", {"kind": "slurm"})
    ex.settle(contract["id"], "lapsed", clock(), note="settled by the test")
    assert s["s3"].post("/api/join", {"kind": "slurm"})["partition"] is None
    # a local provider is not bound by Slurm's partitions
    assert s["s4"].post("/api/join", {"kind": "local"})["kind"] == "local"


@pytest.mark.parametrize("path, body, msg", [
    ("/api/join", {"kind": "cloud"}, "provider field 'kind' must be one of local, slurm"),
    ("/api/join", {"kind": "local", "partition": "debug"}, "'partition' is for slurm providers only"),
    ("/api/join", {"kind": "slurm", "partition": "a b"}, "provider field 'partition' must be 1-64"),
    ("/api/join", {}, "a joining needs kind"),
    ("/api/nodes", {"name": "x", "cpu": 1, "mem": 1}, "node field 'cpus' is required"),
    ("/api/nodes", {"name": "x", "cpu": 1, "mem": 1, "cpus": [4096]}, "this machine has CPUs 0-"),
    ("/api/nodes", {"name": "x", "cpu": 1, "mem": 1, "cpus": []}, "'cpus' must be a non-empty list"),
    ("/api/nodes", {"name": "x", "cpu": 1, "mem": 1, "cpus": [-1]}, "'cpus' must be a non-empty list"),
    ("/api/nodes", {"name": "x", "cpu": 0, "mem": 1, "cpus": [0]}, "node field 'cpu' must be a whole number"),
    ("/api/nodes", {"name": "x", "cpu": 10**7, "mem": 1, "cpus": [0]}, "from 1 to 1000000"),
    ("/api/nodes", {"name": "x", "cpu": 1, "mem": -1, "cpus": [0]}, "node field 'mem' must be a whole number"),
    ("/api/nodes", {"name": "x", "cpu": 1, "mem": 10**13, "cpus": [0]}, "node field 'mem' must be a whole number"),
    ("/api/nodes", {"name": "../x", "cpu": 1, "mem": 1, "cpus": [0]}, "node field 'name' must be 1-64"),
    ("/api/nodes", {"name": "x", "cpu": 1.5, "mem": 1, "cpus": [0]}, "node field 'cpu' must be a whole number"),
    ("/api/nodes", {"cpu": 1, "mem": 1}, "a node needs name"),
])
def test_bad_joinings_and_nodes_get_400_naming_the_field(market, path, body, msg):
    ex, clock, srv, c, tokens = market
    p6 = Client(srv.url, issue_token(ex.store, "provider", "p6", 0.0))
    if path == "/api/nodes":
        p6.post("/api/join", {"kind": "local"})
    nodes = len(ex.store.nodes())
    with pytest.raises(ClientError) as e:
        p6.post(path, body)
    assert e.value.status == 400 and msg in str(e.value), str(e.value)
    assert len(ex.store.nodes()) == nodes
    if path == "/api/join":
        assert ex.store.provider("p6") is None


def test_the_pages_signed_reads_name_the_party_and_change_nothing(market):
    """The page's ``MarketSig`` reads (the live market's): a party's own orders, GET only."""
    import time

    from marketsched.live.broker import page_key_id
    from marketsched.platform.tokens import page_signature

    ex, clock, srv, c, tokens = market
    c["alice"].post("/api/requests", {"value": 1, "cpu": 1, "first_slot": 2, "last_slot": 3, "command": "x"})

    def signed(token, method, target, t_ms=None, sig=None):
        h = hashlib.sha256(token.encode()).hexdigest()
        t_ms = int(time.time() * 1000) if t_ms is None else t_ms
        sig = sig or page_signature(h, method, target, t_ms)
        header = f"MarketSig kid={page_key_id(h)}, t={t_ms}, sig={sig}"
        req = urllib.request.Request(srv.url + target, method=method, headers={"Authorization": header},
                                     data=b"{}" if method == "POST" else None)
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    status, body = signed(tokens["alice"], "GET", "/api/orders?limit=20")
    assert status == 200 and [o["owner"] for o in body] == ["alice"]
    assert signed(tokens["p1"], "GET", "/api/me") == (200, c["p1"].get("/api/me"))
    assert signed(tokens["bob"], "GET", "/api/orders")[1] == []
    status, body = signed(tokens["alice"], "POST", f"/api/orders/{body and 1}/cancel")
    assert status == 403 and "only read (GET)" in body["error"]
    assert ex.store.orders()[0]["state"] == "open"
    assert signed(tokens["alice"], "GET", "/api/orders", sig="0" * 64)[0] == 401
    assert signed(tokens["alice"], "GET", "/api/orders", t_ms=int((time.time() - 3600) * 1000))[0] == 401
    # signed for one address, sent to another: refused
    h = hashlib.sha256(tokens["alice"].encode()).hexdigest()
    assert signed(tokens["alice"], "GET", "/api/contracts", sig=page_signature(h, "GET", "/api/orders", 0))[0] == 401


def test_deposits_over_the_api(tmp_path):
    """An exchange with deposits: a user sees its money; a request beyond it is a 400 naming
    the field, and stores nothing."""
    ex, clock, _ = make_exchange(tmp_path / "x.db", deposits=True)
    ex.deposit("alice", 5)
    service = ExchangeService(ExchangeStore(tmp_path / "x.db"), clock)
    srv = ExchangeServer(service, "127.0.0.1", 0)
    srv.serve_in_thread()
    try:
        alice = Client(srv.url, issue_token(ex.store, "user", "alice", 0.0))
        alice.post("/api/requests", {"value": 1, "cpu": 2, "first_slot": 2, "last_slot": 3, "command": "x"})
        assert alice.get("/api/balance") == {"balance": 5.0, "committed": 4.0, "available": 1.0,
                                             "deposits_required": True}
        with pytest.raises(ClientError, match=r"request field 'value': the request may cost up to 2\.000000") as e:
            alice.post("/api/requests", {"value": 1, "cpu": 2, "first_slot": 2, "last_slot": 2, "command": "x"})
        assert e.value.status == 400 and len(ex.store.orders()) == 1
        p = Client(srv.url, issue_token(ex.store, "provider", "p", 0.0))
        with pytest.raises(ClientError, match="only users have deposits") as e:
            p.get("/api/balance")
        assert e.value.status == 403
    finally:
        srv.shutdown()
        service.store.close()
        ex.store.close()


def test_a_party_reads_its_own_balance_and_statement_and_no_one_elses(market):
    """`exchange balance|statement` with a party's token ask the API as that party; naming
    another party is refused (403), over the command line and the raw route."""
    ex, clock, srv, c, tokens = market
    ex.deposit("alice", 5)

    def cli(*args, token):
        return CliRunner().invoke(main, ["exchange", *args, str(srv.identity_dir), "--url", srv.url,
                                         "--token", token])

    got = cli("statement", "--json", token=tokens["alice"])
    assert got.exit_code == 0, got.output
    s = json.loads(got.output)
    assert (s["name"], s["balance"], [(e["kind"], e["signed"]) for e in s["entries"]]) == ("alice", 5.0,
                                                                                            [("deposit", 5.0)])
    assert cli("balance", token=tokens["alice"]).output == "alice: 5 (committed 0, available 5)\n"
    assert cli("balance", token=tokens["p1"]).output == "p1: 0\n"
    assert cli("statement", "--provider", "p1", token=tokens["p1"]).output == "balance 0\n"
    for args, token in ((("statement", "--user", "bob"), "alice"), (("statement", "--provider", "p1"), "alice"),
                        (("statement", "--user", "alice"), "p1"), (("balance", "--user", "bob"), "alice")):
        got = cli(*args, token=tokens[token])
        assert got.exit_code != 0 and "a party sees only its own" in got.output, (args, got.output)
        assert "deposit" not in got.output and "balance 5" not in got.output
    status, body = raw(srv, "GET", "/api/statement?user=alice", token=tokens["bob"])
    assert status == 403 and b"only its own statement" in body and b"deposit" not in body
    for query, named in (("limit=0", b"limit"), ("limit=9223372036854775808", b"limit"), ("before=0", b"before"),
                         ("user=alice&provider=p1", b"not both"), ("whose=bob", b"whose")):
        status, body = raw(srv, "GET", f"/api/statement?{query}", token=tokens["alice"])
        assert status == 400 and named in body and b"deposit" not in body, (query, body)
    assert raw(srv, "GET", "/api/statement")[0] == 401
