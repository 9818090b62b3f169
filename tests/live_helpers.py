"""Helpers shared by the live-market tests (local processes and Slurm)."""

import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path


def wait_for(pred, timeout=60.0, every=0.05):
    """Poll ``pred`` until it is true (True) or ``timeout`` seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(every)
    return False


def work(seconds, tag="", step=0.05, until=None):
    """A command needing ``seconds`` of *running* time: short sleeps in a loop, so time spent
    stopped (SIGSTOP, Slurm suspend) does not count (one plain ``sleep`` counts wall time even
    when stopped, since the kernel restarts it against its original deadline).

    With ``until`` (a path), it also runs until that file exists: a test that needs the job still
    running at some point touches the file after that point, so the order of events is set by the
    test, never by how fast a loaded machine gets there."""
    n = max(1, round(seconds / step))
    loop = f"[ $i -lt {n} ]" + ("" if until is None else f" || [ ! -e {until} ]")
    return f"i=0; while {loop}; do sleep {step}; i=$((i+1)); done; echo done {tag}"


SLOW = 1000  # slow-body connections from one party (flood_and_call)
CALLS = 20  # calls of the other parties while they are open
# a job that tries ``tries`` forks of sleeping children and writes "started failed" to ``forks``
BOMB = """python3 - <<'EOF'
import os, time
ok = failed = 0
for _ in range({tries}):
    try:
        pid = os.fork()
    except OSError:
        failed += 1
        continue
    if pid == 0:
        time.sleep(300)
        os._exit(0)
    ok += 1
with open("forks", "w") as f:
    f.write(f"{{ok}} {{failed}}\\n")
time.sleep(300)
EOF"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_broker(data: Path, port: int, log, *args, preexec_fn=None) -> subprocess.Popen:
    """``marketsched market serve --data DATA --port PORT ARGS...`` as its own process, its
    output to ``log`` (a file opened for writing); returns once its health check answers
    (AssertionError naming the end of its log if it exits, or if it does not come up within
    120 s)."""
    from marketsched.live.cli import Client

    p = subprocess.Popen([sys.executable, "-m", "marketsched.cli", "market", "serve", "--data", str(data),
                          "--port", str(port), *map(str, args)],
                         stdout=log, stderr=log, stdin=subprocess.DEVNULL, preexec_fn=preexec_fn)
    c = Client(f"http://127.0.0.1:{port}", None, timeout=5)
    deadline = time.monotonic() + 120  # a guard against a hang: a busy machine starts Python slowly
    while time.monotonic() < deadline:
        try:
            c.get("/api/health")
            return p
        except Exception:  # noqa: BLE001 - not up yet
            if p.poll() is not None:
                log.flush()
                tail = Path(log.name).read_bytes()[-3000:].decode(errors="replace")
                raise AssertionError(f"the broker exited with {p.returncode}; the end of its log:\n{tail}")
            time.sleep(0.1)
    p.kill()
    raise AssertionError("broker did not come up")


def serve_market(tmp_path: Path, name: str, service, *args, slots: int = 2):
    """A single-user market in ``tmp_path/market`` on ``slots`` CPUs running the mechanism
    service ``service(broker, *args)``, started and attached as ``broker.<name>`` (``ees``,
    ``dlgm``), served by a :class:`.MarketServer` in a thread on a free port (its ``url``).
    :func:`stop_served` stops it."""
    from marketsched.live.broker import Broker, MarketConfig
    from marketsched.live.server import MarketServer

    broker = Broker(tmp_path / "market", MarketConfig(slots=slots, single_user=True)).start()
    broker.ensure_admin()
    setattr(broker, name, service(broker, *args).start())
    srv = MarketServer(broker, "127.0.0.1", 0)
    srv.serve_in_thread()
    return srv


def stop_served(srv) -> None:
    """Stop a market of :func:`serve_market`: its server, then its broker, killing its jobs."""
    srv.shutdown()
    srv.server_close()
    srv.broker.stop(kill_jobs=True)


def add_users(admin, names, deposit: float) -> dict[str, str]:
    """Each user of ``names`` created with ``deposit`` by ``admin`` (a Client with the
    administrator's token): {name: token}."""
    return {u: admin.post("/api/users", {"name": u, "deposit": deposit})["token"] for u in names}


def user_clients(admin, names, deposit: float) -> dict:
    """:func:`add_users`, each user's Client: {name: Client}."""
    from marketsched.live.cli import Client

    return {u: Client(admin.url, token) for u, token in add_users(admin, names, deposit).items()}


def market_cli(srv, token: str):
    """A function running ``marketsched market ARGS...`` in this process (click's CliRunner)
    against the served market ``srv`` with ``token``: it asserts the exit code (``code``, 0
    unless given) and returns the output."""
    from click.testing import CliRunner

    from marketsched.cli import main

    env = {"MARKETSCHED_URL": srv.url, "MARKETSCHED_TOKEN": token, "MARKETSCHED_DATA": str(srv.identity_dir)}

    def run(*args, code: int = 0) -> str:
        r = CliRunner().invoke(main, ["market", *map(str, args)], env=env)
        assert r.exit_code == code, r.output
        return r.output

    return run


class BrokerRestarts:
    """``market serve ARGS...`` processes on one data folder (``tmp_path/market``, its
    ``data``) and port, one after another: :meth:`start` one, :meth:`kill_9` it, :meth:`start`
    the next. Its output goes to ``tmp_path/broker.log``. As a context manager, it ends by
    killing any that still runs and every job process the market recorded (a failing test
    leaves nothing running)."""

    def __init__(self, tmp_path: Path, *args):
        self.data = tmp_path / "market"
        self.port = free_port()
        self.args = args
        self.procs: list[subprocess.Popen] = []
        self.log = open(tmp_path / "broker.log", "ab")

    def start(self):
        """Start the next broker (:func:`start_broker`); returns a Client with the
        administrator's token."""
        from marketsched.live.cli import Client

        self.procs.append(start_broker(self.data, self.port, self.log, *self.args))
        return Client(f"http://127.0.0.1:{self.port}", (self.data / "admin.token").read_text().strip())

    def kill_9(self) -> None:
        """``kill -9`` the running broker and reap it."""
        self.procs[-1].send_signal(signal.SIGKILL)
        self.procs[-1].wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        from marketsched.platform.executor import kill_recorded_jobs

        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait()
        self.log.close()
        kill_recorded_jobs(self.data)


def require_cgroups(executor):
    """Fail (as root, or when ``CI`` is set) or skip (a normal user's machine) when the executor
    found no writable cgroup: cgroup tests never skip silently where cgroups must work."""
    import os

    import pytest

    if executor.contained:
        return
    why = f"no writable cgroup for jobs: {executor.layout.notes}"
    if os.geteuid() == 0 or os.environ.get("CI"):
        pytest.fail(why + " (running as root or in CI, where cgroups must work)")
    pytest.skip(why)


def proc_state(pid):
    """Scheduler state letter of ``pid`` (R, S, D, T, Z, ...), None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def make_service_account():
    """A fresh system account for a broker to run as (``useradd --system``, no home); a
    generator for a fixture: yields its name, then kills its processes and removes it. Needs
    root (skipped for a normal user, a failure as root or in CI, as the ``accounts`` fixture)."""
    import os
    import pwd
    import shutil

    import pytest

    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("the service-account tests create a Unix account and need root (CI runs as root)")
        pytest.skip("the service-account tests create a Unix account: run as root")
    if shutil.which("useradd") is None:
        pytest.fail("useradd is missing: the service-account tests need it")
    name = f"mssvc{os.getpid() % 100000}"
    subprocess.run(["useradd", "--system", "-M", "-d", "/nonexistent", "-s", "/usr/sbin/nologin", "-U", name],
                   check=True, capture_output=True)
    try:
        yield name
    finally:
        uid = pwd.getpwnam(name).pw_uid
        for d in Path("/proc").glob("[0-9]*"):
            try:
                if d.stat().st_uid == uid:
                    os.kill(int(d.name), 9)
            except (OSError, ValueError):
                pass
        subprocess.run(["userdel", "-f", name], capture_output=True)


def chown_tree(path: Path, name: str) -> None:
    """``chown -R name:name path`` (the data folder of a broker that will run as ``name``)."""
    subprocess.run(["chown", "-R", f"{name}:{name}", str(path)], check=True)


def raw(srv, method, path, body: bytes | None = None, token=None, headers=None):
    """One HTTP request to server ``srv`` (its ``url``) with a Bearer ``token``: ``(status, body)``."""
    import urllib.error
    import urllib.request

    req = urllib.request.Request(srv.url + path, data=body, method=method, headers=headers or {})
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


# ---------------------------------------------------------------------------- raw HTTP on loopback
def http(port, raw: bytes, timeout=10.0, read_all=True) -> tuple[int | None, dict, bytes]:
    """Send ``raw`` on a new connection; (status, headers, body) of the first answer (status
    None if the server closed without one)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            s.sendall(raw)
        except (BrokenPipeError, ConnectionResetError):
            pass
        return read_response(s)


def read_response(s: socket.socket) -> tuple[int | None, dict, bytes]:
    buf = b""
    while b"\r\n\r\n" not in buf:
        try:
            chunk = s.recv(65536)
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            return None, {}, buf
        buf += chunk
    head, rest = buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    n = int(headers.get("content-length", 0))
    while len(rest) < n:
        chunk = s.recv(65536)
        if not chunk:
            break
        rest += chunk
    return status, headers, rest[:n]


def request(method, path, body: bytes = b"", token=None, extra: str = "") -> bytes:
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}Content-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n{extra}\r\n").encode() + body


def health(port, timeout=10.0) -> tuple[int | None, dict, dict]:
    status, headers, body = http(port, b"GET /api/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", timeout)
    return status, headers, json.loads(body) if status == 200 else {}


def closed_by_peer(s: socket.socket) -> bool:
    s.setblocking(False)
    try:
        return s.recv(1) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True


def silent(s: socket.socket) -> bool:
    """``s`` is open and has received nothing: the server still waits for its request."""
    s.setblocking(False)
    try:
        s.recv(1, socket.MSG_PEEK)  # an answer, or the end of the stream
        return False
    except BlockingIOError:
        return True
    except OSError:
        return False


def slow_bodies(port, head: bytes, n: int) -> list[socket.socket]:
    """``n`` connections to 127.0.0.1:``port``, each sending ``head`` (a request's headers
    promising a body, and a part of it) and then nothing: bodies that never finish. The caller
    closes them."""
    socks: list[socket.socket] = []
    try:
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", port), timeout=30)
            socks.append(s)
            s.sendall(head)
    except BaseException:
        for s in socks:
            s.close()
        raise
    return socks


def _room_for(n: int) -> None:
    """Let this process open ``n`` more descriptors (client and in-process server sides)."""
    import pytest

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 2 * n + 512
    if soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            pytest.skip(f"this process may open at most {hard} files; the test needs {need}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))


def flood_and_call(srv, slow_head: bytes, others, per_party: int):
    """Open ``SLOW`` slow-body connections (``slow_head``), then make every call of ``others``
    (callables, each raising on failure) while they stay open; check that the server waits on
    at most ``per_party`` of them (the party's limit) and at least one (so every other call
    was answered before that connection's body deadline), and that each of the rest was
    answered 429 or closed to make room. Returns the calls' results."""
    _room_for(SLOW)
    socks = slow_bodies(srv.port, slow_head, SLOW)
    try:
        results = [call() for call in others]
        waiting = [s for s in socks if silent(s)]
        assert 1 <= len(waiting) <= per_party, len(waiting)
        for s in socks:
            if s not in waiting:
                s.setblocking(True)
                s.settimeout(30)
                assert read_response(s)[0] in (429, None)
        assert health(srv.port)[0] == 200
        return results
    finally:
        for s in socks:
            s.close()


# ---------------------------------------------------------------------------- Slurm
SLURM_ACTIVE = ("PENDING", "RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING")


def slurm_market_jobs(prefix: str) -> dict[str, tuple[int, str]]:
    """A market's jobs in Slurm (names starting with ``prefix``): {job name: (slurm id, state)}."""
    from marketsched.platform.slurm import run

    jobs = {}
    for line in run(["squeue", "-h", "-a", "-o", "%i|%j|%T"]).splitlines():
        i, name, st = line.split("|")
        if name.startswith(prefix):
            jobs[name] = (int(i), st)
    return jobs


def slurm_cancel_and_wait(prefix: str, timeout: float = 300.0) -> None:
    """Tests leave no Slurm job behind: cancel a market's jobs and wait until Slurm forgets
    them as running (COMPLETING ends within KillWait)."""
    for _, (i, st) in slurm_market_jobs(prefix).items():
        if st in SLURM_ACTIVE:
            subprocess.run(["scancel", str(i)], capture_output=True)
    assert wait_for(lambda: all(st not in SLURM_ACTIVE for _, st in slurm_market_jobs(prefix).values()), timeout), \
        slurm_market_jobs(prefix)


def slurm_broker(data: Path, port: int, log, slots: int) -> subprocess.Popen:
    """A single-user broker on the Slurm executor (:func:`start_broker`)."""
    return start_broker(data, port, log, "--slots", slots, "--charge-interval", "0.2", "--executor", "slurm",
                        "--sync", "normal", "--single-user")


def tagged_processes(tag):
    """Processes (pids) whose environment holds ``MARKETSCHED_TEST_TAG=tag``: the CLI's jobs
    inherit it, so this finds a job even if it was orphaned before the CLI recorded it."""
    needle = f"MARKETSCHED_TEST_TAG={tag}".encode()
    found = []
    for d in Path("/proc").glob("[0-9]*"):
        try:
            if needle in (d / "environ").read_bytes().split(b"\0"):
                found.append(int(d.name))
        except OSError:
            continue
    return found


def end_and_clean_up(proc, tag):
    """Kill ``proc`` if it still runs, then the processes tagged ``tag`` (see
    :func:`tagged_processes`) so a failing test leaves nothing running; returns the tagged pids
    that were still there (the test asserts there were none)."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    left = tagged_processes(tag)
    for pid in left:
        try:
            os.killpg(pid, signal.SIGKILL)
            os.killpg(pid, signal.SIGCONT)
        except OSError:
            pass
    return left
