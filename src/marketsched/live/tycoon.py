"""Tycoon mode: a proportional-share market over several hosts with best-responding user agents.

Source: Feldman, Lai & Zhang (2005) (M. Feldman, K. Lai, L. Zhang, "A price-anticipating resource allocation
mechanism for distributed shared clusters", EC 2005), the game of
:mod:`marketsched.mechanisms.games` run for real. User i has a budget X_i and a private weight
w_ij for host j (what a share of host j is worth to it); every ``interval`` seconds its agent
splits the whole budget into bids x_ij with the paper's best response (section 4.1, sort and
prefix: :func:`~marketsched.mechanisms.games.best_response.best_response`, the library's
closed form) to the other users' current bids, and host j gives user i the share
``r_ij = x_ij / sum_k x_kj`` of its CPU.

Hosts and enforcement
---------------------
A *host* here is one CPU of this machine: its jobs are pinned to it (``sched_setaffinity``).
Each user runs one job per host (a process group; by default a CPU-bound shell loop). The share
is enforced by the kernel's proportional-share scheduler, through the first of these that works:

1. **cgroup v2 CPU weights** (``cpu.weight``, 1..10000): a cgroup per host under a cgroup2
   mount whose ``cgroup.controllers`` offers ``cpu``, a child per job; weight_ij is x_ij scaled
   so the host's largest bid maps to 10000.
2. **cgroup v1 CPU shares** (``cpu.shares``, 2..262144), the same tree under the v1 ``cpu``
   hierarchy. On this project's machines ``/sys/fs/cgroup`` is a hybrid mount: v1 controllers
   (``cpu`` writable) and a cgroup2 ``unified`` tree without the ``cpu`` controller, so v1 is
   what runs here; the CFS arithmetic is the same (weights are relative among siblings).
3. **Stride scheduling** in user space (fallback where no cgroup is writable: a container
   without cgroup delegation, a non-root user): per host, every ``quantum`` seconds the job
   with the smallest pass runs (SIGCONT) and the others stop (SIGSTOP); a job's pass grows by
   1 / x_ij per quantum it runs, a job that starts bidding again joins at the smallest pass
   of the others, and when an active job's bid changes its distance to that pass is scaled by
   old / new bid (Waldspurger and Weihl's stride scheduling with dynamic tickets, which Tycoon's proportional share
   reduces to). Shares are then shares of *wall time* on the host's CPU, not
   of CPU time when other programs compete for that CPU.

A user whose bid on a host is 0 gets no share there: its job is stopped (SIGSTOP) until it bids
again (a CFS weight cannot be 0).

Agents
------
:meth:`TycoonMarket.start` starts the jobs with bids proportional to the weights (the
``weight_proportional_bids`` convention) and a background *agents thread*: every ``interval``
seconds (on a fixed clock: round k at start + k * interval) it calls :meth:`TycoonMarket.resplit`,
which lets every agent re-split its budget and makes the new bids the hosts' shares. One lock
covers the bids, the history and the enforcement (:meth:`~TycoonMarket.apply`, the stride
threads), so :meth:`~TycoonMarket.snapshot` always returns the bids of a whole round together with
the number of rounds played; ``history`` keeps the bids of every round (``history[0]`` the
initial bids). :meth:`~TycoonMarket.stop` ends the threads, kills every job and removes the
cgroups. ``marketsched market tycoon`` runs this from the command line and prints the bids, the
shares and the measured CPU fractions.

Accuracy (``tests/test_tycoon_live.py``): once the bids have converged, over 60 s with the agents
still re-splitting every interval, each user's fraction of each host's CPU time is within 0.06 (absolute) of its share
``x_ij / sum_k x_kj``, with cgroup weights and with the stride fallback.

Decisions
---------
* Agents re-split sequentially in user order each interval (each sees the bids already updated
  in this interval: the paper's sequential best-response dynamics, section 5), from bids
  proportional to the weights. The first re-split comes one interval after the start.
* The host reserve eps (appendix A) is only in the agents' arithmetic (it keeps every price
  positive); the reserved share is not held idle on the CPU.
* Hosts must be distinct CPUs (two hosts on one CPU would compete for it, and the shares would
  mean nothing).
* Budgets are per interval and not charged to the live market's ledger: Tycoon's money is a
  credit the scheduler refills each interval (the paper's static game). Charging the broker's
  ledger for Tycoon shares is left for later.
* Slurm nodes as hosts are not done: the test cluster's slurmd uses ``task/none`` (no cgroups)
  and has one node; see ``docs/slurm_and_dayahead.md``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from marketsched.mechanisms.games.best_response import best_response

BUSY = "while :; do :; done"
V2_MAX, V1_MAX, V1_MIN = 10000, 262144, 2
CLK_TCK = os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------- enforcement
def _mounts() -> list[list[str]]:
    """Fields of each line of /proc/mounts (device, path, type, options, ...); [] if unreadable."""
    try:
        return [line.split() for line in Path("/proc/mounts").read_text().splitlines()]
    except OSError:
        return []


def find_cgroup2_cpu() -> Path | None:
    """A writable cgroup2 mount offering the cpu controller, or None."""
    for parts in _mounts():
        if len(parts) >= 3 and parts[2] == "cgroup2":
            root = Path(parts[1])
            try:
                if "cpu" in (root / "cgroup.controllers").read_text().split() and os.access(root, os.W_OK):
                    return root
            except OSError:
                continue
    return None


def find_cgroup1_cpu() -> Path | None:
    """The writable cgroup v1 hierarchy holding the cpu controller, or None."""
    for parts in _mounts():
        if len(parts) >= 4 and parts[2] == "cgroup" and "cpu" in parts[3].split(","):
            root = Path(parts[1])
            if (root / "cpu.shares").exists() and os.access(root, os.W_OK):
                return root
    return None


def detect_enforcement() -> str:
    """"cgroup2", "cgroup1" or "stride" (see the module docstring), tried in that order: a
    cgroup counts only if a child can really be created in it."""
    for kind, root in (("cgroup2", find_cgroup2_cpu()), ("cgroup1", find_cgroup1_cpu())):
        if root is None:
            continue
        probe = root / f"marketsched-probe-{os.getpid()}"
        try:
            probe.mkdir()
            probe.rmdir()
            if kind == "cgroup2":
                ctl = (root / "cgroup.subtree_control").read_text().split()
                if "cpu" not in ctl:
                    (root / "cgroup.subtree_control").write_text("+cpu")
            return kind
        except OSError:
            continue
    return "stride"


def proc_cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (s), 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            rest = f.read().rsplit(b")", 1)[1].split()
        return (int(rest[11]) + int(rest[12])) / CLK_TCK
    except (OSError, IndexError, ValueError):
        return 0.0


@dataclass
class TycoonJob:
    user: int
    host: int
    pid: int
    popen: subprocess.Popen
    cgroup: Path | None = None
    stopped: bool = False
    pass_: float = 0.0
    extra: dict = field(default_factory=dict)


class TycoonMarket:
    """Tycoon's proportional share (Feldman, Lai & Zhang 2005, ACM EC) over ``hosts``
    (distinct CPU numbers) for users with ``budgets`` (m,) and private ``weights`` (m, n);
    ``interval``: seconds between the agents' re-splits; ``enforcement``: "auto" (see
    :func:`detect_enforcement`), "cgroup2", "cgroup1" or "stride"; ``quantum``: the stride
    scheduler's time slice (s)."""

    def __init__(self, hosts, budgets, weights, interval: float = 1.0, reserve: float = 1e-3,
                 enforcement: str = "auto", quantum: float = 0.02, name: str | None = None):
        self.hosts = [int(h) for h in hosts]
        self.budgets = np.asarray(budgets, dtype=float)
        self.weights = np.asarray(weights, dtype=float)
        m, n = len(self.budgets), len(self.hosts)
        if self.weights.shape != (m, n):
            raise ValueError(f"weights must be (users, hosts) = ({m}, {n}), got {self.weights.shape}")
        if np.any(self.budgets <= 0) or not np.all(np.isfinite(self.budgets)):
            raise ValueError("budgets must be positive and finite")
        if np.any(self.weights < 0) or not np.all(np.isfinite(self.weights)):
            raise ValueError("weights must be finite and >= 0")
        cpus = os.sched_getaffinity(0)
        bad = [h for h in self.hosts if h not in cpus]
        if bad:
            raise ValueError(f"host CPU(s) {bad} are not available to this process (CPUs {sorted(cpus)})")
        if len(set(self.hosts)) != n:
            raise ValueError(f"hosts must be distinct CPUs, got {self.hosts}")
        if not interval > 0 or not reserve > 0 or not quantum > 0:
            raise ValueError("interval, reserve and quantum must be positive")
        self.interval, self.reserve, self.quantum = float(interval), float(reserve), float(quantum)
        self.enforcement = detect_enforcement() if enforcement == "auto" else enforcement
        if self.enforcement not in ("cgroup2", "cgroup1", "stride"):
            raise ValueError(f"unknown enforcement {enforcement!r}")
        self.name = name or f"marketsched-tycoon-{os.getpid()}-{id(self) & 0xffff:x}"
        # initial bids: proportional to the weights (each user spends its whole budget)
        w = self.weights
        tot = w.sum(axis=1, keepdims=True)
        self.bids = np.where(tot > 0, w / np.where(tot > 0, tot, 1), 1.0 / n) * self.budgets[:, None]
        self.jobs: dict[tuple[int, int], TycoonJob] = {}
        self.history: list[np.ndarray] = [self.bids.copy()]
        self.root: Path | None = None
        self._lock = threading.RLock()  # bids, history, enforcement (apply, stride threads)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.last_error: str | None = None  # the last exception of the agents thread, if any

    # ------------------------------------------------------------------ processes and cgroups
    def start(self, commands=None) -> TycoonMarket:
        """Start one job per (user, host): ``commands[i][j]`` (shell) or a CPU-bound loop; apply
        the initial bids; start the stride threads (if that is the enforcement) and the agents
        thread, which calls :meth:`resplit` every ``interval`` seconds until :meth:`stop`."""
        if self.jobs or self._stop.is_set():
            raise RuntimeError("a TycoonMarket starts once")
        try:
            if self.enforcement != "stride":
                base = find_cgroup2_cpu() if self.enforcement == "cgroup2" else find_cgroup1_cpu()
                if base is None:
                    raise RuntimeError(f"{self.enforcement} enforcement asked for, but no writable cpu cgroup was found")
                (base / self.name).mkdir()
                self.root = base / self.name  # only once it is ours: stop() removes it
                if self.enforcement == "cgroup2":
                    (self.root / "cgroup.subtree_control").write_text("+cpu")
            for j, cpu in enumerate(self.hosts):
                hdir = None
                if self.root is not None:
                    hdir = self.root / f"host-{j}"
                    hdir.mkdir()
                    if self.enforcement == "cgroup2":
                        (hdir / "cgroup.subtree_control").write_text("+cpu")
                for i in range(len(self.budgets)):
                    cmd = BUSY if commands is None else commands[i][j]
                    p = subprocess.Popen(["/bin/sh", "-c", cmd], start_new_session=True, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    os.kill(p.pid, signal.SIGSTOP)  # nothing runs before its share is set
                    os.sched_setaffinity(p.pid, {cpu})
                    job = TycoonJob(i, j, p.pid, p, stopped=True)
                    if hdir is not None:
                        job.cgroup = hdir / f"user-{i}"
                        job.cgroup.mkdir()
                        (job.cgroup / "cgroup.procs").write_text(str(p.pid))
                    self.jobs[(i, j)] = job
            self.apply()
        except BaseException:
            self.stop()
            raise
        targets = [(self._stride, (j,), f"tycoon-stride-{j}") for j in range(len(self.hosts))
                   if self.enforcement == "stride"]
        for target, args, tname in targets + [(self._agents, (), "tycoon-agents")]:
            t = threading.Thread(target=target, args=args, daemon=True, name=tname)
            t.start()
            self._threads.append(t)
        return self

    def apply(self) -> None:
        """Make the current bids the hosts' shares (cgroup weights, or the stride scheduler's
        strides); a zero bid stops that job."""
        if self.enforcement == "stride":
            return  # the stride threads read self.bids every quantum
        with self._lock:
            for j in range(len(self.hosts)):
                col = self.bids[:, j]
                top = col.max()
                for i in range(len(self.budgets)):
                    job = self.jobs[(i, j)]
                    x = col[i]
                    if x <= 0:
                        self._signal(job, signal.SIGSTOP)
                        continue
                    assert job.cgroup is not None, "cgroup enforcement gives every job a cgroup"
                    if self.enforcement == "cgroup2":
                        wgt = int(min(V2_MAX, max(1, round(V2_MAX * x / top))))
                        (job.cgroup / "cpu.weight").write_text(str(wgt))
                    else:
                        wgt = int(min(V1_MAX, max(V1_MIN, round(V1_MAX * x / top))))
                        (job.cgroup / "cpu.shares").write_text(str(wgt))
                    job.extra["weight"] = wgt
                    self._signal(job, signal.SIGCONT)

    def _signal(self, job: TycoonJob, sig) -> None:
        try:
            os.killpg(job.pid, sig)
            job.stopped = sig == signal.SIGSTOP
        except ProcessLookupError:
            pass

    def _stride(self, j: int) -> None:
        """User-space stride scheduling on host j (fallback enforcement): every quantum the job
        with the smallest pass runs and its pass grows by 1 / bid. A job that starts bidding
        again joins at the smallest pass of the others (Waldspurger and Weihl's global pass), so
        it gets no burst for the time it was out; when an active job's bid changes from b to b',
        its distance to that pass is scaled by b / b' (their dynamic ticket change), so a job
        that once bid almost nothing is not starved after it bids again."""
        current: TycoonJob | None = None
        last: dict[int, float] = {}  # last: bid of each active job at the previous quantum
        while not self._stop.is_set():
            with self._lock:
                cands = [i for i in range(len(self.budgets)) if self.bids[i, j] > 0]
                floor = min((self.jobs[(i, j)].pass_ for i in cands if i in last), default=0.0)
                for i in cands:
                    jb, bid = self.jobs[(i, j)], self.bids[i, j]
                    if i not in last:
                        jb.pass_ = max(jb.pass_, floor)
                    elif last[i] != bid:
                        jb.pass_ = floor + (jb.pass_ - floor) * last[i] / bid
                last = {i: self.bids[i, j] for i in cands}
                job = min((self.jobs[(i, j)] for i in cands), key=lambda jb: (jb.pass_, jb.user), default=None)
                if current is not None and current is not job:
                    self._signal(current, signal.SIGSTOP)
                if job is not None:
                    if job.stopped:
                        self._signal(job, signal.SIGCONT)
                    job.pass_ += 1.0 / self.bids[job.user, j]
                current = job
            self._stop.wait(self.quantum)

    # ------------------------------------------------------------------ agents
    def resplit(self) -> np.ndarray:
        """One interval of the agents: each user in turn best-responds to the others' bids
        (Feldman, Lai & Zhang 2005, section 4.1; the library's closed form), the round's bids join ``history``
        and the shares follow; returns the new bids. The agents thread calls this."""
        with self._lock:
            for i in range(len(self.budgets)):
                others = self.bids.sum(axis=0) - self.bids[i]
                self.bids[i] = best_response(self.weights[i], others, self.budgets[i], reserve=self.reserve)
            self.history.append(self.bids.copy())
            self.apply()
            return self.bids.copy()

    def _agents(self) -> None:
        """The agents thread: round k at start + k * interval until :meth:`stop`; a round more
        than an interval late puts the clock back to one interval after it (no burst of rounds)."""
        due = time.monotonic() + self.interval
        while not self._stop.wait(max(0.0, due - time.monotonic())):
            try:
                self.resplit()
            except Exception:  # keep the agents alive; the error is printed and kept
                self.last_error = traceback.format_exc()
                traceback.print_exc()
            due += self.interval
            now = time.monotonic()
            if due < now:
                due = now + self.interval

    def snapshot(self) -> tuple[int, np.ndarray, np.ndarray]:
        """``(rounds played, bids, shares)`` taken together: the shares are the ones the bids
        give, r_ij = x_ij / sum_k x_kj (users x hosts)."""
        with self._lock:
            bids = self.bids.copy()
            rounds = len(self.history) - 1
        tot = bids.sum(axis=0)
        return rounds, bids, np.divide(bids, tot, out=np.zeros_like(bids), where=tot > 0)

    def cpu_seconds(self) -> np.ndarray:
        """CPU seconds each job has used so far (users x hosts)."""
        out = np.zeros(self.bids.shape)
        for (i, j), job in self.jobs.items():
            out[i, j] = proc_cpu_seconds(job.pid)
        return out

    def measure(self, seconds: float) -> tuple[np.ndarray, np.ndarray]:
        """CPU time each job got over ``seconds`` and, per host, its fraction of the host's total:
        ``(cpu seconds, measured shares)`` (users x hosts)."""
        a = self.cpu_seconds()
        time.sleep(seconds)
        d = self.cpu_seconds() - a
        tot = d.sum(axis=0)
        return d, np.divide(d, tot, out=np.zeros_like(d), where=tot > 0)

    # ------------------------------------------------------------------ cleanup
    def stop(self) -> None:
        """End the agents and stride threads, kill every job and remove the cgroups; nothing is
        left behind. Safe to call twice."""
        self._stop.set()
        for t in self._threads:
            t.join(timeout=5)
        for job in self.jobs.values():
            for sig in (signal.SIGKILL, signal.SIGCONT):
                try:
                    os.killpg(job.pid, sig)
                except ProcessLookupError:
                    pass
            job.popen.wait()
        if self.root is not None and self.root.exists():
            for d in sorted(self.root.glob("host-*/user-*")) + sorted(self.root.glob("host-*")) + [self.root]:
                for _ in range(50):
                    try:
                        d.rmdir()
                        break
                    except OSError:
                        time.sleep(0.02)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
