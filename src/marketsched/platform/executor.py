"""Local executor: each job is a process tree on this machine, in its own cgroups, as its user.

* **Launch.** The job's command is written to ``command.sh`` in its own folder
  (``ROOT/job-ID``, owned by the job's user, mode 0700) and run by a ``/bin/sh`` wrapper that
  records the command's exit status in ``exit_code`` (written to a temporary name, then renamed)
  before it exits, so an exit that happens while the broker is down is still known after a
  restart; stdout and stderr are appended to ``stdout`` and ``stderr`` there. The wrapper is
  started by the **launcher** (:mod:`marketsched.platform.launcher`) in a new session: a root
  ``/bin/sh`` that waits for the go while the broker puts it in the job's cgroups (and pins its
  CPUs) and writes its pid and start time, and the job's cgroups, to its **state file**
  ``ROOT/job-ID.proc`` (:mod:`marketsched.platform.jobfiles`); after the go ``setpriv`` drops to
  the job's Unix account (``user``: groups, gid, uid) and ``env -i`` gives the wrapper a clean
  environment (:func:`job_environment`: ``PATH``, ``HOME``, ``USER``, ``LOGNAME``, ``SHELL``,
  ``LANG`` and the market's variables; never the broker's). So no code of a job runs before it
  is in its cgroups and recorded.
* **Containment** (:mod:`marketsched.platform.cgroups`): every process of the job, including
  children that leave the process group (``setsid``, double fork), is in the job's cgroup.
  **Preempt / resume** freeze and thaw the cgroup; **cancel** kills every process in it; after a
  normal exit whatever the job left behind is killed the same way. CPU time is limited to
  ``limits.cpus`` CPUs, memory to ``limits.memory`` bytes and the number of tasks (processes and
  threads) to ``limits.processes`` per job where a cgroup offers the controller. **Fallback** where no cgroup is writable: process groups, as before cgroups were
  used (SIGSTOP / SIGCONT / SIGKILL to the group), with a loud warning: processes that leave
  the group escape preemption and cancel, and nothing is limited.
* **Exits** are noticed through a pidfd per wrapper process (``os.pidfd_open``; readable when
  the process ends, also for processes that are not our children, i.e. re-attached after a
  restart), polled with a selector. Our own children are reaped with ``waitpid``.
* **Identity** of a process across a broker restart is its pid plus its start time (field 22
  of ``/proc/PID/stat``, clock ticks since boot), so a recycled pid is never mistaken for the
  job. A restarted broker reconciles by job id: :meth:`LocalExecutor.adopt` re-attaches the
  process its state file names if it still runs (else kills what is left in its cgroup), and
  :meth:`LocalExecutor.reap` kills the processes of every state file whose job has ended.
* **Once per executor**: a key is launched at most once by an executor (a second
  :meth:`~LocalExecutor.launch` of the same key raises), so a job whose process has ended can
  never be started again by the same broker.

Exit codes: the command's exit status as the shell reports it (0-255; 128+N when killed by
signal N). When the ``exit_code`` file is missing (the wrapper itself was killed), the code is
``-N`` for signal N if the process was our child, else ``None`` (unknown); the launcher's own
failures are 111 (no go: the broker went away first) and 125 (message on the job's stderr).
"""

from __future__ import annotations

import hashlib
import os
import pwd
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from marketsched.platform import jobfiles
from marketsched.platform.cgroups import JobCgroup, Layout
from marketsched.platform.jobfiles import read_exit_code  # noqa: F401 - the executors' exit-code reader
from marketsched.platform.launcher import launcher_argv

WRAPPER = (
    '/bin/sh ./command.sh; c=$?; echo "$c" > exit_code.tmp && mv exit_code.tmp exit_code; exit "$c"'
)
CLEAN_PATH = "/usr/local/bin:/usr/bin:/bin"


@dataclass(frozen=True)
class RunAs:
    """The Unix account a job runs as."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    home: str

    @classmethod
    def lookup(cls, name: str) -> RunAs:
        """The account ``name`` from the system's user database; ValueError naming the problem
        if there is none, or if it is root (jobs never run as root in a multi-user market)."""
        try:
            pw = pwd.getpwnam(name)
        except KeyError:
            raise ValueError(f"Unix account {name!r} does not exist on this machine") from None
        if pw.pw_uid == 0:
            raise ValueError(f"Unix account {name!r} is root: a market never runs its users' jobs as root")
        return cls(name, pw.pw_uid, pw.pw_gid, tuple(os.getgrouplist(name, pw.pw_gid)), pw.pw_dir)


@dataclass(frozen=True)
class JobLimits:
    """Per-job limits: ``cpus`` CPUs' worth of CPU time, ``memory`` bytes, ``processes`` tasks
    (processes and threads) at once, and ``cpuset`` the CPUs the job may run on (a cgroup
    cpuset: the executor's layout must offer one); None: no limit."""

    cpus: float | None = 1.0
    memory: int | None = None
    processes: int | None = None
    cpuset: tuple[int, ...] | None = None

    def describe(self) -> str:
        """E.g. "1 CPU, 2048 MiB of memory, 512 processes" (what ``serve`` prints)."""
        cpus = "no CPU limit" if self.cpus is None else f"{self.cpus:g} CPU{'' if self.cpus == 1 else 's'}"
        memory = "no memory limit" if self.memory is None else f"{self.memory / 2**20:.0f} MiB of memory"
        procs = "no process limit" if self.processes is None else f"{self.processes} processes"
        return f"{cpus}, {memory}, {procs}"


def job_environment(user: RunAs | None, extra: dict | None = None) -> dict[str, str]:
    """The whole environment of a job of ``user`` (None: the broker's own account): a fixed
    ``PATH``, the account's ``HOME``, ``USER``, ``LOGNAME``, ``SHELL=/bin/sh``, ``LANG=C.UTF-8``,
    plus ``extra`` (the market's variables). Nothing is taken from the broker's environment."""
    if user is None:
        pw = pwd.getpwuid(os.geteuid())
        name, home = pw.pw_name, pw.pw_dir
    else:
        name, home = user.name, user.home
    env = {"PATH": CLEAN_PATH, "HOME": home, "USER": name, "LOGNAME": name, "SHELL": "/bin/sh", "LANG": "C.UTF-8"}
    env.update({str(k): str(v) for k, v in (extra or {}).items()})
    return env


@dataclass
class Proc:
    """A job's process (the wrapper) and cgroups as the executor tracks it."""

    key: int
    pid: int
    start_ticks: int
    workdir: Path
    popen: subprocess.Popen | None = None  # None when re-attached after a restart
    pidfd: int | None = None
    cgroup: JobCgroup | None = None
    extra: dict = field(default_factory=dict)


def proc_start_ticks(pid: int) -> int | None:
    """Start time of process ``pid`` in clock ticks since boot, or None if there is no such
    live process (absent, or a zombie)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    rest = data[data.rindex(b")") + 2:].split()
    if rest[0] in (b"Z", b"X"):
        return None
    return int(rest[19])


def _kill_record(rec: dict) -> bool:
    """Kill what a state file records, if it still runs (pid and start time must match; then
    everything in its cgroups); True if something was killed."""
    killed = False
    pid, ticks = rec.get("pid"), rec.get("ticks")
    if pid is not None and proc_start_ticks(pid) == ticks:
        try:
            if rec.get("cgroups"):
                os.kill(pid, signal.SIGKILL)
            else:
                os.killpg(pid, signal.SIGKILL)
                os.killpg(pid, signal.SIGCONT)
            killed = True
        except ProcessLookupError:
            pass
    if rec.get("cgroups"):
        cg = JobCgroup.from_paths(rec["cgroups"], rec.get("track", "cgroup2"))
        killed = bool(cg.pids()) or killed
        cg.kill()
        if cg.remove():
            for d in cg.dirs():  # the market's folder too, once no job's is left in it
                try:
                    d.parent.rmdir()
                except OSError:
                    pass
    return killed


def market_cgroup_name(root: Path) -> str:
    """The cgroup folder name of the market whose jobs' folder is ``root`` (stable across
    restarts, distinct between markets)."""
    return "marketsched-" + hashlib.sha256(str(Path(root).resolve()).encode()).hexdigest()[:8]


def kill_recorded_jobs(data_dir) -> int:
    """Kill every job recorded under ``data_dir/jobs``, ``data_dir/dayahead``, ``data_dir/dlgm`` and ``data_dir/ees`` that still
    runs (pid and start time both match, so a recycled pid is never hit; with everything in its
    cgroups); returns how many were killed. For cleaning up after a broker that was killed
    (tests, benchmarks)."""
    killed = 0
    for sub in ("jobs", "dayahead", "dlgm", "ees"):
        root = Path(data_dir) / sub
        for key in jobfiles.recorded_keys(root) if root.is_dir() else []:
            rec = jobfiles.read_state(root, key)
            if rec is not None:
                killed += _kill_record(rec)
        if root.is_dir():  # the market's cgroup folders, left by a broker that was killed
            Layout.detect(market_cgroup_name(root)).remove()
    return killed


class WakePipe:
    """A self-pipe that interrupts an executor's ``wait`` from another thread (both executors)."""

    def __init__(self):
        self.r, self.w = os.pipe()
        os.set_blocking(self.r, False)
        os.set_blocking(self.w, False)

    def wake(self) -> None:
        try:
            os.write(self.w, b"x")
        except BlockingIOError:
            pass  # the pipe is full: a wake-up is pending anyway

    def drain(self) -> None:
        try:
            while os.read(self.r, 4096):
                pass
        except BlockingIOError:
            pass

    def close(self) -> None:
        os.close(self.r)
        os.close(self.w)


def warn(msg: str) -> None:
    print(f"WARNING: {msg}", file=sys.stderr, flush=True)


class JobFolders:
    """The jobs' folders of an executor (``ROOT/job-KEY``), as the broker reads them."""

    root: Path

    def workdir(self, key) -> Path:
        return self.root / f"job-{key}"

    def read_file(self, key, name: str, size: int) -> str:
        """The last ``size`` bytes of job ``key``'s file ``name`` (never through a link;
        :func:`marketsched.platform.jobfiles.read_tail`)."""
        return jobfiles.read_tail(self.root, f"job-{key}", name, size)

    def exit_code(self, key) -> int | None:
        """The exit status job ``key``'s wrapper recorded (None if none)."""
        return read_exit_code(self.workdir(key))

    def exit_time(self, key) -> float | None:
        """When job ``key``'s wrapper recorded its exit status, on this machine's wall clock
        (None if it recorded none; :func:`marketsched.platform.jobfiles.read_exit_time`)."""
        return jobfiles.read_exit_time(self.workdir(key))


class LocalExecutor(JobFolders):
    """Runs, freezes, thaws and kills jobs on this machine; reports their exits.

    ``root``: the jobs' folder (owned by the broker, mode 0711); ``containment``: "auto"
    (cgroups where writable, else process groups with a warning), "none" (process groups), or
    a :class:`~marketsched.platform.cgroups.Layout`; ``limits``: default per-job limits; ``name``:
    the market's cgroup folder name (default: derived from ``root``, so it is stable across
    restarts); ``owner``: the uid the jobs' folder must belong to (default: this process's;
    the privileged launcher's is the broker's service account, :mod:`marketsched.platform.launcherd`).

    Everything that needs privileges in a multi-user market (making a job's folder for its
    user, its cgroups, the process; freezing, thawing, killing) goes through :meth:`start`,
    :meth:`go` and the ``_cg_*`` methods, which
    :class:`marketsched.platform.launcherd.LauncherExecutor` sends to the privileged launcher."""

    def __init__(self, root: Path, containment="auto", limits: JobLimits | None = None, name: str | None = None,
                 owner: int | None = None):
        self.root = Path(root)
        self.root_fd: int | None = jobfiles.open_root(self.root, owner=owner)
        self.root = self.root.resolve()
        self.limits = limits or JobLimits()
        self.name = name or market_cgroup_name(self.root)
        if isinstance(containment, Layout):
            self.layout = containment
        elif containment == "none":
            self.layout = Layout(self.name)
        elif containment == "auto":
            self.layout = Layout.detect(self.name)
        else:
            raise ValueError(f"containment must be 'auto', 'none' or a Layout, got {containment!r}")
        self.warning = None
        if self.layout.track is None and containment != "none":
            self.warning = ("no writable cgroup on this machine (" + "; ".join(self.layout.notes) + "): jobs are "
                            "contained by process groups only. A job's processes that leave its process group "
                            "(setsid, double fork) are neither stopped on preemption nor killed on cancel, and CPU, "
                            "memory and the number of processes are not limited. Run the broker as root where cgroups are writable for "
                            "full containment (docs/live_market.md).")
            warn(self.warning)
        elif self.layout.track is not None and self.layout.notes:
            warn("; ".join(self.layout.notes))
        self.procs: dict[int, Proc] = {}
        self.launched: set = set()  # keys launched or re-attached by this executor
        # with keep_usage: each ended job's usage (:meth:`usage`), read before its cgroup goes;
        # dropped by forget (the exchange's measured delivery)
        self.keep_usage = False
        self.ended_usage: dict = {}
        self._graves: list[JobCgroup] = []  # killed jobs' cgroups not yet removable
        self.selector = selectors.DefaultSelector()
        self._waker = WakePipe()
        self.selector.register(self._waker.r, selectors.EVENT_READ, None)

    @property
    def contained(self) -> bool:
        """True when jobs are in cgroups (else process groups)."""
        return self.layout.track is not None

    # ------------------------------------------------------------------ control
    def launch(self, key, command: str, env: dict | None = None, user: RunAs | None = None,
               limits: JobLimits | None = None, affinity=None, weight: float | None = None, frozen: bool = False,
               record_exit: bool = True, before_go: Callable[[], None] | None = None,
               record_go: bool = False) -> Proc:
        """Start job ``key``'s command in its folder as ``user`` (None: the broker's account)
        in its cgroups; returns the tracked process. ``env``: the market's variables (the rest
        of the environment is :func:`job_environment`'s); ``limits``: this job's (default: the
        executor's); ``affinity``: CPUs to pin to; ``weight``: relative CPU weight (Tycoon);
        ``frozen``: start frozen (nothing runs until :meth:`cont`); ``record_exit``: run through
        the exit-code wrapper (Tycoon's CPU-bound loops run directly); ``before_go``: called
        once the job is recorded, just before its go; ``record_go``: once the go is sent, the
        state file says so (``"went": true``), so that after a crash a job that never had its go
        is told from one whose process ended (:meth:`went`). Raises OSError if it
        cannot start (nothing is left running then) and RuntimeError for a second launch of a
        key by this executor."""
        proc = self.start(key, command, env, user, limits, affinity, weight, frozen, record_exit)
        uid = None if user is None else user.uid
        try:
            self.record(proc, uid)
            if before_go is not None:
                before_go()
            self.go(proc)
            if record_go:
                self.record(proc, uid, went=True)
        except BaseException:
            self._abort(proc)
            raise
        self.launched.add(key)
        self._watch(proc)
        return proc

    def start(self, key, command: str, env: dict | None = None, user: RunAs | None = None,
              limits: JobLimits | None = None, affinity=None, weight: float | None = None, frozen: bool = False,
              record_exit: bool = True) -> Proc:
        """The first half of :meth:`launch`: job ``key``'s folder, files and cgroups, and its
        launcher process, in its cgroups (and pinned), waiting for the go; nothing of the job
        runs yet."""
        if key in self.launched:
            raise RuntimeError(f"job {key} was already started by this executor: a job never runs twice")
        if self.root_fd is None:
            raise RuntimeError("this executor has been shut down")
        limits = limits or self.limits
        uid = gid = None
        if user is not None:
            uid, gid = user.uid, user.gid
        name = f"job-{key}"
        dfd = jobfiles.open_jobdir(self.root_fd, name, create=True, uid=uid, gid=gid)
        folder = os.fstat(dfd)
        out = err = None
        cg = None
        try:
            jobfiles.replace_file(dfd, "command.sh", (command + "\n").encode(), uid, gid)
            for stale in ("exit_code", "exit_code.tmp"):
                jobfiles.unlink(dfd, stale)
            out = jobfiles.open_append(dfd, "stdout", uid, gid)
            err = jobfiles.open_append(dfd, "stderr", uid, gid)
            if self.layout.track is not None:
                self.layout.ensure()
                cg = self.layout.job(key)
                cg.create(cpus=limits.cpus, memory=limits.memory, weight=weight, processes=limits.processes,
                          cpuset=None if limits.cpuset is None else list(limits.cpuset))
                if frozen:
                    cg.freeze()
            argv = launcher_argv(["/bin/sh", "-c", WRAPPER if record_exit else command], job_environment(user, env),
                                 uid, gid, user.groups if user is not None else None)
            popen = subprocess.Popen(argv, cwd=self.workdir(key), stdin=subprocess.PIPE, stdout=out, stderr=err,
                                     start_new_session=True, close_fds=True, env={})
        except BaseException:
            if cg is not None:
                cg.remove()
            raise
        finally:
            for fd in (out, err, dfd):
                if fd is not None:
                    os.close(fd)
        ticks = proc_start_ticks(popen.pid)
        ticks = ticks if ticks is not None else -1
        proc = Proc(key, popen.pid, ticks, self.workdir(key), popen, cgroup=cg)
        try:
            # the launcher waits for the go. It entered the folder by its path: the folder must
            # be the one just filled (not another put in its place meanwhile)
            cwd = os.stat(f"/proc/{popen.pid}/cwd")
            if (cwd.st_dev, cwd.st_ino) != (folder.st_dev, folder.st_ino):
                raise jobfiles.JobFileError(f"job folder {name} was replaced while its job was being started")
            # into the job's cgroups and pinned, before anything
            for procs in cg.procs_files() if cg is not None else []:
                with open(procs, "w") as f:
                    f.write(str(popen.pid))
            if affinity:
                os.sched_setaffinity(popen.pid, sorted(affinity))
            if frozen and cg is None:
                os.killpg(popen.pid, signal.SIGSTOP)
        except BaseException:
            self._abort(proc)
            raise
        return proc

    def record(self, proc: Proc, uid: int | None, went: bool = False) -> None:
        """Write job ``proc.key``'s state file: its process (pid, start time) and cgroups, before
        the go (so a crash leaves a record of anything that may run); ``went``: the go has been
        sent (see :meth:`launch`)."""
        cg = proc.cgroup
        rec = {"pid": proc.pid, "ticks": proc.start_ticks, "uid": uid,
               "cgroups": [str(d) for d in cg.dirs()] if cg else [], "track": cg.track_kind if cg else None}
        if went:
            rec["went"] = True
        jobfiles.write_state(self.root, proc.key, rec)

    def went(self, key) -> bool:
        """True if job ``key``'s state file says its go was sent (a launch with ``record_go``)."""
        rec = jobfiles.read_state(self.root, key)
        return bool(rec and rec.get("went"))

    def go(self, proc: Proc) -> None:
        """Let a started job's launcher run the job's command (the second half of :meth:`launch`)."""
        assert proc.popen is not None and proc.popen.stdin is not None  # stdin=PIPE
        try:
            proc.popen.stdin.write(b"go\n")
            proc.popen.stdin.close()
        except BrokenPipeError:
            pass  # the launcher died already: its exit is reported like any other

    def _abort(self, proc: Proc) -> None:
        """Undo a start that has not had its go: nothing of the job ran."""
        if proc.popen is not None:
            proc.popen.kill()
            proc.popen.wait()
        if proc.cgroup is not None:
            self._bury(proc.cgroup)
        jobfiles.remove_state(self.root, proc.key)

    def adopt(self, key, pid: int | None = None, start_ticks: int | None = None, workdir: Path | None = None):
        """Re-attach job ``key``'s process after a broker restart: the one its state file
        records (else ``pid`` / ``start_ticks`` from the database), if it still runs (pid and
        start time match); else None, after killing whatever is left in its cgroups (an ended
        job leaves nothing running)."""
        rec = jobfiles.read_state(self.root, key)
        cg = None
        if rec is not None:
            pid, start_ticks = rec.get("pid"), rec.get("ticks")
            if rec.get("cgroups"):
                cg = JobCgroup.from_paths(rec["cgroups"], rec.get("track") or "cgroup2")
        if pid is None or start_ticks is None or proc_start_ticks(pid) != start_ticks:
            if cg is not None:
                self._cg_kill(cg)
            return None
        proc = Proc(key, pid, start_ticks, Path(workdir) if workdir else self.workdir(key), None, cgroup=cg)
        self._watch(proc)
        if proc_start_ticks(pid) != start_ticks:  # ended between the check and the pidfd
            self._unwatch(proc)
            if cg is not None:
                self._cg_kill(cg)
            return None
        self.launched.add(key)
        return proc

    def recorded(self, key) -> tuple[int, int] | None:
        """``(pid, start ticks)`` from job ``key``'s state file, or None."""
        rec = jobfiles.read_state(self.root, key)
        if rec is None or rec.get("pid") is None or rec.get("ticks") is None:
            return None
        return int(rec["pid"]), int(rec["ticks"])

    def reap(self, keep) -> int:
        """Kill the processes of every state file whose job is not in ``keep`` (ended jobs:
        e.g. a cancel committed just before a crash) and remove those files; returns how many
        still ran. A restarted broker calls this once it knows its active jobs."""
        keep = {str(k) for k in keep}
        killed = 0
        for key in jobfiles.recorded_keys(self.root):
            if key in keep:
                continue
            rec = jobfiles.read_state(self.root, key)
            if rec is not None:
                killed += self._kill_record(key, rec)
            jobfiles.remove_state(self.root, key)
        return killed

    def _kill_record(self, key, rec: dict) -> bool:
        """Kill what job ``key``'s state file ``rec`` records, if it still runs."""
        return _kill_record(rec)

    def forget(self, key) -> None:
        """Drop job ``key``'s state file (the broker has recorded its end)."""
        self.ended_usage.pop(key, None)
        jobfiles.remove_state(self.root, key)

    def _watch(self, proc: Proc) -> None:
        self.procs[proc.key] = proc
        try:
            proc.pidfd = os.pidfd_open(proc.pid)
            self.selector.register(proc.pidfd, selectors.EVENT_READ, proc.key)
        except (OSError, AttributeError):  # no pidfd support: the periodic scan finds the exit
            proc.pidfd = None
        self.wake()

    def _unwatch(self, proc: Proc) -> None:
        self.procs.pop(proc.key, None)
        if proc.pidfd is not None:
            try:
                self.selector.unregister(proc.pidfd)
            except (KeyError, ValueError):
                pass
            os.close(proc.pidfd)
            proc.pidfd = None

    def _signal_group(self, proc: Proc, sig: int) -> bool:
        try:
            os.killpg(proc.pid, sig)
            return True
        except (ProcessLookupError, PermissionError):
            return False

    def stop(self, key) -> bool:
        """Suspend job ``key``: freeze its cgroup (fallback: SIGSTOP to its process group)."""
        proc = self.procs.get(key)
        if proc is None:
            return False
        if proc.cgroup is not None:
            self._cg_freeze(proc.cgroup, True)
            return True
        return self._signal_group(proc, signal.SIGSTOP)

    def cont(self, key) -> bool:
        """Resume job ``key``: thaw its cgroup (fallback: SIGCONT to its process group)."""
        proc = self.procs.get(key)
        if proc is None:
            return False
        if proc.cgroup is not None:
            self._cg_freeze(proc.cgroup, False)
            return True
        return self._signal_group(proc, signal.SIGCONT)

    def frozen(self, key) -> bool:
        """True once every process of job ``key`` is frozen (cgroups only)."""
        proc = self.procs.get(key)
        return proc is not None and proc.cgroup is not None and proc.cgroup.frozen()

    def set_weight(self, key, weight: float) -> int:
        """Job ``key``'s relative CPU weight in (0, 1]; returns the cgroup value written."""
        cg = self.procs[key].cgroup
        if cg is None:
            raise OSError(f"job {key} has no cgroup: no CPU weight")
        return cg.set_weight(weight)

    def set_cpus(self, key, cpus: float | None) -> float | None:
        """Job ``key``'s CPU limit (CPUs' worth of time per period, None: none); returns it as written."""
        cg = self.procs[key].cgroup
        if cg is None:
            raise OSError(f"job {key} has no cgroup: no CPU limit")
        return cg.set_cpus(cpus)

    def set_affinity(self, key, cpus) -> None:
        """Pin every thread of job ``key``'s processes (its cgroup's, else its process's) to ``cpus``;
        a thread that has ended meanwhile is skipped."""
        proc = self.procs[key]
        pids = proc.cgroup.pids() if proc.cgroup is not None else []
        for pid in pids or [proc.pid]:
            try:
                tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
            except OSError:
                continue
            for tid in tids:
                try:
                    os.sched_setaffinity(tid, sorted(cpus))
                except ProcessLookupError:
                    pass

    def cpu_seconds(self, key) -> float:
        """CPU time job ``key`` has used (its cgroup's; fallback: the wrapper process's)."""
        proc = self.procs.get(key)
        if proc is None:
            return 0.0
        if proc.cgroup is not None:
            s = proc.cgroup.cpu_seconds()
            if s:
                return s
        return proc_cpu_seconds(proc.pid)

    def usage(self, key) -> dict:
        """What job ``key`` has used and been given so far: ``cpu_seconds``, ``peak_memory``
        (bytes; None if unknown) and ``limits`` (its cgroups' limits as the kernel reports them,
        :meth:`~marketsched.platform.cgroups.JobCgroup.limits`; None without cgroups). After the
        job ended: what was read at its end (with ``keep_usage``)."""
        if key in self.ended_usage:
            return self.ended_usage[key]
        proc = self.procs.get(key)
        cg = proc.cgroup if proc is not None else None
        return {"cpu_seconds": self.cpu_seconds(key), "peak_memory": cg.peak_memory() if cg else None,
                "limits": cg.limits() if cg else None}

    def kill(self, key) -> None:
        """Kill every process of job ``key`` and forget it (cancel)."""
        proc = self.procs.get(key)
        if proc is None:
            return
        self._kill_proc(proc)
        self._unwatch(proc)

    def _kill_proc(self, proc: Proc) -> None:
        if proc.cgroup is not None:
            self._bury(proc.cgroup)  # every process of the job (the wrapper is one of them)
            if proc.popen is not None:
                proc.popen.wait()
        else:
            self._signal_group(proc, signal.SIGKILL)
            self._signal_group(proc, signal.SIGCONT)
            if proc.popen is not None:
                proc.popen.wait()

    def _bury(self, cg: JobCgroup, timeout: float = 5.0) -> None:
        if not self._cg_kill(cg, timeout):
            self._graves.append(cg)

    # the privileged cgroup actions (the launcher executor sends them to the launcher)
    def _cg_freeze(self, cg: JobCgroup, on: bool) -> None:
        """Freeze (``on``) or thaw a job's cgroup."""
        if on:
            cg.freeze()
        else:
            cg.thaw()

    def _cg_kill(self, cg: JobCgroup, timeout: float = 10.0) -> bool:
        """Kill every process in a job's cgroups (waiting at most ``timeout`` s) and remove
        them; True once they are gone."""
        cg.kill(timeout)
        return cg.remove()

    def _remove_layout(self) -> None:
        """Remove the market's cgroup folders once no job's is left in them."""
        self.layout.remove()

    def wake(self) -> None:
        """Interrupt a :meth:`wait` in progress (another thread changed something)."""
        self._waker.wake()

    # ------------------------------------------------------------------ exits
    def wait(self, timeout: float | None) -> None:
        """Block until a watched process may have ended, :meth:`wake` is called, or ``timeout``."""
        for sel_key, _ in self.selector.select(timeout):
            if sel_key.data is None:
                self._waker.drain()

    def exits(self) -> list[tuple[int, int | None]]:
        """Jobs whose processes have ended since the last call, all found in one scan:
        ``(key, exit_code)``. Whatever a job left behind (in its cgroup, or its process group)
        is killed."""
        out = []
        for key, proc in list(self.procs.items()):
            code = self._ended(proc)
            if code is not False:
                if self.keep_usage:
                    self.ended_usage[key] = self.usage(key)
                if proc.cgroup is not None:
                    self._bury(proc.cgroup, timeout=2.0)
                else:
                    self._signal_group(proc, signal.SIGKILL)
                self._unwatch(proc)
                out.append((key, code))
        if self._graves:
            self._graves = [cg for cg in self._graves if not self._cg_kill(cg, 0.0)]
        return out

    def _ended(self, proc: Proc):
        """False while running or stopped; else the exit code (or None if unknown)."""
        if proc.popen is not None:
            rc = proc.popen.poll()
            if rc is None:
                return False
            code = read_exit_code(proc.workdir)
            return code if code is not None else rc
        if proc_start_ticks(proc.pid) == proc.start_ticks:
            return False
        return read_exit_code(proc.workdir)

    def shutdown(self, kill: bool = False) -> None:
        """Stop watching (and with ``kill``, kill every job and remove its cgroups); processes
        otherwise keep running, as after a crash, and a new broker re-attaches them. A second
        call does nothing."""
        if self.root_fd is None:
            return
        for key in list(self.procs):
            if kill:
                self.kill(key)
            else:
                self._unwatch(self.procs[key])
        deadline = time.monotonic() + 5
        while self._graves and time.monotonic() < deadline:
            self._graves = [cg for cg in self._graves if not self._cg_kill(cg, 0.5)]
        self._remove_layout()
        self.selector.close()
        self._waker.close()
        os.close(self.root_fd)
        self.root_fd = None


def proc_cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (s), 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            rest = f.read().rsplit(b")", 1)[1].split()
        return (int(rest[11]) + int(rest[12])) / CLK_TCK
    except (OSError, IndexError, ValueError):
        return 0.0


CLK_TCK = os.sysconf("SC_CLK_TCK")
