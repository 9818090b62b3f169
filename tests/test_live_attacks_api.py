"""Attacks on the live market's API, against a real broker process on 127.0.0.1 (and its Unix
socket): an idle-connection flood, slow headers, bodies that lie about their length or outgrow
the limit, request smuggling, every kind of bad number, too many or too large jobs, callers
on the Unix socket, plain HTTP beyond loopback, TLS.

Everything goes to loopback (or the broker's own socket), in bounded counts and times. No
assertion depends on how fast the machine is: where a bound in seconds is checked it is
generous (a health check answered within 10 s while the flood is open, sockets closed within
30 s of a 1 s header deadline), and the server's own account of its time (``Server-Timing``)
is checked besides; what matters is that the API answers at all.
"""

import json
import os
import pwd
import resource
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from live_helpers import closed_by_peer, free_port, health, http, read_response, request, start_broker, wait_for
from marketsched.live.broker import MarketError
from marketsched.live.cli import Client, ClientError
from marketsched.platform.executor import kill_recorded_jobs

FLOOD = 1500  # idle connections
BROKER_FILES = 1024  # the broker's open-file limit in the flood test (the failing set-up)


# ---------------------------------------------------------------------------- helpers
def server_ms(headers) -> float:
    """The broker's own time for a request (``Server-Timing: wait;dur=.., app;dur=..``), ms."""
    parts = dict(p.strip().split(";dur=") for p in headers["server-timing"].split(","))
    return float(parts["wait"]) + float(parts["app"])


def rss_kib(pid) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.fixture
def market(tmp_path):
    """A broker process on 127.0.0.1 in single-user mode (its jobs run as this test's account;
    the job side's tests cover jobs as their users), arguments added by the test; yields a
    starter."""
    started = []

    def start(*args, files: int | None = None, data: Path | None = None):
        data = data or tmp_path / "market"
        port = free_port()
        log = open(tmp_path / f"broker{len(started)}.log", "ab")
        pre = (lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (files, files))) if files else None
        p = start_broker(data, port, log, "--single-user", *args, preexec_fn=pre)
        started.append((p, log, data))
        admin = Client(f"http://127.0.0.1:{port}", (data / "admin.token").read_text().strip())
        return p, port, admin

    yield start
    for p, log, data in started:
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        log.close()
        kill_recorded_jobs(data)


# ---------------------------------------------------------------------------- connections
def test_idle_connection_flood_keeps_health_checks_and_jobs_going(market, tmp_path):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = FLOOD + 100
    if soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            pytest.skip(f"the test process may open at most {hard} files; the flood needs {need}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    p, port, admin = market("--slots", 1, "--header-timeout", 1, files=BROKER_FILES)
    alice = Client(admin.url, admin.post("/api/users", {"name": "alice", "deposit": 100})["token"])
    cap = health(port)[2]["max_connections"]
    assert cap < FLOOD and cap <= BROKER_FILES - 128  # the open-file limit caps connections
    flood: list[socket.socket] = []
    try:
        for _ in range(FLOOD):
            s = socket.socket()
            s.settimeout(5)
            try:
                s.connect(("127.0.0.1", port))
            except OSError:  # the listen queue is full: that is the kernel's limit, not ours
                s.close()
                continue
            flood.append(s)
        assert len(flood) >= cap, f"only {len(flood)} connections got through"
        # with every flood socket still open: the health check answers, and so does the API
        # (the client's wait is only a guard against a hang: a loaded machine may take its time to
        # get through the flood's connections; the server's own time for the request says whether
        # an idle connection held it: below the 1 s header deadline it would have waited out)
        status, headers, h = health(port, timeout=120)
        assert status == 200 and h["ok"], (status, h)
        assert server_ms(headers) < 1000, headers["server-timing"]
        assert h["connections"] <= h["max_connections"] == cap
        # to hold at most `cap`, the broker closed the others: idle ones made way for newcomers
        # (evicted), or missed the 1 s header deadline
        assert h["evicted"] > 0
        assert wait_for(lambda: sum(closed_by_peer(s) for s in flood) >= len(flood) - cap, 120)
        job = alice.post("/api/jobs", {"bid": 1, "command": "echo still-runs"})
        assert wait_for(lambda: admin.get(f"/api/jobs/{job['id']}")["state"] == "completed", 120)
        assert admin.get(f"/api/jobs/{job['id']}")["stdout"] == "still-runs\n"  # launched: descriptors left
        # the broker closes every idle socket: evicted at once, or at the 1 s header deadline
        assert wait_for(lambda: all(closed_by_peer(s) for s in flood), 120)
        assert p.poll() is None
    finally:
        for s in flood:
            s.close()
    assert health(port)[2]["connections"] <= 2
    # the broker never ran out of descriptors (asyncio would stop accepting for a second each time)
    log = (tmp_path / "broker0.log").read_text()
    assert "Too many open files" not in log and "out of system resource" not in log, log[-2000:]


def test_slow_headers_are_cut_off(market):
    p, port, admin = market("--header-timeout", 1)
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        head = b"GET /api/health HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200
        t0 = time.monotonic()
        closed = False
        for i in range(len(head)):  # one byte every 0.2 s: would take 40 s; the deadline is 1 s
            try:
                s.sendall(head[i:i + 1])
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            if closed_by_peer(s):
                closed = True
                break
            s.setblocking(True)
            time.sleep(0.2)
        assert closed and time.monotonic() - t0 < 30
    finally:
        s.close()
    assert health(port)[0] == 200


def test_body_deadline_and_unread_responses(tmp_path):
    """In-process (a body deadline of 1 s is not a command-line option): a body that never
    finishes is cut off; a client that does not read its answer is dropped."""
    from marketsched.live.broker import Broker, MarketConfig
    from marketsched.live.server import MarketServer
    from marketsched.platform.server import Limits

    b = Broker(tmp_path / "market", MarketConfig()).start()
    b.ensure_admin()
    srv = MarketServer(b, "127.0.0.1", 0, limits=Limits(body_timeout=1, send_timeout=1, max_connections=3))
    srv.serve_in_thread()
    stalled = request("POST", "/api/jobs", b"", b.admin_token).replace(b"Content-Length: 0",
                                                                      b"Content-Length: 100") + b'{"bid"'
    try:
        with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as s:
            s.sendall(stalled)
            status, _, body = read_response(s)  # the server closes it: no answer, or nothing after
            assert status is None
        # as many stalled bodies as the cap allows: each is cut at its deadline (not kept open in a
        # lingering close), so they cannot lock the next client out
        before = srv.stats()
        socks = [socket.create_connection(("127.0.0.1", srv.port), timeout=30) for _ in range(3)]
        try:
            for s in socks:
                s.sendall(stalled)
            for s in socks:  # each is closed by the server, with no answer
                assert read_response(s)[0] is None
            # all three were taken in (none refused) and cut by their deadline (none evicted: a
            # connection receiving a body is not idle)
            after = srv.stats()
            assert (after["refused"], after["evicted"]) == (before["refused"], before["evicted"])
            assert wait_for(lambda: srv.stats()["connections"] == 0, 30)
            assert health(srv.port)[0] == 200
        finally:
            for s in socks:
                s.close()
        # answers sent before their bodies were read (a GET with a body nobody reads), then silence:
        # the lingering connections stay within the cap, and the server's own sockets with them
        fds = len(os.listdir("/proc/self/fd"))
        held = []
        try:
            for _ in range(8):
                s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
                s.sendall(b"GET /api/health HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nxx")
                assert read_response(s)[0] == 200
                held.append(s)
            # 8 sockets of ours, at most 3 of the server's (the cap), and a margin of 2 (the loop's own)
            assert wait_for(lambda: len(os.listdir("/proc/self/fd")) <= fds + 8 + 3 + 2, 30)
            assert srv.stats()["connections"] <= 3
        finally:
            for s in held:
                s.close()
        # pipelined requests whose answers are never read: the server stops writing, then drops it
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect(("127.0.0.1", srv.port))
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" * 2000)
            assert wait_for(lambda: srv.stats()["connections"] == 0, 30)
        assert health(srv.port)[0] == 200
    finally:
        srv.shutdown()
        b.stop()


# ---------------------------------------------------------------------------- bodies
def test_bodies_that_lie_about_their_length(market):
    p, port, admin = market()
    tok = admin.token
    before = rss_kib(p.pid)
    junk = b"x" * (8 << 20)
    for cl in ("-1", "-100", "abc", "1e3", " ", "0x10", "1, 2"):
        raw = (f"POST /api/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {tok}\r\n"
               f"Content-Length: {cl}\r\n\r\n").encode() + junk
        status, headers, body = http(port, raw)
        assert status == 400, (cl, status, body)
        assert "Content-Length" in json.loads(body)["error"], body
        assert headers.get("connection") == "close"
    # both framings at once; a declared length past the limit; a chunked body past it; bad chunks
    both = (f"POST /api/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {tok}\r\nContent-Length: 5\r\n"
            f"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n").encode()
    assert http(port, both)[0] == 400
    for digits, expect in ((11, 413), (19, 413), (30, 400)):  # h11 takes at most 20 digits as a length
        big = request("POST", "/api/jobs", b"", tok).replace(b"Content-Length: 0", b"Content-Length: " + b"9" * digits)
        status, headers, body = http(port, big + junk)
        assert status == expect, (digits, status, body)
        assert ("too large" if expect == 413 else "bad Content-Length") in json.loads(body)["error"]
    chunk = b"%x\r\n%s\r\n" % (65536, b"y" * 65536)
    chunked = (f"POST /api/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {tok}\r\n"
               f"Transfer-Encoding: chunked\r\n\r\n").encode() + chunk * 40 + b"0\r\n\r\n"
    status, headers, body = http(port, chunked)
    assert status == 413 and "more than 1048576 bytes" in json.loads(body)["error"]
    bad_chunk = (f"POST /api/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {tok}\r\n"
                 f"Transfer-Encoding: chunked\r\n\r\n-1\r\nxx\r\n0\r\n\r\n").encode()
    assert http(port, bad_chunk)[0] == 400
    assert rss_kib(p.pid) - before < 30 * 1024  # nothing was buffered (was 49 MB -> 461 MB)
    assert health(port)[0] == 200
    assert admin.get("/api/jobs") == []


def test_no_request_is_smuggled_in_a_body(market):
    p, port, admin = market()
    smuggled = request("POST", "/api/users", b'{"name": "smuggled", "deposit": 1}', admin.token)
    for first in (request("POST", "/api/jobs", smuggled, "wrong-token"),  # refused before its body is read
                  request("GET", "/api/price", smuggled, admin.token),  # a body where none is read
                  request("POST", "/api/jobs", smuggled, admin.token)):  # read, and not JSON
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(first + b"GET /api/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            answers = []
            while True:
                status, _, body = read_response(s)
                if status is None:
                    break
                answers.append((status, body))
        assert answers and answers[0][0] in (200, 400, 401), answers
        assert all(b'"smuggled"' not in body for _, body in answers)
    with pytest.raises(ClientError, match="unknown user 'smuggled'"):  # never created
        admin.post("/api/users/smuggled/deposit", {"amount": 1})


# ---------------------------------------------------------------------------- numbers
BIG = "9" * 400
HUGE = "9" * 5000  # past Python's 4,300-digit limit for int()


def test_each_bad_number_is_400_and_changes_nothing(market):
    p, port, admin = market("--dayahead", "dpgva", "--da-clear-at", "+3600", "--da-horizon", 600,
                            "--da-granularity", 60)
    bob = admin.post("/api/users", {"name": "bob", "deposit": 100})
    tok = bob["token"]
    job = Client(admin.url, tok).post("/api/jobs", {"bid": 1, "command": "sleep 60"})["id"]

    def state():  # what a bad request could change (a running job's charges move by themselves)
        jobs = [(j["id"], j["bid"], j["state"], j["command"], j["estimate"]) for j in admin.get("/api/jobs")]
        bal = admin.get("/api/balance")
        entries = [e for e in admin.get("/api/statement?user=bob")["entries"] if e["kind"] != "charge"]
        return jobs, sorted(bal["users"]), bal["deposits"], entries, admin.get("/api/dayahead")["bids"]

    before = state()
    a = admin.token
    cases = [
        # (method, path, body, token, what the error names)
        ("POST", "/api/jobs", '{"bid": 1e308, "command": "true"}', tok, "bid"),
        ("POST", "/api/jobs", '{"bid": -1e308, "command": "true"}', tok, "bid"),
        ("POST", "/api/jobs", '{"bid": 1e309, "command": "true"}', tok, "bid must be a finite number"),
        ("POST", "/api/jobs", '{"bid": NaN, "command": "true"}', tok, "bid must be a finite number"),
        ("POST", "/api/jobs", '{"bid": Infinity, "command": "true"}', tok, "bid must be a finite number"),
        ("POST", "/api/jobs", '{"bid": -Infinity, "command": "true"}', tok, "bid must be a finite number"),
        ("POST", "/api/jobs", f'{{"bid": {BIG}, "command": "true"}}', tok, "bid"),
        ("POST", "/api/jobs", f'{{"bid": -{BIG}, "command": "true"}}', tok, "bid"),
        ("POST", "/api/jobs", f'{{"bid": {HUGE}, "command": "true"}}', tok, "not valid JSON"),
        ("POST", "/api/jobs", '{"bid": 5e-324, "command": "true", "estimate": 5e-324}', tok, "runtime estimate"),
        ("POST", "/api/jobs", '{"bid": 1, "command": "true", "estimate": 1e308}', tok, "runtime estimate"),
        ("POST", "/api/jobs", f'{{"bid": 1, "command": "true", "procs": {BIG}}}', tok, "procs"),
        ("POST", "/api/jobs", '{"bid": 1, "command": "true", "procs": 9223372036854775808}', tok, "procs"),
        ("POST", "/api/jobs", '{"bid": 1, "command": "echo \\ud800"}', tok, "command contains '\\ud800'"),
        ("POST", "/api/jobs", '{"bid": 1, "command": ["echo", "\\udfff"]}', tok, "command[1]"),
        ("POST", "/api/jobs", '{"bid": 1, "command": [["echo"]]}', tok, "nested too deeply"),
        ("POST", "/api/jobs", '{"bid": 1, "command": {"a": 1}}', tok, "command must not be a JSON object"),
        ("POST", "/api/jobs", "[" * 100_000 + "]" * 100_000, tok, "nested too deeply"),
        ("POST", "/api/jobs", '{"bid": 1, "bid": 1e308, "command": "true"}', tok, "field 'bid' is given twice"),
        ("POST", "/api/jobs", '{"bid": 1, "command": "true", "admin": true}', tok, "unknown field(s) ['admin']"),
        ("POST", "/api/jobs", b'{"bid": 1, "command": "\xff"}', tok, "not UTF-8"),
        ("POST", "/api/users", '{"name": "eve", "admin": true}', a, "unknown field(s) ['admin']"),
        ("POST", "/api/users", '{"name": "eve", "deposit": 1e308}', a, "deposit"),
        ("POST", "/api/users", f'{{"name": "eve", "deposit": {BIG}}}', a, "deposit"),
        ("POST", "/api/users", '{"name": "\\ud800", "deposit": 1}', a, "name contains '\\ud800'"),
        ("POST", "/api/users", '{"name": "eve", "unix": "\\ud800"}', a, "unix contains"),
        ("POST", "/api/users/bob/deposit", '{"amount": 1e308}', a, "deposit"),
        ("POST", "/api/users/bob/deposit", '{"amount": NaN}', a, "deposit must be a finite number"),
        ("POST", "/api/users/bob/deposit", f'{{"amount": {BIG}}}', a, "deposit"),
        ("POST", "/api/users/bob/deposit", '{"amount": -1e-300}', a, "deposit must be a positive"),
        ("POST", "/api/users/bob/deposit", '{"amount": 5, "to": "eve"}', a, "unknown field(s) ['to']"),
        ("POST", f"/api/jobs/{job}/bid", '{"bid": 1e308}', tok, "bid"),
        ("POST", f"/api/jobs/{job}/bid", f'{{"bid": {BIG}}}', tok, "bid"),
        ("POST", f"/api/jobs/{job}/cancel", '{"force": true}', tok, "unknown field(s) ['force']"),
        ("GET", "/api/jobs/9223372036854775808", "", tok, "job id must be a whole number"),
        ("GET", f"/api/jobs/{BIG}", "", tok, "job id must be a whole number"),
        ("GET", "/api/jobs/-1", "", tok, "job id must be a whole number"),
        ("POST", "/api/jobs/99999999999999999999/cancel", "{}", tok, "job id"),
        ("DELETE", "/api/jobs/1e3", "", tok, "job id"),
        ("GET", "/api/jobs?limit=9223372036854775808", "", tok, "limit must be a whole number from 1 to 1000"),
        ("GET", f"/api/jobs?limit={BIG}", "", tok, "limit"),
        ("GET", "/api/jobs?limit=0", "", tok, "limit"),
        ("GET", "/api/jobs?limit=-5", "", tok, "limit"),
        ("GET", "/api/jobs?limit=1001", "", tok, "limit"),
        ("GET", "/api/jobs?before=9223372036854775808", "", tok, "before"),
        ("GET", "/api/jobs?state=running,exploded", "", tok, "unknown job state"),
        ("GET", "/api/jobs?colour=red", "", tok, "unknown query parameter 'colour'"),
        ("GET", "/api/jobs?limit=1&limit=2", "", tok, "given twice"),
        ("GET", "/api/price/history?since=nan", "", tok, "since must be a finite number"),
        ("GET", "/api/price/history?since=1e999", "", tok, "since must be a finite number"),
        ("GET", "/api/price/history?since=1e300", "", tok, "since"),
        ("GET", "/api/price/history?limit=9223372036854775808", "", tok, "limit"),
        ("GET", "/api/statement?limit=9223372036854775808", "", tok, "limit"),
        ("GET", "/api/statement?before=0", "", tok, "before"),
        ("GET", "/api/market?limit=99999999999999999999", "", tok, "limit"),
        ("POST", "/api/dayahead/bids", '{"length": 60, "deadline": 120, "value": 1e308}', tok, "maximum price"),
        ("POST", "/api/dayahead/bids", f'{{"length": 60, "deadline": 120, "value": {BIG}}}', tok, "maximum price"),
        ("POST", "/api/dayahead/bids", '{"length": 1e308, "deadline": 120, "value": 1}', tok, "deadline"),
        ("POST", "/api/dayahead/bids", f'{{"length": {BIG}, "deadline": 120, "value": 1}}', tok, "length"),
        ("POST", "/api/dayahead/bids", '{"length": 60, "deadline": NaN, "value": 1}', tok, "deadline"),
        ("POST", "/api/dayahead/bids", f'{{"length": 60, "deadline": 120, "value": 1, "nodes": {BIG}}}', tok,
         "nodes"),
        ("POST", "/api/dayahead/bids", '{"length": 60, "deadline": 120, "value": 1, "command": "\\ud800"}', tok,
         "command"),
    ]
    for method, path, body, token, names in cases:
        raw = body.encode() if isinstance(body, str) else body
        status, headers, out = http(port, request(method, path, raw, token))
        assert status == 400, (method, path, body[:80], status, out[:300])
        error = json.loads(out)["error"]
        assert names in error, (path, body[:80], error)
        assert len(error) < 600, error  # a 400-digit number is not echoed back whole
    assert state() == before
    assert health(port)[0] == 200 and p.poll() is None


# ---------------------------------------------------------------------------- limits per user, pages
def test_per_user_limits_and_pages(market):
    p, port, admin = market("--slots", 1, "--max-jobs-per-user", 5, "--max-command-bytes", 2000,
                            "--dayahead", "dpgva", "--da-clear-at", "+3600", "--da-horizon", 600,
                            "--da-granularity", 60)
    carol = Client(admin.url, admin.post("/api/users", {"name": "carol", "deposit": 1000})["token"])
    dan = Client(admin.url, admin.post("/api/users", {"name": "dan", "deposit": 1000})["token"])
    with pytest.raises(ClientError, match="command is 2001 bytes long, more than the 2000") as e:
        carol.post("/api/jobs", {"bid": 1, "command": "#" * 2001})
    assert e.value.status == 413
    ids = [carol.post("/api/jobs", {"bid": 1, "command": f"sleep 60 # {k} " + "#" * 1900})["id"] for k in range(5)]
    with pytest.raises(ClientError, match=r"carol has 5 active jobs .* \(5\)") as e:
        carol.post("/api/jobs", {"bid": 1, "command": "true"})
    assert e.value.status == 429
    assert dan.post("/api/jobs", {"bid": 1, "command": "sleep 60"})["state"] == "queued"  # others are not held up
    carol.post(f"/api/jobs/{ids[0]}/cancel")  # one ended: room for one more
    ids.append(carol.post("/api/jobs", {"bid": 1, "command": "sleep 60"})["id"])
    # lists cut long commands; a job's own view has it whole
    listed = {j["id"]: j for j in carol.get("/api/jobs")}
    assert listed[ids[1]]["command_truncated"] and len(listed[ids[1]]["command"]) == 241
    assert carol.get(f"/api/jobs/{ids[1]}")["command"].endswith("#" * 1900)
    # pages: newest first within the limit, then back with the Link header's cursor
    status, headers, body = http(port, request("GET", "/api/jobs?limit=2", token=admin.token))
    page = json.loads(body)
    assert status == 200 and len(page) == 2 and page[0]["id"] < page[1]["id"]
    nxt = headers["link"].split(">")[0].lstrip("<")
    assert nxt == f"/api/jobs?limit=2&before={page[0]['id']}"
    older = admin.get(nxt)
    assert [j["id"] for j in older] == [page[0]["id"] - 2, page[0]["id"] - 1]
    m = carol.get("/api/market?limit=2")
    assert len(m["active"]) == 2 and m["active_total"] == 5
    # sealed day-ahead bids: the same limit per user
    for _ in range(5):
        dan.post("/api/dayahead/bids", {"length": 60, "deadline": 120, "value": 1})
    with pytest.raises(ClientError, match="dan has 5 sealed day-ahead bids") as e:
        dan.post("/api/dayahead/bids", {"length": 60, "deadline": 120, "value": 1})
    assert e.value.status == 429


def test_the_job_limit_counts_jobs_after_a_restart(tmp_path):
    from marketsched.live.broker import Broker, MarketConfig

    cfg = dict(slots=1, max_jobs_per_user=3, single_user=True)
    b = Broker(tmp_path / "market", MarketConfig(**cfg)).start()
    b.ensure_admin()
    b.add_user(True, "eve", 100)
    ids = [b.submit("eve", False, 1.0, "sleep 60")["id"] for _ in range(3)]
    b.stop(kill_jobs=False)
    b = Broker(tmp_path / "market", MarketConfig(**cfg)).start()
    try:
        assert b.active_by_user["eve"] == 3
        with pytest.raises(MarketError, match="eve has 3 active jobs") as e:
            b.submit("eve", False, 1.0, "true")
        assert e.value.status == 429
        b.cancel("eve", False, ids[0])
        assert b.submit("eve", False, 1.0, "sleep 60")["state"] in ("queued", "running")
        assert b.active_by_user["eve"] == 3 == sum(j.owner == "eve" for j in b.active.values())
    finally:
        b.stop(kill_jobs=True)


# ---------------------------------------------------------------------------- the Unix socket
def _python_for(uid: int) -> str:
    """A Python interpreter account ``uid`` may run (this test's may sit in a private folder)."""
    for cand in (sys.executable, "/usr/bin/python3", "/usr/local/bin/python3"):
        try:
            if subprocess.run([cand, "-I", "-S", "-c", "pass"], user=uid, capture_output=True, timeout=30).returncode == 0:
                return cand
        except OSError:
            continue
    pytest.skip("no Python interpreter that another account may run")


PEER_CLIENT = r"""
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(b"GET /api/me HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
out = b""
while chunk := s.recv(65536):
    out += chunk
print(out.decode().split("\r\n\r\n", 1)[1])
print(out.decode().split()[1])
"""


def test_unix_socket_knows_the_caller_without_a_token(market, accounts):
    linked, stranger = (pwd.getpwnam(n) for n in accounts)  # fresh Unix accounts (conftest)
    base = Path(tempfile.mkdtemp(prefix="marketsched-sock-"))
    os.chmod(base, 0o711)  # other accounts may pass through to the broker's data folder
    data = base / "market"
    try:
        p, port, admin = market(data=data)
        sock = data / "market.sock"
        assert oct(os.stat(data).st_mode & 0o777) == "0o711" and oct(os.stat(sock).st_mode & 0o777) == "0o666"
        admin.post("/api/users", {"name": "alice", "deposit": 10, "unix": linked.pw_name})

        python = _python_for(linked.pw_uid)

        def as_user(pw):
            r = subprocess.run([python, "-I", "-S", "-c", PEER_CLIENT, str(sock)], user=pw.pw_uid,
                               group=pw.pw_gid, capture_output=True, text=True, timeout=30)
            assert r.returncode == 0, r.stderr
            body, status = r.stdout.strip().rsplit("\n", 1)
            return int(status), json.loads(body)

        assert as_user(linked) == (200, {"name": "alice", "admin": False})
        status, out = as_user(stranger)
        who = stranger.pw_name
        assert status == 401 and f"Unix user {who!r}" in out["error"] and f"--unix {who}" in out["error"]
        # root (this test) is the administrator, through the CLI's --data: no token anywhere
        from click.testing import CliRunner

        from marketsched.cli import main

        r = CliRunner().invoke(main, ["market", "balance", "--data", str(data)], env={"MARKETSCHED_TOKEN": ""})
        assert r.exit_code == 0 and "alice" in r.output and "revenue" in r.output, r.output
        r = CliRunner().invoke(main, ["market", "user", "add", "bea", "--deposit", "1", "--unix", "mkth4-nope",
                                      "--socket", str(sock)])
        assert r.exit_code == 1 and "Unix account 'mkth4-nope' does not exist" in r.output
        # a token sent on the socket changes nothing: the caller is its Unix account
        status, _, body = http_unix(sock, request("GET", "/api/me", token="not-a-token"))
        assert status == 200 and json.loads(body) == {"name": "admin", "admin": True}
    finally:
        shutil.rmtree(base, ignore_errors=True)


def http_unix(path, raw: bytes):
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(str(path))
        s.sendall(raw)
        return read_response(s)


def test_a_second_broker_on_the_same_folder_is_refused(market, tmp_path):
    p, port, admin = market()
    r = subprocess.run([sys.executable, "-m", "marketsched.cli", "market", "serve", "--data", str(tmp_path / "market"),
                        "--port", str(free_port())], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "another broker answers on" in r.stderr
    assert health(port)[0] == 200


# ---------------------------------------------------------------------------- beyond loopback, TLS
def test_plain_http_beyond_loopback_is_refused(tmp_path):
    r = subprocess.run([sys.executable, "-m", "marketsched.cli", "market", "serve", "--data", str(tmp_path / "m"),
                        "--host", "0.0.0.0", "--port", str(free_port())], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "refusing plain HTTP on 0.0.0.0" in r.stderr and "--insecure-http" in r.stderr
    assert not (tmp_path / "m").exists()  # refused before anything was made
    from marketsched.platform.server import check_plain_http

    check_plain_http("0.0.0.0", tls=False, insecure_http=True)
    check_plain_http("10.1.2.3", tls=True, insecure_http=False)
    for local in ("127.0.0.1", "localhost", "::1"):
        check_plain_http(local, tls=False, insecure_http=False)


def test_tls(market, tmp_path):
    if not shutil.which("openssl"):
        pytest.skip("needs openssl to make a certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   check=True, capture_output=True)
    data = tmp_path / "market"
    port = free_port()
    log = open(tmp_path / "tls.log", "ab")
    p = subprocess.Popen([sys.executable, "-m", "marketsched.cli", "market", "serve", "--data", str(data), "--port",
                          str(port), "--tls-cert", str(cert), "--tls-key", str(key)], stdout=log, stderr=log)
    try:
        ctx = ssl.create_default_context(cafile=str(cert))

        def get_health():
            with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
                with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                    s.sendall(b"GET /api/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    return read_response(s)

        def up():
            try:
                return get_health()[0] == 200
            except OSError:
                return False

        assert wait_for(up, 120)  # a guard against a hang: a busy machine starts Python slowly
        # plain HTTP to the TLS port gets no answer from the API
        status, _, _ = http(port, b"GET /api/health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status != 200
        r = subprocess.run([sys.executable, "-m", "marketsched.cli", "market", "balance", "--url",
                            f"https://127.0.0.1:{port}", "--token-file", str(data / "admin.token")],
                           capture_output=True, text=True, timeout=60, env={**os.environ, "SSL_CERT_FILE": str(cert)})
        assert r.returncode == 0 and "revenue" in r.stdout, r.stderr
    finally:
        p.terminate()
        p.wait(timeout=30)
        log.close()


def test_openapi_schema(market):
    p, port, admin = market()
    status, _, body = http(port, b"GET /openapi.json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    schema = json.loads(body)
    assert status == 200 and schema["info"]["title"] == "marketsched live market"
    paths = schema["paths"]
    assert {"/api/jobs", "/api/jobs/{job_id}", "/api/users", "/api/users/{name}/deposit", "/api/market",
            "/api/dayahead/bids", "/api/health"} <= set(paths)
    users = paths["/api/users"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert users["additionalProperties"] is False and set(users["properties"]) == {"name", "deposit", "unix"}
    assert {q["name"] for q in paths["/api/jobs"]["get"]["parameters"]} == {"state", "limit", "before"}
    assert "bearer" in schema["components"]["securitySchemes"]
