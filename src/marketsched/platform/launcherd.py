"""The privileged launcher: the one root process of a market whose broker runs as a service account.

``marketsched market serve --service-user ACCOUNT``, started as root, spawns this launcher
(:func:`spawn`) and then drops to ``ACCOUNT`` (:func:`drop_privileges`), which owns the
database, the administrator's token, the API and the jobs' state files. The launcher keeps
root for exactly what needs it, as Slurm's ``slurmstepd`` does for ``slurmd``:

* making a job's folder (``ROOT/job-KEY``, owned by the job's user, mode 0700), its
  ``command.sh``, ``stdout`` and ``stderr`` (never through a link: :mod:`marketsched.platform.jobfiles`);
* making the job's cgroups with the market's limits, starting the job's launcher process in
  them (:mod:`marketsched.platform.launcher`: ``sh`` waiting for the go, ``setpriv``, ``env -i``),
  and giving the go once the broker has written its state file;
* freezing, thawing and killing the job's cgroups, and removing them;
* reading a job's ``stdout``, ``stderr`` and ``exit_code`` for the broker (the folder is the
  user's, closed to the service account).

It talks to the broker over a socket pair (length-prefixed JSON), and validates every request
itself; it trusts nothing the broker says beyond the request set (:data:`REQUESTS`):

* a request is a JSON object with ``op`` one of the fixed operations and exactly that
  operation's fields, each of its type; anything else is refused, and the launcher goes on;
* a job is named by its id (a positive integer), never by a path: every path is the
  launcher's own ``ROOT/job-ID`` (``ROOT`` fixed at its start and owned by the service
  account) or the job's cgroups under the market's cgroup folders; a file read is one of
  ``stdout``, ``stderr``, ``exit_code``; files are opened through the folder's descriptor
  without following links, and the process waiting for the go must be in the very folder
  that was filled (the service account owns ``ROOT``, so it could swap a job's folder
  between the two: :meth:`marketsched.platform.executor.LocalExecutor.start` checks);
* a job runs as an account named in the request, which must exist, must not be root nor the
  service account, must be an ordinary account (uid from ``UID_MIN`` to ``UID_MAX`` of
  ``/etc/login.defs``, 1000 to 60000 by default: system accounts such as ``daemon`` or
  ``nobody`` are never reachable), and must be mapped to a market user in the database
  (``users.unix_user``; read with the service account's rights, so a link the service
  account planted cannot make root open another file); uid, gid, groups and home come from
  the system's user database, never from the broker;
* the job's limits are the launcher's own (fixed at its start), and its environment is
  :func:`marketsched.platform.executor.job_environment` plus ``MARKETSCHED_*`` variables only.

What a compromised service account can still do: run any command as any account mapped in
the database (it owns the database, so it can add a mapping: the floor at ``UID_MIN`` keeps
system accounts out), read its jobs' output, freeze, thaw and kill the market's jobs. What it
cannot: act as root, act as an unmapped or system account, touch files outside the jobs'
folders, or change a job's limits.

The launcher ignores SIGINT and SIGTERM (the broker stops first and freezes its jobs through
it) and exits when the broker's end of the socket closes; a job started but not yet given the
go then reads end of file and exits without running (:data:`marketsched.platform.launcher.NO_GO`).
"""

from __future__ import annotations

import json
import os
import pwd
import signal
import socket
import sqlite3
import struct
import subprocess
import sys
import threading
import urllib.parse
from contextlib import contextmanager
from dataclasses import asdict, replace
from pathlib import Path

from marketsched.platform.cgroups import JobCgroup, Layout
from marketsched.platform.executor import (
    CLEAN_PATH,
    JobLimits,
    LocalExecutor,
    Proc,
    RunAs,
    market_cgroup_name,
    proc_start_ticks,
)
from marketsched.platform.jobfiles import JobFileError

MAX_MESSAGE = 4 << 20  # bytes of one request or answer (a command is at most 1 MiB)
MAX_KEY = 2**63 - 1
READABLE = ("stdout", "stderr", "exit_code")
NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
# each operation's fields and their types (bool is checked apart from int)
REQUESTS: dict[str, dict[str, type | tuple[type, ...]]] = {
    "start": {"key": int, "user": str, "command": str, "env": dict, "frozen": bool, "record_exit": bool},
    "go": {"key": int},
    "freeze": {"key": int},
    "thaw": {"key": int},
    "kill": {"key": int, "timeout": (int, float)},
    "status": {"key": int},
    "read": {"key": int, "name": str, "size": int},
    "cleanup": {},
}


class LauncherError(OSError):
    """The launcher refused a request, could not carry it out, or is gone."""


class Refused(Exception):
    """A request outside the launcher's request set (answered with the reason)."""


# ---------------------------------------------------------------------------- framing
def send(sock: socket.socket, obj: dict) -> None:
    data = json.dumps(obj).encode()
    sock.sendall(struct.pack("!I", len(data)) + data)


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    chunks, left = [], n
    while left:
        b = sock.recv(min(left, 1 << 16))
        if not b:
            return None
        chunks.append(b)
        left -= len(b)
    return b"".join(chunks)


def recv_frame(sock: socket.socket) -> bytes | None:
    """One message's bytes (None at end of file); Refused for one longer than MAX_MESSAGE."""
    head = _recv_exact(sock, 4)
    if head is None:
        return None
    (n,) = struct.unpack("!I", head)
    if n > MAX_MESSAGE:
        raise Refused(f"message of {n} bytes, more than {MAX_MESSAGE}")
    return _recv_exact(sock, n)


# ---------------------------------------------------------------------------- accounts
def uid_range(path: str = "/etc/login.defs") -> tuple[int, int]:
    """(UID_MIN, UID_MAX) of ordinary accounts (``login.defs``; 1000 and 60000 if unset)."""
    found = {"UID_MIN": 1000, "UID_MAX": 60000}
    try:
        for line in Path(path).read_text().splitlines():
            parts = line.split()
            if len(parts) >= 2 and parts[0] in found and parts[1].isdigit():
                found[parts[0]] = int(parts[1])
    except OSError:
        pass
    return found["UID_MIN"], found["UID_MAX"]


@contextmanager
def acting_as(uid: int, gid: int):
    """Open files with ``uid``/``gid``'s rights (effective ids, no supplementary groups) for the
    block; root again after it. Only in the launcher, which has a single thread."""
    if os.geteuid() != 0 or uid == 0:
        yield
        return
    groups = os.getgroups()
    os.setgroups([gid])
    os.setegid(gid)
    os.seteuid(uid)
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(0)
        os.setgroups(groups)


# ---------------------------------------------------------------------------- the launcher
class LauncherService:
    """The launcher's state: the jobs' folder ``root`` (which must belong to ``owner``, the
    broker's account), the market's cgroups and per-job ``limits``, and the database ``db``
    that maps market users to Unix accounts (:attr:`mapping`).

    The grid exchange's launcher (:mod:`marketsched.exchange.launcher`) extends it through
    :attr:`requests`, :attr:`mapping`, :meth:`executor_of`, :meth:`start_options` and
    :meth:`cleanup`."""

    requests = REQUESTS  # the request set
    mapping = "SELECT 1 FROM users WHERE unix_user = ?"  # a row if a market user is mapped to the account

    def __init__(self, root: Path, owner: int, limits: JobLimits, db: Path):
        self.root = Path(root)
        self.owner = owner
        try:
            self.owner_gid = pwd.getpwuid(owner).pw_gid
        except KeyError:
            self.owner_gid = owner
        self.limits = limits
        self.db = Path(db)
        self.name = market_cgroup_name(self.root)
        self.layout = Layout.detect(self.name)
        self.uids = uid_range()
        self._executor: LocalExecutor | None = None
        self.pending: dict[int, Proc] = {}  # started, waiting for the go
        self.children: dict[int, subprocess.Popen] = {}  # given the go, not yet reaped

    def hello(self) -> dict:
        """What the broker needs to know: where the job's cgroups are (it reads their state,
        world-readable) and the limits."""
        lay = self.layout
        if lay.track is None:
            return {"error": "the privileged launcher needs writable cgroups to contain jobs ("
                             + "; ".join(lay.notes) + ")"}

        def where(x):
            return None if x is None else [x[0], str(x[1])]

        return {"name": self.name, "track": where(lay.track), "cpu": where(lay.cpu), "memory": where(lay.memory),
                "pids": where(lay.pids), "notes": lay.notes, "limits": asdict(self.limits)}

    @property
    def executor(self) -> LocalExecutor:
        if self._executor is None:  # the jobs' folder exists once the broker has started
            self._executor = LocalExecutor(self.root, containment=replace(self.layout, notes=[]), limits=self.limits,
                                           name=self.name, owner=self.owner)
        return self._executor

    # ------------------------------------------------------------------ checks
    def check(self, req) -> tuple[str, dict]:
        """``(op, fields)`` of a well-formed request; Refused naming the problem otherwise."""
        if not isinstance(req, dict):
            raise Refused("a request is a JSON object")
        op = req.get("op")
        if not isinstance(op, str) or op not in self.requests:
            raise Refused(f"unknown request {str(op)[:40]!r}; the requests are {', '.join(self.requests)}")
        spec = self.requests[op]
        fields = {k: v for k, v in req.items() if k != "op"}
        if set(fields) != set(spec):
            extra, missing = sorted(set(fields) - set(spec)), sorted(set(spec) - set(fields))
            raise Refused(f"{op}: fields {', '.join(spec) or 'none'} expected"
                          + (f"; unknown: {', '.join(x[:40] for x in extra)}" if extra else "")
                          + (f"; missing: {', '.join(missing)}" if missing else ""))
        for k, t in spec.items():
            v = fields[k]
            if isinstance(v, bool) != (t is bool) or not isinstance(v, t):
                raise Refused(f"{op}: {k} has the wrong type")
        if "key" in fields and not 0 < fields["key"] <= MAX_KEY:
            raise Refused(f"{op}: key must be a job id (a positive integer), got {fields['key']}")
        return op, fields

    def account(self, name: str) -> RunAs:
        """The account a job may run as (module docstring); Refused otherwise."""
        if not name or len(name) > 32 or not set(name) <= NAME_CHARS:
            raise Refused(f"start: user must be a Unix account name, got {name[:40]!r}")
        try:
            acct = RunAs.lookup(name)  # refuses root and accounts that do not exist
        except ValueError as exc:
            raise Refused(f"start: {exc}") from None
        if acct.uid == self.owner:
            raise Refused(f"start: {name!r} is the broker's own account")
        lo, hi = self.uids
        if not lo <= acct.uid <= hi:
            raise Refused(f"start: {name!r} (uid {acct.uid}) is a system account: jobs run only as ordinary "
                          f"accounts (uid {lo} to {hi}, UID_MIN and UID_MAX of /etc/login.defs)")
        if not self.mapped(name):
            raise Refused(f"start: Unix account {name!r} is not mapped to a market user")
        return acct

    def mapped(self, name: str) -> bool:
        """True if a market user is mapped to Unix account ``name`` in the database."""
        uri = "file:" + urllib.parse.quote(str(self.db)) + "?mode=ro"
        with acting_as(self.owner, self.owner_gid):
            try:
                con = sqlite3.connect(uri, uri=True, timeout=30)
                try:
                    return con.execute(self.mapping, (name,)).fetchone() is not None
                finally:
                    con.close()
            except sqlite3.Error as exc:
                raise Refused(f"start: cannot read the market's users ({exc})") from None

    @staticmethod
    def environment(env: dict) -> dict[str, str]:
        for k, v in env.items():
            if not (k.startswith("MARKETSCHED_") and set(k) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
                    and isinstance(v, str) and "\0" not in v and len(v) <= 4096):
                raise Refused(f"start: environment variable {str(k)[:40]!r} is not one of the market's")
        return env

    # ------------------------------------------------------------------ requests
    def executor_of(self, fields: dict) -> LocalExecutor:
        """The executor a (checked) request is about."""
        return self.executor

    def start_options(self, fields: dict, executor: LocalExecutor) -> dict:
        """More arguments of a start's :meth:`LocalExecutor.start` (the market: none, its
        limits are the launcher's own); Refused for fields outside what the launcher allows."""
        return {}

    def cleanup(self, fields: dict) -> None:
        """Remove the cgroup folders no job is left in."""
        self.layout.remove()

    def handle(self, req) -> dict:
        op, f = self.check(req)
        key: int = f.get("key", 0)
        if op == "cleanup":
            self.cleanup(f)
            return {}
        ex = self.executor_of(f)
        if op == "start":
            if key in self.pending or key in self.children or key in ex.launched:
                raise Refused(f"start: job {key} was already started by this launcher")
            if "\0" in f["command"] or len(f["command"].encode()) > 1 << 20:
                raise Refused("start: command must be text of at most 1 MiB")
            user = self.account(f["user"])
            proc = ex.start(key, f["command"], self.environment(f["env"]), user, frozen=f["frozen"],
                            record_exit=f["record_exit"], **self.start_options(f, ex))
            self.pending[key] = proc
            cg = proc.cgroup
            assert cg is not None  # the launcher runs only with cgroups (hello)
            return {"pid": proc.pid, "ticks": proc.start_ticks, "cgroups": [str(d) for d in cg.dirs()],
                    "track": cg.track_kind}
        if op == "go":
            waiting = self.pending.pop(key, None)
            if waiting is None:
                raise Refused(f"go: job {key} is not waiting for its go")
            ex.go(waiting)
            ex.launched.add(key)
            assert waiting.popen is not None
            self.children[key] = waiting.popen
            return {}
        if op in ("freeze", "thaw"):
            ex._cg_freeze(ex.layout.job(key), op == "freeze")
            return {}
        if op == "kill":
            cg = ex.layout.job(key)
            killed = bool(cg.pids())
            gone = ex._cg_kill(cg, min(max(float(f["timeout"]), 0.0), 30.0))
            pending = self.pending.pop(key, None)
            popen = self.children.pop(key, None) or (pending.popen if pending else None)
            if popen is not None:
                try:
                    popen.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self.children[key] = popen
            return {"killed": killed, "gone": gone}
        if op == "status":
            popen = self.children.get(key)
            if popen is None:
                return {"code": None}
            try:
                code = popen.wait(timeout=5)
            except subprocess.TimeoutExpired:
                return {"code": None, "running": True}
            del self.children[key]
            return {"code": code}
        if op == "read":
            if f["name"] not in READABLE:
                raise Refused(f"read: name must be one of {', '.join(READABLE)}, got {f['name'][:40]!r}")
            if not 0 <= f["size"] <= 1 << 20:
                raise Refused("read: size must be from 0 to 1 MiB")
            return {"text": ex.read_file(key, f["name"], f["size"])}
        raise Refused(f"{op}: not carried out by this launcher")

    def answer(self, frame: bytes) -> dict:
        try:
            try:
                req = json.loads(frame)
            except (ValueError, UnicodeDecodeError):
                raise Refused("a request is a JSON object") from None
            return self.handle(req)
        except Refused as exc:
            return {"error": f"refused: {exc}", "refused": True}
        except JobFileError as exc:
            return {"error": str(exc), "job_file": True}
        except (OSError, RuntimeError, ValueError) as exc:
            return {"error": f"{type(exc).__name__}: {exc}"}


def serve_requests(sock: socket.socket, service: LauncherService) -> None:
    """Answer the broker's requests, one at a time, until it closes its end."""
    send(sock, service.hello())
    while True:
        try:
            frame = recv_frame(sock)
        except Refused as exc:  # the stream cannot be read on: answer and stop
            send(sock, {"error": f"refused: {exc}", "refused": True})
            return
        except OSError:
            return
        if frame is None:
            return
        send(sock, service.answer(frame))


def main(argv: list[str], service_class: type[LauncherService] = LauncherService) -> int:
    """The launcher process: answer on the socket ``argv[0]`` with the configuration ``argv[1]``
    (:func:`spawn`'s) as a ``service_class``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    fd, config = int(argv[0]), json.loads(argv[1])
    sock = socket.socket(fileno=fd)
    service = service_class(Path(config["root"]), int(config["owner"]), JobLimits(**config["limits"]),
                            Path(config["db"]))
    serve_requests(sock, service)
    return 0


# ---------------------------------------------------------------------------- the broker's side
class LauncherClient:
    """The broker's end of the socket to the launcher: :meth:`call` sends one request and
    returns the answer (LauncherError for a refusal or failure, JobFileError for a job file the
    launcher would not read). Thread-safe."""

    def __init__(self, sock: socket.socket, process: subprocess.Popen | None = None):
        self.sock = sock
        self.process = process
        self.lock = threading.Lock()
        hello = self._recv()
        if hello is None:
            raise LauncherError("the privileged launcher did not start (its error is above)")
        if "error" in hello:
            raise LauncherError(hello["error"])
        self.hello: dict = hello

    def _recv(self) -> dict | None:
        frame = recv_frame(self.sock)
        return None if frame is None else json.loads(frame)

    def call(self, op: str, **fields) -> dict:
        with self.lock:
            try:
                send(self.sock, {"op": op, **fields})
                reply = self._recv()
            except OSError as exc:
                raise LauncherError(f"the privileged launcher is gone ({exc})") from None
        if reply is None:
            raise LauncherError("the privileged launcher is gone")
        if "error" in reply:
            if reply.get("job_file"):
                raise JobFileError(reply["error"])
            raise LauncherError(reply["error"])
        return reply

    def close(self) -> None:
        """Close the socket: the launcher exits."""
        self.sock.close()
        if self.process is not None:
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass


def spawn(root: Path, owner: int, limits: JobLimits, db: Path,
          module: str = "marketsched.platform.launcherd") -> LauncherClient:
    """Start the privileged launcher (as this process's account: root) for the jobs' folder
    ``root`` owned by uid ``owner``, with per-job ``limits`` and the database ``db``; returns
    the client once the launcher has said hello. ``module``: the launcher's module (one whose
    ``main`` is :func:`main`'s). A fresh interpreter in isolated mode (no
    environment, no current folder on its path), in its own session (a Ctrl-C at the
    broker's terminal does not reach it), with only its end of the socket."""
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    config = {"root": str(Path(root).resolve()), "owner": owner, "db": str(Path(db).resolve()),
              "limits": asdict(limits)}
    try:
        p = subprocess.Popen([sys.executable, "-I", "-m", module, str(theirs.fileno()),
                              json.dumps(config)], pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                             cwd="/", env={"PATH": CLEAN_PATH, "LANG": "C.UTF-8"}, start_new_session=True)
    finally:
        theirs.close()
    try:
        return LauncherClient(mine, p)
    except BaseException:
        mine.close()
        p.wait()
        raise


def service_account(account: str) -> pwd.struct_passwd:
    """The broker's service account; RuntimeError if it does not exist or is root."""
    try:
        pw = pwd.getpwnam(account)
    except KeyError:
        raise RuntimeError(f"service account {account!r} does not exist on this machine") from None
    if pw.pw_uid == 0:
        raise RuntimeError(f"service account {account!r} is root: the broker must run as an unprivileged account")
    return pw


def prepare_data(data: Path, pw: pwd.struct_passwd) -> None:
    """Make the market's data folder for a broker running as ``pw`` if it is missing (mode
    0711, owned by it); the broker checks the ownership of an existing one itself."""
    data = Path(data)
    if not data.exists():
        data.mkdir(parents=True, mode=0o711)
        os.chown(data, pw.pw_uid, pw.pw_gid)


def drop_privileges(account: str) -> pwd.struct_passwd:
    """Become ``account`` for good (supplementary groups, gid, uid: real, effective and saved),
    and check that root cannot be regained. RuntimeError if it is root or does not exist."""
    pw = service_account(account)
    os.setgroups(os.getgrouplist(account, pw.pw_gid))
    os.setresgid(pw.pw_gid, pw.pw_gid, pw.pw_gid)
    os.setresuid(pw.pw_uid, pw.pw_uid, pw.pw_uid)
    try:
        os.setuid(0)
    except PermissionError:
        return pw
    raise RuntimeError("dropping privileges failed: root could be regained")


class LauncherExecutor(LocalExecutor):
    """The local executor of a broker whose privileged steps the launcher carries out.

    The broker keeps its records (state files in the jobs' folder, which belongs to it), the
    pidfds that report exits, and reads the jobs' cgroups' state (world-readable); it asks the
    launcher to start, go, freeze, thaw, kill and read. Every job runs as its owner's account
    (multi-user mode) with the launcher's limits; Tycoon's weights and CPU pinning are not
    offered."""

    per_job_limits = False  # every job gets the launcher's limits: the broker takes serial jobs only

    def __init__(self, root: Path, client: LauncherClient):
        self.client = client
        h = client.hello

        def where(x):
            return None if x is None else (x[0], Path(x[1]))

        layout = Layout(h["name"], track=where(h["track"]), cpu=where(h["cpu"]), memory=where(h["memory"]),
                        pids=where(h["pids"]), notes=list(h["notes"]))
        super().__init__(root, containment=layout, limits=JobLimits(**h["limits"]), name=h["name"])

    def start(self, key, command: str, env: dict | None = None, user: RunAs | None = None,
              limits: JobLimits | None = None, affinity=None, weight: float | None = None, frozen: bool = False,
              record_exit: bool = True) -> Proc:
        if limits is not None or affinity or weight is not None:
            raise ValueError("per-job limits, CPU pinning and weights are not offered through the privileged launcher")
        if user is None:
            raise RuntimeError("the privileged launcher starts jobs as their owners' accounts only (multi-user mode)")
        if key in self.launched:
            raise RuntimeError(f"job {key} was already started by this executor: a job never runs twice")
        r = self.client.call("start", key=int(key), user=user.name, command=command, env=dict(env or {}),
                             frozen=frozen, record_exit=record_exit)
        return Proc(key, r["pid"], r["ticks"], self.workdir(key), None, cgroup=JobCgroup.from_paths(r["cgroups"], r["track"]))

    def go(self, proc: Proc) -> None:
        self.client.call("go", key=int(proc.key))

    def _abort(self, proc: Proc) -> None:
        self.client.call("kill", key=int(proc.key), timeout=5.0)
        from marketsched.platform import jobfiles

        jobfiles.remove_state(self.root, proc.key)

    def _cg_freeze(self, cg: JobCgroup, on: bool) -> None:
        self.client.call("freeze" if on else "thaw", key=_key(cg))

    def _cg_kill(self, cg: JobCgroup, timeout: float = 10.0) -> bool:
        return bool(self.client.call("kill", key=_key(cg), timeout=float(timeout))["gone"])

    def _kill_record(self, key, rec: dict) -> bool:
        return bool(self.client.call("kill", key=int(key), timeout=10.0)["killed"])

    def _remove_layout(self) -> None:
        self.client.call("cleanup")

    def set_weight(self, key, weight: float) -> int:
        raise OSError("CPU weights are not offered through the privileged launcher")

    def read_file(self, key, name: str, size: int) -> str:
        return self.client.call("read", key=int(key), name=name, size=int(size))["text"]

    def exit_code(self, key) -> int | None:
        try:
            text = self.read_file(key, "exit_code", 64).strip()
            return int(text) if text else None
        except (OSError, ValueError):
            return None

    def _ended(self, proc: Proc):
        if proc_start_ticks(proc.pid) == proc.start_ticks:
            return False
        code = self.exit_code(proc.key)
        if code is None:  # the wrapper was killed: the launcher, its parent, knows how it ended
            code = self.client.call("status", key=int(proc.key))["code"]
        return code

    def shutdown(self, kill: bool = False) -> None:
        if self.root_fd is None:
            return
        super().shutdown(kill)
        self.client.close()


def _key(cg: JobCgroup) -> int:
    """A job's id from its cgroup's name (``job-ID``)."""
    return int(cg.name.removeprefix("job-"))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
