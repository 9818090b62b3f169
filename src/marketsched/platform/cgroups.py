"""Control groups for the live market's jobs: which cgroups this machine offers, and one job's.

One implementation for every mode that runs processes on this machine: the spot market's local
executor, the day-ahead service's local reservations and Tycoon mode all start their jobs
through :class:`marketsched.platform.executor.LocalExecutor`, which puts each job in the cgroups
described here.

What a job's cgroups do
-----------------------
* **Tracking, freezing, killing** (the *track* cgroup): every process a job starts, including
  children that leave the process group with ``setsid`` or a double fork, stays in the job's
  cgroup (only root can move a process out). Preemption freezes the cgroup (cgroup v2
  ``cgroup.freeze``, or the v1 ``freezer`` controller's ``freezer.state``), resumption thaws it,
  and cancel kills every process in it (``cgroup.kill`` on v2; elsewhere: freeze, SIGKILL every
  pid in ``cgroup.procs``, thaw, until it is empty). v2 is used where a writable cgroup2 mount
  lets us create a child with ``cgroup.freeze``; else a writable v1 ``freezer`` hierarchy.
* **CPU limit** (``cpu.max`` on v2, ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` on v1) and
  **memory limit** (``memory.max`` on v2, ``memory.limit_in_bytes`` on v1), each from the first
  hierarchy that offers the controller: the cgroup2 tree when the controller is enabled there,
  else the v1 hierarchy holding it. On a *hybrid* machine (this project's CI: a cgroup2
  ``unified`` tree without controllers next to v1 ``cpu``, ``memory``, ``pids`` and ``freezer``)
  the job is tracked and frozen in the v2 tree and limited in the v1 ``cpu``, ``memory`` and
  ``pids`` trees; the launcher joins all of them before the job's command runs.
* **Process-count limit** (``pids.max``, the ``pids`` controller, same file name on v2 and v1):
  at most that many tasks (processes and threads) in the job at once; a ``fork`` or ``clone``
  beyond it fails with ``EAGAIN`` inside the job, so a fork bomb stays within its cgroup.
* **CPU weight** (``cpu.weight`` on v2, ``cpu.shares`` on v1): Tycoon mode's proportional
  shares (:mod:`marketsched.live.tycoon`).
* **CPU set** (``cpuset.cpus``, the ``cpuset`` controller; only where a layout asks for it:
  the exchange's contract jobs, :mod:`marketsched.exchange.providers`): the CPUs the job's
  processes may run on. Unlike ``sched_setaffinity``, which any process may widen again for
  itself, a process cannot leave its cpuset: an affinity it asks for is cut to the set. On v1
  a new cpuset folder starts with no CPUs and no memory nodes, so the market's folder copies
  its parent's (``cpuset.cpus``, ``cpuset.mems``) and a job's folder gets its CPUs and its
  parent's memory nodes before any process joins it.

Where they are
--------------
A market's cgroups are ``BASE/marketsched-NAME/job-KEY`` in each hierarchy used. ``BASE`` is the
broker's own cgroup in that hierarchy (``/proc/self/cgroup``), so a limit a service manager puts
on the broker (systemd with ``Delegate=yes``) also covers its jobs; on cgroup v2, when a
controller cannot be enabled below the broker's own cgroup (the no-internal-processes rule: a
cgroup holding processes cannot hand controllers to children, except the root), ``BASE`` is the
mount's root, as for Tycoon mode. ``NAME`` is stable for a market (derived from its folder), so
a restarted broker finds its jobs' cgroups; each job's cgroup paths are also recorded in the
broker's state file for the job (see the executor).

Where no cgroup is writable (no root, a container without delegation), :meth:`Layout.detect`
returns a layout with no tracking, and the executor falls back to process groups with a loud
warning (a weaker guarantee, documented in ``docs/live_market.md``).
"""

from __future__ import annotations

import errno
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

PERIOD_US = 100_000  # CFS period for CPU limits (the kernel's default)
V2_WEIGHT_MAX, V1_SHARES_MAX, V1_SHARES_MIN = 10000, 262144, 2


def parse_cpu_list(text: str) -> list[int]:
    """CPU numbers from the kernel's list format ("0-2,5" -> [0, 1, 2, 5])."""
    out: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


# ---------------------------------------------------------------------------- discovery
def _mounts() -> list[list[str]]:
    """Fields of each line of /proc/mounts (device, path, type, options, ...); [] if unreadable."""
    try:
        return [line.split() for line in Path("/proc/mounts").read_text().splitlines()]
    except OSError:
        return []


def find_cgroup2() -> Path | None:
    """A writable cgroup2 mount (whatever its controllers), or None."""
    for parts in _mounts():
        if len(parts) >= 3 and parts[2] == "cgroup2":
            root = Path(parts[1])
            if (root / "cgroup.procs").exists() and os.access(root, os.W_OK):
                return root
    return None


def find_cgroup1(controller: str) -> Path | None:
    """The writable cgroup v1 hierarchy holding ``controller`` (e.g. "cpu", "memory",
    "freezer"), or None."""
    for parts in _mounts():
        if len(parts) >= 4 and parts[2] == "cgroup" and controller in parts[3].split(","):
            root = Path(parts[1])
            if os.access(root, os.W_OK):
                return root
    return None


def find_cgroup2_cpu() -> Path | None:
    """A writable cgroup2 mount offering the cpu controller, or None."""
    root = find_cgroup2()
    if root is not None and "cpu" in _read_words(root / "cgroup.controllers"):
        return root
    return None


def find_cgroup1_cpu() -> Path | None:
    """The writable cgroup v1 hierarchy holding the cpu controller (with ``cpu.shares``), or None."""
    root = find_cgroup1("cpu")
    return root if root is not None and (root / "cpu.shares").exists() else None


def detect_enforcement() -> str:
    """Tycoon mode's CPU-share enforcement: "cgroup2" (cpu.weight), "cgroup1" (cpu.shares) or
    "stride" (no writable cpu cgroup: user-space stride scheduling), tried in that order; a
    cgroup counts only if a child can really be created in it and given the controller."""
    for kind in ("cgroup2", "cgroup1"):
        try:
            if _controller_base(kind, "cpu", f"marketsched-probe-{os.getpid()}", probe=True) is not None:
                return kind
        except OSError:
            continue
    return "stride"


def own_cgroup(kind: str, controller: str | None = None) -> str:
    """This process's cgroup path in the v2 tree (``kind`` "cgroup2") or in the v1 hierarchy
    holding ``controller``; "/" if /proc/self/cgroup does not say."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return "/"
    for line in lines:
        _, ctrls, path = line.split(":", 2)
        if kind == "cgroup2" and ctrls == "":
            return path or "/"
        if kind == "cgroup1" and controller in ctrls.split(","):
            return path or "/"
    return "/"


def _read_words(path: Path) -> list[str]:
    try:
        return path.read_text().split()
    except OSError:
        return []


def _under(root: Path, rel: str) -> Path:
    """``root`` joined with a cgroup path from /proc/self/cgroup (which starts with '/')."""
    rel = rel.strip("/")
    return root / rel if rel and not rel.startswith("..") else root


def _enable(base: Path, controller: str) -> bool:
    """Enable ``controller`` for the children of v2 cgroup ``base``; False if it cannot be."""
    if controller in _read_words(base / "cgroup.subtree_control"):
        return True
    if controller not in _read_words(base / "cgroup.controllers"):
        return False
    try:
        (base / "cgroup.subtree_control").write_text(f"+{controller}")
        return True
    except OSError:
        return False


def _controller_base(kind: str, controller: str | None, name: str, probe: bool = False) -> Path | None:
    """The market's folder ``BASE/name`` for ``controller`` in hierarchy ``kind`` (created; see
    the module docstring for BASE), or None when that hierarchy cannot give the controller.
    With ``probe`` the folder is removed again (detection only)."""
    if kind == "cgroup2":
        mount = find_cgroup2()
        if mount is None:
            return None
        candidates = [_under(mount, own_cgroup("cgroup2"))]
        if candidates[0] != mount:
            candidates.append(mount)
        for base in candidates:
            if controller is not None and not _enable(base, controller):
                continue
            made = _make_market_dir(base / name, controller if controller else None)
            if made is not None:
                if probe:
                    _rmdir(made)
                return made
        return None
    if controller is None:
        raise ValueError("a cgroup v1 hierarchy is found by its controller")
    mount = find_cgroup1(controller)
    if mount is None:
        return None
    base = _under(mount, own_cgroup("cgroup1", controller))
    made = _make_market_dir(base / name, None)
    if made is not None and probe:
        _rmdir(made)
    return made


def _make_market_dir(path: Path, v2_controller: str | None) -> Path | None:
    existed = path.is_dir()
    try:
        path.mkdir(exist_ok=True)
        if v2_controller is not None and not _enable(path, v2_controller):
            raise OSError(errno.EPERM, f"cannot enable {v2_controller} in {path}")
        _inherit_cpuset(path)
    except OSError:
        if not existed:
            _rmdir(path)
        return None
    return path


def _inherit_cpuset(path: Path) -> None:
    """A v1 cpuset folder starts with no CPUs and no memory nodes (nothing could join it):
    give it its parent's. Nothing to do elsewhere (v2 folders inherit; other controllers)."""
    for name in ("cpuset.cpus", "cpuset.mems"):
        f = path / name
        if f.exists() and not f.read_text().strip() and (path.parent / name).exists():
            f.write_text(_read_words(path.parent / name)[0] if _read_words(path.parent / name) else "")


def _rmdir(path: Path) -> bool:
    try:
        path.rmdir()
        return True
    except FileNotFoundError:
        return True
    except OSError:
        return False


# ---------------------------------------------------------------------------- a market's layout
@dataclass
class Layout:
    """Which cgroup folders a market's jobs go in (each ``None`` when not available).

    ``track``: (kind, folder) of the hierarchy that tracks, freezes and kills (v2 or the v1
    freezer); ``cpu`` / ``memory`` / ``pids`` / ``cpuset``: (kind, folder) of the hierarchies
    that limit (or weigh) CPU, memory, the number of processes and which CPUs (``cpuset``: only
    when asked for). The folders are the market's ``BASE/marketsched-NAME`` (module docstring).
    """

    name: str
    track: tuple[str, Path] | None = None
    cpu: tuple[str, Path] | None = None
    memory: tuple[str, Path] | None = None
    pids: tuple[str, Path] | None = None
    cpuset: tuple[str, Path] | None = None
    notes: list[str] = field(default_factory=list)

    LIMITED = ("cpu", "memory", "pids", "cpuset")  # the controllers a job's limits use

    @classmethod
    def detect(cls, name: str, cpu: str | None = "auto", memory: str | None = "auto",
               track: str = "auto", pids: str | None = "auto", cpuset: str | None = None) -> Layout:
        """The best layout this machine gives: ``track`` "auto" (v2, else v1 freezer), "cgroup2",
        "cgroup1" or "none"; ``cpu``, ``memory``, ``pids`` and ``cpuset``: "auto" (v2 if the
        controller is there, else v1), "cgroup2", "cgroup1", or None (not wanted; the default for
        ``cpuset``)."""
        out = cls(name)
        kinds = ("cgroup2", "cgroup1") if track == "auto" else () if track == "none" else (track,)
        for kind in kinds:
            try:
                if kind == "cgroup2":
                    d = _controller_base("cgroup2", None, name)
                    if d is not None and _v2_freezable(d):
                        out.track = ("cgroup2", d)
                        break
                    if d is not None:
                        _rmdir(d)
                else:
                    d = _controller_base("cgroup1", "freezer", name)
                    if d is not None:
                        out.track = ("cgroup1", d)
                        break
            except OSError:
                continue
        if out.track is None:
            out.notes.append("no writable cgroup (v2, or v1 freezer) for tracking jobs")
            return out
        for ctrl, want in (("cpu", cpu), ("memory", memory), ("pids", pids), ("cpuset", cpuset)):
            if want is None:
                continue
            got = None
            for kind in (("cgroup2", "cgroup1") if want == "auto" else (want,)):
                try:
                    d = _controller_base(kind, ctrl, name)
                except OSError:
                    d = None
                if d is not None:
                    got = (kind, d)
                    break
            if got is None:
                what = {"pids": "the number of processes", "cpuset": "the CPUs a job runs on"}.get(ctrl, ctrl)
                out.notes.append(f"no writable cgroup offers the {ctrl} controller: {what} is not limited")
            setattr(out, ctrl, got)
        out.remove()  # made again by ensure() when the first job starts
        return out

    def ensure(self) -> None:
        """Make the market's folders (again) with the controllers they need; OSError if the
        machine no longer allows it."""
        for role, x in (("track", self.track), *((c, getattr(self, c)) for c in self.LIMITED)):
            if x is None:
                continue
            kind, d = x
            ctrl = role if kind == "cgroup2" and role != "track" else None
            if _make_market_dir(d, ctrl) is None:
                raise OSError(errno.EACCES, f"cannot make the market's cgroup {d}")

    def dirs(self) -> list[Path]:
        """The market's folders (distinct), tracking first."""
        out: list[Path] = []
        for x in (self.track, *(getattr(self, c) for c in self.LIMITED)):
            if x is not None and x[1] not in out:
                out.append(x[1])
        return out

    def job(self, key) -> JobCgroup:
        return JobCgroup(self, f"job-{key}")

    def remove(self) -> None:
        """Remove the market's folders if no job cgroup is left in them."""
        for d in self.dirs():
            _rmdir(d)

    def describe(self) -> str:
        if self.track is None:
            return "none (process groups)"
        parts = [f"{self.track[0]} {'freeze' if self.track[0] == 'cgroup2' else 'freezer'} in {self.track[1]}"]
        for ctrl in self.LIMITED:
            x = getattr(self, ctrl)
            what = {"pids": "processes", "cpuset": "CPU set"}.get(ctrl, ctrl)
            parts.append(f"{what}: {x[0]} in {x[1]}" if x else f"{what}: not limited")
        return "; ".join(parts)


def _v2_freezable(market_dir: Path) -> bool:
    probe = market_dir / f"probe-{os.getpid()}"
    try:
        probe.mkdir()
    except FileExistsError:
        pass
    except OSError:
        return False
    ok = (probe / "cgroup.freeze").exists()
    _rmdir(probe)
    return ok


# ---------------------------------------------------------------------------- one job
class JobCgroup:
    """One job's cgroups: a folder ``job-KEY`` under each of the layout's market folders."""

    def __init__(self, layout: Layout, name: str):
        if layout.track is None:
            raise ValueError("a job cgroup needs a layout that tracks jobs")
        self.layout: Layout | None = layout
        self.name = name
        self.track_kind, base = layout.track
        self.track = base / name
        self.cpu: tuple[str, Path] | None = None if layout.cpu is None else (layout.cpu[0], layout.cpu[1] / name)
        self.memory: tuple[str, Path] | None = (None if layout.memory is None
                                                 else (layout.memory[0], layout.memory[1] / name))
        self.pids_limit: tuple[str, Path] | None = (None if layout.pids is None
                                                     else (layout.pids[0], layout.pids[1] / name))
        self.cpuset: tuple[str, Path] | None = (None if layout.cpuset is None
                                                 else (layout.cpuset[0], layout.cpuset[1] / name))
        self._extra: list[Path] = []  # folders known only by path (after a restart)

    @classmethod
    def from_paths(cls, paths: list[str], track_kind: str) -> JobCgroup:
        """A job's cgroups from the folders recorded in its state file (after a restart)."""
        self = cls.__new__(cls)
        self.layout = None
        self.track_kind = track_kind
        self.track = Path(paths[0])
        self.name = self.track.name
        self.cpu = self.memory = self.pids_limit = self.cpuset = None
        self._extra = [Path(p) for p in paths[1:]]
        return self

    def dirs(self) -> list[Path]:
        out = [self.track]
        for x in (self.cpu, self.memory, self.pids_limit, self.cpuset):
            if x is not None and x[1] not in out:
                out.append(x[1])
        for p in self._extra:
            if p not in out:
                out.append(p)
        return out

    def procs_files(self) -> list[str]:
        """The ``cgroup.procs`` files a process writes its pid to, to join every cgroup of the job."""
        return [str(d / "cgroup.procs") for d in self.dirs()]

    # ------------------------------------------------------------------ set up
    def create(self, cpus: float | None = None, memory: int | None = None, weight: float | None = None,
               processes: int | None = None, cpuset: list[int] | None = None) -> None:
        """Make the folders (an empty leftover of an earlier attempt is reused) and set the
        limits: ``cpus`` CPUs' worth of time per period, ``memory`` bytes, at most ``processes``
        tasks, a relative CPU ``weight`` in (0, 1] (1 = the largest), and the CPUs ``cpuset``
        (numbers; the layout must have a cpuset controller, else OSError); None: no limit."""
        for d in self.dirs():
            d.mkdir(exist_ok=True)
        if self.pids():
            raise OSError(errno.EBUSY, f"cgroup {self.track} still holds processes of an earlier run")
        if self.cpu is not None:
            kind, d = self.cpu
            if kind == "cgroup2":
                (d / "cpu.max").write_text("max" if cpus is None else f"{max(1000, round(cpus * PERIOD_US))} {PERIOD_US}")
            else:
                (d / "cpu.cfs_period_us").write_text(str(PERIOD_US))
                (d / "cpu.cfs_quota_us").write_text("-1" if cpus is None else str(max(1000, round(cpus * PERIOD_US))))
            if weight is not None:
                self.set_weight(weight)
        if self.memory is not None:
            kind, d = self.memory
            if kind == "cgroup2":
                (d / "memory.max").write_text("max" if memory is None else str(int(memory)))
            else:
                (d / "memory.limit_in_bytes").write_text("-1" if memory is None else str(int(memory)))
        if self.pids_limit is not None:  # pids.max on v2 and v1 alike
            (self.pids_limit[1] / "pids.max").write_text("max" if processes is None else str(int(processes)))
        if cpuset is not None:
            if self.cpuset is None:
                raise OSError(errno.ENOTSUP, "no cpuset cgroup: a job cannot be confined to its CPUs")
            d = self.cpuset[1]
            _inherit_cpuset(d)  # the memory nodes (v1), before the CPUs
            (d / "cpuset.cpus").write_text(",".join(str(c) for c in sorted(cpuset)))

    def limits(self) -> dict:
        """The limits in force, as the kernel reports them: ``cpus`` (CPUs' worth of time per
        period, None: none), ``memory`` (bytes, None: none), ``processes`` (None: none),
        ``cpuset`` (CPU numbers, None: no cpuset). For checking what a job was given."""
        out: dict = {"cpus": None, "memory": None, "processes": None, "cpuset": None}
        try:
            if self.cpu is not None:
                kind, d = self.cpu
                if kind == "cgroup2":
                    quota, period = (d / "cpu.max").read_text().split()
                else:
                    quota, period = (d / "cpu.cfs_quota_us").read_text(), (d / "cpu.cfs_period_us").read_text()
                if quota.strip() not in ("max", "-1"):
                    out["cpus"] = int(quota) / int(period)
            if self.memory is not None:
                kind, d = self.memory
                raw = (d / ("memory.max" if kind == "cgroup2" else "memory.limit_in_bytes")).read_text().strip()
                out["memory"] = None if raw == "max" or int(raw) >= 1 << 62 else int(raw)
            if self.pids_limit is not None:
                raw = (self.pids_limit[1] / "pids.max").read_text().strip()
                out["processes"] = None if raw == "max" else int(raw)
            if self.cpuset is not None:
                out["cpuset"] = parse_cpu_list((self.cpuset[1] / "cpuset.cpus").read_text())
        except (OSError, ValueError):
            pass
        return out

    def peak_memory(self) -> int | None:
        """The most memory the job has held at once (bytes: v1 ``memory.max_usage_in_bytes``,
        v2 ``memory.peak`` where the kernel has it), None if unknown."""
        if self.memory is None:
            return None
        kind, d = self.memory
        try:
            return int((d / ("memory.peak" if kind == "cgroup2" else "memory.max_usage_in_bytes")).read_text())
        except (OSError, ValueError):
            return None

    def set_weight(self, weight: float) -> int:
        """Relative CPU weight in (0, 1] as ``cpu.weight`` (v2, 1..10000) or ``cpu.shares`` (v1,
        2..262144); returns the value written."""
        if self.cpu is None:
            raise OSError(errno.ENOTSUP, "no cpu cgroup for CPU weights")
        kind, d = self.cpu
        if kind == "cgroup2":
            w = int(min(V2_WEIGHT_MAX, max(1, round(V2_WEIGHT_MAX * weight))))
            (d / "cpu.weight").write_text(str(w))
        else:
            w = int(min(V1_SHARES_MAX, max(V1_SHARES_MIN, round(V1_SHARES_MAX * weight))))
            (d / "cpu.shares").write_text(str(w))
        return w

    def set_cpus(self, cpus: float | None) -> float | None:
        """Change the CPU limit of a running job: ``cpus`` CPUs' worth of time per period
        (``cpu.max`` on v2, ``cpu.cfs_quota_us`` on v1; None: no limit), as :meth:`create` sets
        it; returns the limit written (CPUs, the kernel's 1 ms floor applied)."""
        if self.cpu is None:
            raise OSError(errno.ENOTSUP, "no cpu cgroup for a CPU limit")
        kind, d = self.cpu
        quota = None if cpus is None else max(1000, round(cpus * PERIOD_US))
        if kind == "cgroup2":
            (d / "cpu.max").write_text("max" if quota is None else f"{quota} {PERIOD_US}")
        else:
            (d / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (d / "cpu.cfs_quota_us").write_text("-1" if quota is None else str(quota))
        return None if quota is None else quota / PERIOD_US

    # ------------------------------------------------------------------ state
    def pids(self) -> list[int]:
        """Processes in the job's tracking cgroup (empty if it is gone)."""
        try:
            return [int(x) for x in (self.track / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return []

    def frozen(self) -> bool:
        """True once every process of the job is frozen (v2 ``cgroup.events``; v1 ``FROZEN``)."""
        try:
            if self.track_kind == "cgroup2":
                events = dict(line.split() for line in (self.track / "cgroup.events").read_text().splitlines())
                return events.get("frozen") == "1"
            return (self.track / "freezer.state").read_text().strip() == "FROZEN"
        except OSError:
            return False

    def cpu_seconds(self) -> float:
        """CPU time used by every process of the job so far (s): ``cpu.stat`` usage on v2 (no
        controller needed), ``cpuacct.usage`` on v1 if the cpu folder has it; 0 if unknown."""
        try:
            if self.track_kind == "cgroup2":
                for line in (self.track / "cpu.stat").read_text().splitlines():
                    k, v = line.split()
                    if k == "usage_usec":
                        return int(v) / 1e6
            if self.cpu is not None and (self.cpu[1] / "cpuacct.usage").exists():
                return int((self.cpu[1] / "cpuacct.usage").read_text()) / 1e9
        except (OSError, ValueError):
            pass
        return 0.0

    # ------------------------------------------------------------------ control
    def freeze(self) -> None:
        self._set_frozen(True)

    def thaw(self) -> None:
        self._set_frozen(False)

    def _set_frozen(self, on: bool) -> None:
        try:
            if self.track_kind == "cgroup2":
                (self.track / "cgroup.freeze").write_text("1" if on else "0")
            else:
                (self.track / "freezer.state").write_text("FROZEN" if on else "THAWED")
        except FileNotFoundError:
            pass  # the job's cgroup is already gone: nothing to freeze

    def kill(self, timeout: float = 10.0) -> bool:
        """Kill every process of the job and wait (at most ``timeout`` s) until the cgroup is
        empty; True if it is. ``cgroup.kill`` where the kernel has it (v2, Linux >= 5.14); else
        freeze (so nothing forks meanwhile), SIGKILL each pid, thaw, repeat."""
        deadline = time.monotonic() + timeout
        kill_file = self.track / "cgroup.kill"
        while True:
            pids = self.pids()
            if not pids:
                return True
            if self.track_kind == "cgroup2" and kill_file.exists():
                try:
                    kill_file.write_text("1")
                except FileNotFoundError:
                    return True
            else:
                self.freeze()
                for pid in self.pids():
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                self.thaw()
            end = min(deadline, time.monotonic() + 0.5)
            while self.pids() and time.monotonic() < end:
                time.sleep(0.005)
            if time.monotonic() >= deadline:
                return not self.pids()

    def remove(self) -> bool:
        """Remove the job's folders (True if all are gone); fails while processes remain."""
        return all([_rmdir(d) for d in reversed(self.dirs())])
