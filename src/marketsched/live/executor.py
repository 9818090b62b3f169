"""Local executor: each job is a process group on this machine.

* **Launch**: the job's command is written to ``command.sh`` in its own working folder and run
  by a small ``/bin/sh`` wrapper in a new session (``start_new_session=True``: its own process
  group, whose id is the wrapper's pid), with stdout and stderr appended to ``stdout`` and
  ``stderr`` in that folder. The wrapper records the command's exit status in the file
  ``exit_code`` (written to a temporary name, then renamed) before it exits, so an exit that
  happens while the broker is down is still known after a restart.
* **Preempt / resume**: ``SIGSTOP`` / ``SIGCONT`` to the whole group (the wrapper and
  everything the command started).
* **Cancel**: ``SIGKILL`` to the group (plus ``SIGCONT`` so a stopped group dies at once).
  After a normal exit the group is killed too, so nothing a job left behind keeps running.
* **Exits** are noticed through a pidfd per process (``os.pidfd_open``; readable when the
  process ends, also for processes that are not our children, i.e. re-attached after a
  restart), polled with a selector; a fallback scan every ``poll`` seconds catches anything
  else. Our own children are reaped with ``waitpid``.
* **Identity** of a process across a broker restart is its pid plus its start time (field 22
  of ``/proc/PID/stat``, clock ticks since boot), so a recycled pid is never mistaken for the
  job.

Exit codes: the command's exit status as the shell reports it (0-255; 128+N when killed by
signal N). When the ``exit_code`` file is missing (the wrapper itself was killed), the code is
``-N`` for signal N if the process was our child, else ``None`` (unknown).
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

WRAPPER = (
    '/bin/sh ./command.sh; c=$?; echo "$c" > exit_code.tmp && mv exit_code.tmp exit_code; exit "$c"'
)


@dataclass
class Proc:
    """A job's process group as the executor tracks it."""

    key: int  # the broker's job id
    pid: int
    start_ticks: int
    workdir: Path
    popen: subprocess.Popen | None = None  # None when re-attached after a restart
    pidfd: int | None = None


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


def kill_recorded_jobs(data_dir) -> int:
    """Kill every job process group recorded under ``data_dir/jobs`` that still runs (pid and
    start time both match, so a recycled pid is never hit); returns how many were killed. For
    cleaning up after a broker that was killed (tests, benchmarks)."""
    killed = 0
    for proc in (Path(data_dir) / "jobs").glob("job-*/proc"):
        pid, ticks = map(int, proc.read_text().split())
        if proc_start_ticks(pid) == ticks:
            try:
                os.killpg(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
    return killed


def read_exit_code(workdir: Path) -> int | None:
    try:
        return int((Path(workdir) / "exit_code").read_text().strip())
    except (OSError, ValueError):
        return None


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


class LocalExecutor:
    """Runs, stops, continues and kills jobs' process groups; reports their exits."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.procs: dict[int, Proc] = {}
        self.selector = selectors.DefaultSelector()
        self._waker = WakePipe()
        self.selector.register(self._waker.r, selectors.EVENT_READ, None)

    # ------------------------------------------------------------------ control
    def workdir(self, key: int) -> Path:
        return self.root / f"job-{key}"

    def launch(self, key: int, command: str, env: dict | None = None) -> Proc:
        """Start job ``key``'s command in its folder; returns the tracked process."""
        wd = self.workdir(key)
        wd.mkdir(parents=True, exist_ok=True)
        (wd / "command.sh").write_text(command + "\n")
        for stale in ("exit_code", "exit_code.tmp"):
            (wd / stale).unlink(missing_ok=True)
        with open(wd / "stdout", "ab") as out, open(wd / "stderr", "ab") as err:
            popen = subprocess.Popen(
                ["/bin/sh", "-c", WRAPPER],
                cwd=wd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
                close_fds=True,
                env={**os.environ, **(env or {})},
            )
        ticks = proc_start_ticks(popen.pid)
        ticks = ticks if ticks is not None else -1
        # identity for a broker that restarts before its database recorded this launch
        (wd / "proc.tmp").write_text(f"{popen.pid} {ticks}\n")
        os.replace(wd / "proc.tmp", wd / "proc")
        proc = Proc(key, popen.pid, ticks, wd, popen)
        self._watch(proc)
        return proc

    def adopt(self, key: int, pid: int, start_ticks: int, workdir: Path) -> Proc | None:
        """Re-attach a job's process that survived a broker restart, if it is still the same
        process (pid and start time match) and alive; else None."""
        if pid is None or start_ticks is None or proc_start_ticks(pid) != start_ticks:
            return None
        proc = Proc(key, pid, start_ticks, Path(workdir), None)
        self._watch(proc)
        if proc_start_ticks(pid) != start_ticks:  # ended between the check and the pidfd
            self._unwatch(proc)
            return None
        return proc

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

    def _signal(self, key: int, sig: int) -> bool:
        proc = self.procs.get(key)
        if proc is None:
            return False
        try:
            os.killpg(proc.pid, sig)
            return True
        except ProcessLookupError:
            return False

    def stop(self, key: int) -> bool:
        """Suspend job ``key``'s process group (SIGSTOP)."""
        return self._signal(key, signal.SIGSTOP)

    def cont(self, key: int) -> bool:
        """Resume job ``key``'s process group (SIGCONT)."""
        return self._signal(key, signal.SIGCONT)

    def kill(self, key: int) -> None:
        """Kill job ``key``'s process group and forget it (cancel)."""
        proc = self.procs.get(key)
        if proc is None:
            return
        self._signal(key, signal.SIGKILL)
        self._signal(key, signal.SIGCONT)
        if proc.popen is not None:
            proc.popen.wait()
        self._unwatch(proc)

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
        """Jobs whose processes have ended since the last call: ``(key, exit_code)``."""
        out = []
        for key, proc in list(self.procs.items()):
            code = self._ended(proc)
            if code is not False:
                try:  # whatever the job left behind in its group goes too
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                self._unwatch(proc)
                out.append((key, code))
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
        """Stop watching (and with ``kill``, kill every job's group); processes otherwise keep
        running, as after a crash, and a new broker re-attaches them."""
        for key in list(self.procs):
            if kill:
                self.kill(key)
            else:
                self._unwatch(self.procs[key])
        self.selector.close()
        self._waker.close()
