"""The live market over HTTP on 127.0.0.1, and the `marketsched market` commands."""

import json
import threading
import time
import urllib.error
import urllib.request

import pytest
from click.testing import CliRunner

from live_helpers import raw, wait_for
from marketsched.cli import main
from marketsched.live.broker import Broker, MarketConfig
from marketsched.live.cli import Client, ClientError
from marketsched.live.server import MarketServer


@pytest.fixture
def server(tmp_path):
    broker = Broker(tmp_path / "market", MarketConfig(slots=1, single_user=True)).start()
    broker.ensure_admin()
    srv = MarketServer(broker, "127.0.0.1", 0)
    srv.serve_in_thread()
    yield srv
    srv.shutdown()
    srv.server_close()
    broker.stop(kill_jobs=True)


def test_page_health_and_auth(server):
    status, body = raw(server, "GET", "/")
    assert status == 200 and b"marketsched live market" in body and b"/api/market" in body
    assert raw(server, "GET", "/api/health")[0] == 200
    status, body = raw(server, "GET", "/api/jobs")
    assert status == 401 and b"no token" in body
    status, body = raw(server, "GET", "/api/jobs", token="not-a-token")
    assert status == 401 and json.loads(body)["error"] == "wrong token: no user has this token"
    admin = Client(server.url, server.broker.admin_token)
    assert admin.get("/api/me") == {"name": "admin", "admin": True}
    alice = Client(server.url, admin.post("/api/users", {"name": "alice", "deposit": 10})["token"])
    assert alice.get("/api/me") == {"name": "alice", "admin": False}
    with pytest.raises(ClientError, match="only the administrator") as e:
        alice.post("/api/users", {"name": "eve", "deposit": 1e9})
    assert e.value.status == 403
    assert raw(server, "GET", "/nowhere")[0] == 404
    assert raw(server, "PUT", "/api/jobs")[0] in (405, 501)
    assert raw(server, "DELETE", "/api/price", token=server.broker.admin_token)[0] == 405


def test_bad_input_gets_a_clear_error_and_changes_nothing(server):
    admin = Client(server.url, server.broker.admin_token)
    tok = admin.post("/api/users", {"name": "bob", "deposit": 10})["token"]
    before = (admin.get("/api/jobs"), admin.get("/api/balance"), admin.get("/api/statement?user=bob"))
    cases = [
        (b'{"bid": NaN, "command": "true"}', "bid must be a finite number"),
        (b'{"bid": Infinity, "command": "true"}', "bid must be a finite number"),
        (b'{"bid": -2, "command": "true"}', "bid must be a finite positive number"),
        (b'{"bid": 0, "command": "true"}', "bid must be a finite positive number"),
        (b'{"bid": "5", "command": "true"}', "bid must be a number"),
        (b'{"command": "true"}', "bid must be a finite positive number"),
        (b'{"bid": 1, "command": ""}', "command is empty"),
        (b'{"bid": 1, "command": []}', "command is empty"),
        (b'{"bid": 1}', "command is empty"),
        (b'{"bid": 1, "command": "true", "colour": "red"}', "unknown field"),
        (b'{"bid": 1, "command": "true", "procs": 4}', "must be a whole number from 1 to 1, this market"),
        (b'{"bid": 1, "command": "true", "procs": 0}', "must be a whole number from 1 to 1, this market"),
        (b'{"bid": 1, "command": "true", "procs": 1.5}', "procs"),
        (b'{"bid": 1, "command": "true", "estimate": -1}', "runtime estimate must be"),
        (b'{"bid": 1, ', "not valid JSON"),
        (b'[1, 2]', "must be a JSON object"),
    ]
    for body, msg in cases:
        status, out = raw(server, "POST", "/api/jobs", body, tok)
        assert status == 400, (body, out)
        assert msg in json.loads(out)["error"], (body, out)
    status, out = raw(server, "POST", "/api/jobs", b'{"bid": 1, "command": "true"}', "wrong")
    assert status == 401
    with pytest.raises(ClientError, match="unknown user 'nobody'") as e:
        admin.post("/api/users/nobody/deposit", {"amount": 5})
    assert e.value.status == 404
    with pytest.raises(ClientError, match="deposit must be a finite number"):
        admin.post("/api/users/bob/deposit", {"amount": float("nan")})
    with pytest.raises(ClientError, match="no job 99"):
        admin.get("/api/jobs/99")
    assert (admin.get("/api/jobs"), admin.get("/api/balance"), admin.get("/api/statement?user=bob")) == before


def test_users_see_and_cancel_only_their_own_jobs(server):
    admin = Client(server.url, server.broker.admin_token)
    a = Client(server.url, admin.post("/api/users", {"name": "ann", "deposit": 50})["token"])
    b = Client(server.url, admin.post("/api/users", {"name": "ben", "deposit": 50})["token"])
    ja = a.post("/api/jobs", {"bid": 2, "command": "sleep 30"})
    jb = b.post("/api/jobs", {"bid": 3, "command": ["sh", "-c", "sleep 30"]})
    assert jb["command"] == "sh -c 'sleep 30'"
    assert [j["id"] for j in a.get("/api/jobs")] == [ja["id"]]
    assert {j["id"] for j in admin.get("/api/jobs")} == {ja["id"], jb["id"]}
    with pytest.raises(ClientError, match="no job") as e:
        a.get(f"/api/jobs/{jb['id']}")
    assert e.value.status == 404
    with pytest.raises(ClientError, match="no job"):
        a.post(f"/api/jobs/{jb['id']}/cancel")
    assert a.get(f"/api/jobs/{ja['id']}")["state"] == "preempted"
    with pytest.raises(ClientError, match="no job"):
        a.post(f"/api/jobs/{jb['id']}/bid", {"bid": 9})
    with pytest.raises(ClientError, match=r"unknown field\(s\) \['command'\]"):
        a.post(f"/api/jobs/{ja['id']}/bid", {"bid": 9, "command": "x"})
    assert a.post(f"/api/jobs/{ja['id']}/bid", {"bid": 4})["state"] == "running"  # outbids ben's 3
    assert b.get(f"/api/jobs/{jb['id']}")["state"] == "preempted"
    assert a.request("DELETE", f"/api/jobs/{ja['id']}")["state"] == "cancelled"
    assert b.post(f"/api/jobs/{jb['id']}/cancel")["state"] == "cancelled"
    m = a.get("/api/market")
    assert m["me"] == {"name": "ann", "admin": False} and m["active"] == []
    assert [j["id"] for j in m["recent"]] == [ja["id"]]
    assert m["balance"]["user"] == "ann" and m["history"]
    assert a.get("/api/price/history?since=0&limit=2") == a.get("/api/price/history")[-2:]
    with pytest.raises(ClientError, match="limit must be"):
        a.get("/api/jobs?limit=x")


def test_concurrent_submissions_each_accepted_exactly_once(server):
    admin = Client(server.url, server.broker.admin_token)
    tokens = [admin.post("/api/users", {"name": f"u{i}", "deposit": 1000})["token"] for i in range(8)]
    results, errors = [], []

    def client(i):
        c = Client(server.url, tokens[i])
        for k in range(15):
            try:
                results.append((i, k, c.post("/api/jobs", {"bid": 1 + (k % 4), "command": f"echo {i}-{k}"})["id"]))
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(repr(exc))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(results) == 120 and len({r[2] for r in results}) == 120
    jobs = admin.get("/api/jobs")
    assert sorted(j["command"] for j in jobs) == sorted(f"echo {i}-{k}" for i, k, _ in results)
    assert wait_for(lambda: all(j["state"] == "completed" for j in admin.get("/api/jobs")), 600, every=0.1)
    jobs = admin.get("/api/jobs")
    assert all(j["state"] == "completed" and j["exit_code"] == 0 and j["attempts"] == 1 for j in jobs)
    bal = admin.get("/api/balance")
    assert sum(u["balance"] for u in bal["users"].values()) + bal["revenue"] == pytest.approx(bal["deposits"]) == 8000


def test_cli_commands(server, tmp_path):
    runner = CliRunner()
    env = {"MARKETSCHED_URL": server.url, "MARKETSCHED_TOKEN": server.broker.admin_token,
           "MARKETSCHED_DATA": str(server.identity_dir)}  # no socket there: HTTP, its server.id checked

    def run(*args, token=None, code=0):
        e = dict(env)
        if token:
            e["MARKETSCHED_TOKEN"] = token
        r = runner.invoke(main, ["market", *args], env=e)
        assert r.exit_code == code, r.output
        return r

    tok = run("user", "add", "cli", "--deposit", "20").stdout.strip().splitlines()[-1]
    assert len(tok) > 30
    (tmp_path / "tok").write_text(tok + "\n")
    out = run("submit", "--bid", "2", "--", "sh", "-c", "echo hi; sleep 30", token=tok).output
    assert out.startswith("job 1 running")
    r = run("submit", "--bid", "nan", "--", "true", token=tok, code=1)
    assert "bid must be a finite number" in r.output
    r = run("submit", "--bid", "1", "--", "", token=tok, code=1)
    assert "command is empty" in r.output
    r = run("submit", "--bid", "1", "--cpus", "2", "--restartable", "--", "true", token=tok, code=1)
    assert "must be a whole number from 1 to 1, this market's CPUs (got 2)" in r.output  # the options reach the market
    r = run("list", token="wrong", code=1)
    assert "wrong token" in r.output
    assert "sleep 30" in run("list", "--token-file", str(tmp_path / "tok"), "--token", "").output
    time.sleep(0.2)
    assert "job 1 of cli: running" in run("show", "1", token=tok).output
    assert "price 1/s (hb, kth price); running 1/1" in run("price", "--history", token=tok).output
    assert "job 1 running, bid 3" in run("rebid", "1", "3", token=tok).output
    r = run("rebid", "1", "0", token=tok, code=1)
    assert "bid must be a finite positive number" in r.output
    assert "job 1 cancelled" in run("cancel", "1", token=tok).output
    assert "cli:" in run("balance", token=tok).output
    st = run("statement", token=tok).output
    assert "deposit" in st and "+20.000000" in st
    assert "revenue" in run("balance").output
    out = run("deposit", "cli", "5").output
    charged = server.broker.job("admin", True, 1)["charged"]  # its running time at price 1, however long
    assert out.startswith("cli: balance ") and float(out.split()[-1]) == pytest.approx(20 - charged + 5, abs=1e-6)
    assert 0 < charged < 20
    r = run("deposit", "ghost", "5", code=1)
    assert "unknown user 'ghost'" in r.output
    r = runner.invoke(main, ["market", "list"], env={**env, "MARKETSCHED_URL": "http://127.0.0.1:9", "MARKETSCHED_TOKEN": "x"})
    assert r.exit_code == 1 and "cannot reach the market" in r.output


def test_web_page_signed_reads(server):
    """The page's signed reads (the Chromium test drives the page itself): a good signature
    reads; a write, a stale time, another path or a wrong key is refused."""
    import hashlib
    import time

    from marketsched.live.broker import page_key_id
    from marketsched.platform.tokens import page_signature

    h = hashlib.sha256(server.broker.admin_token.encode()).hexdigest()

    def signed(method, path, signed_path=None, t_ms=None, key=h, kid=None):
        t_ms = int(time.time() * 1000) if t_ms is None else t_ms
        sig = page_signature(key, method, signed_path or path, t_ms)
        req = urllib.request.Request(server.url + path, method=method, data=b"{}" if method == "POST" else None)
        req.add_header("Authorization", f"MarketSig kid={kid or page_key_id(h)}, t={t_ms}, sig={sig}")
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    assert signed("GET", "/api/me") == (200, {"name": "admin", "admin": True})
    assert signed("GET", "/api/jobs?limit=5")[0] == 200  # the query is signed too
    status, out = signed("POST", "/api/users")
    assert status == 403 and "only read" in out["error"]
    status, out = signed("GET", "/api/me", t_ms=int(time.time() * 1000) - 3_600_000)
    assert status == 401 and "from the broker's clock" in out["error"]
    assert signed("GET", "/api/balance", signed_path="/api/me")[0] == 401
    assert signed("GET", "/api/jobs?limit=5", signed_path="/api/jobs?limit=6")[0] == 401
    assert signed("GET", "/api/me", key="0" * 64)[0] == 401
    assert signed("GET", "/api/me", key="0" * 64, kid="0" * 32)[0] == 401
    status, out = raw(server, "GET", "/api/me", token=None)
    assert status == 401


def test_a_new_token_replaces_the_old_one_at_once(server, tmp_path):
    """`user token NAME`: the old token (and the page's signatures under its hash) stop working
    at once, the new one works; a user renews only their own; the administrator's new token
    replaces admin.token."""
    import hashlib

    from marketsched.live.broker import page_key_id
    from marketsched.platform.tokens import page_signature

    b = server.broker
    admin = Client(server.url, b.admin_token)
    old = admin.post("/api/users", {"name": "alice", "deposit": 10})["token"]
    bob = Client(server.url, admin.post("/api/users", {"name": "bob", "deposit": 10})["token"])
    alice_old = Client(server.url, old)
    job = alice_old.post("/api/jobs", {"bid": 1, "command": "sleep 30"})["id"]

    def signed_me(token):
        h = hashlib.sha256(token.encode()).hexdigest()
        t_ms = int(time.time() * 1000)
        req = urllib.request.Request(server.url + "/api/me", method="GET")
        req.add_header("Authorization", f"MarketSig kid={page_key_id(h)}, t={t_ms}, "
                                        f"sig={page_signature(h, 'GET', '/api/me', t_ms)}")
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    assert signed_me(old) == 200
    runner = CliRunner()
    res = runner.invoke(main, ["market", "user", "token", "alice", "--url", server.url, "--token", b.admin_token,
                                "--data", str(server.identity_dir)])
    assert res.exit_code == 0, res.output
    new = res.stdout.strip().splitlines()[-1]
    assert new != old and len(new) >= 43
    status, body = raw(server, "GET", "/api/me", token=old)
    assert status == 401 and b"wrong token" in body  # at once: no restart, no delay
    assert signed_me(old) == 401
    alice = Client(server.url, new)
    assert alice.get("/api/me") == {"name": "alice", "admin": False} and signed_me(new) == 200
    assert alice.get(f"/api/jobs/{job}")["state"] == "running"  # her jobs and money are hers still
    # a user renews their own token, never another's; unknown users are named
    with pytest.raises(ClientError, match="only the administrator") as e:
        bob.post("/api/users/alice/token", {})
    assert e.value.status == 403 and alice.get("/api/me")["name"] == "alice"
    newer = alice.post("/api/users/alice/token", {})["token"]
    assert raw(server, "GET", "/api/me", token=new)[0] == 401
    assert Client(server.url, newer).get("/api/me")["name"] == "alice"
    with pytest.raises(ClientError, match="unknown user 'zed'") as e:
        admin.post("/api/users/zed/token", {})
    assert e.value.status == 404
    # the administrator's own: admin.token is replaced, the old token refused
    old_admin = b.admin_token
    new_admin = admin.post("/api/users/admin/token", {})["token"]
    assert (b.data / "admin.token").read_text().strip() == new_admin
    assert (b.data / "admin.token").stat().st_mode & 0o077 == 0
    assert raw(server, "GET", "/api/me", token=old_admin)[0] == 401
    assert Client(server.url, new_admin).get("/api/me") == {"name": "admin", "admin": True}
    # what the database keeps (a restarted broker's index is built from it): only the new hashes
    for tok, kept in ((old, False), (new, False), (newer, True), (old_admin, False), (new_admin, True)):
        assert (b.store.user_by_token_hash(hashlib.sha256(tok.encode()).hexdigest()) is not None) == kept
