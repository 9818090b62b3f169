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
Each user runs one job per host (by default a CPU-bound shell loop), started by the live
market's executor (:class:`~marketsched.platform.executor.LocalExecutor`: the launcher, one cgroup
per job from :mod:`marketsched.platform.cgroups`, frozen until its share is set), so Tycoon mode has
no process or cgroup code of its own. The share is enforced by the kernel's proportional-share
scheduler, through the first of these that works:

1. **cgroup v2 CPU weights** (``cpu.weight``, 1..10000) on each job's cgroup under a cgroup2
   mount whose ``cgroup.controllers`` offers ``cpu``; weight_ij is x_ij scaled so the host's
   largest bid maps to 10000 (jobs are pinned, so weights compete per CPU).
2. **cgroup v1 CPU shares** (``cpu.shares``, 2..262144), the same under the v1 ``cpu``
   hierarchy. On this project's machines ``/sys/fs/cgroup`` is a hybrid mount: v1 controllers
   (``cpu`` writable) and a cgroup2 ``unified`` tree without the ``cpu`` controller, so v1 is
   what runs here; the CFS arithmetic is the same (weights are relative among siblings).
3. **Stride scheduling** in user space (fallback where no cgroup is writable: a container
   without cgroup delegation, a non-root user): per host, every ``quantum`` seconds the job
   with the smallest pass runs (thawed) and the others stop (frozen, or SIGSTOP without a
   cgroup); a job's pass grows by 1 / x_ij per quantum it runs, and its distance to the
   smallest pass of the active jobs is scaled by old / new bid when its bid changes, also across
   a time out of the market (bid 0): a job that starts bidding again joins at the smallest pass
   plus the distance it had when it left, so scaled (Waldspurger and Weihl's stride scheduling
   with dynamic tickets and dynamic client participation, which Tycoon's proportional share
   reduces to). Shares are then shares of *wall time* on the host's CPU, not of CPU time when
   other programs compete for that CPU.

A user whose bid on a host is 0 gets no share there: its job is stopped (frozen) until it bids
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
initial bids). The agents thread and the stride threads run on the shared keep-alive loop
(:mod:`marketsched.platform.rounds`): a round or quantum that raises is kept in ``last_error``
and printed, and the thread goes on. :meth:`~TycoonMarket.stop` ends the threads, kills every job
and removes the cgroups. ``marketsched market tycoon`` runs this from the command line and prints
the bids, the shares and the measured CPU fractions.

Accuracy (``tests/test_tycoon_live.py``): once the bids have converged, with the agents still
re-splitting every interval, each user's fraction of each host's CPU time is within 0.06
(absolute) of its share ``x_ij / sum_k x_kj``, with cgroup weights and with the stride fallback;
the default test measures until every host's jobs have used a few CPU-seconds (their own CPU
time), ``pytest -m measure`` over 60 s of wall time. :meth:`TycoonMarket.stride_quantum` is
checked quantum by quantum against stride scheduling's bound.

Machinery
---------
The jobs, their cgroups, the enforcement and the periodic thread are :class:`CpuShareHosts`;
:class:`TycoonMarket` adds the budgets, the weights and the agents' best responses. The share
market of Stößer (2009), chapter 6 (:mod:`marketsched.live.share`, ``marketsched market share``)
runs on the same machinery.

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
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np

from marketsched.mechanisms.games.best_response import best_response
from marketsched.platform.cgroups import Layout, detect_enforcement, find_cgroup1_cpu, find_cgroup2_cpu  # noqa: F401
from marketsched.platform.executor import JobLimits, LocalExecutor, proc_cpu_seconds
from marketsched.platform.rounds import start_rounds

BUSY = "while :; do :; done"


@contextmanager
def _interrupts_held():
    """SIGINT and SIGTERM wait until the block has ended (then they are raised again, to the
    handlers in place before it): a Ctrl-C or kill arriving between starting a job's process and
    recording it would otherwise leave that process (and its cgroup) behind. Only in the main
    thread (where Python runs signal handlers) and when both handlers were set from Python."""
    sigs = (signal.SIGINT, signal.SIGTERM)
    old = {s: signal.getsignal(s) for s in sigs}
    if threading.current_thread() is not threading.main_thread() or None in old.values():
        yield
        return
    held: list[int] = []
    for s in sigs:
        signal.signal(s, lambda signum, frame: held.append(signum))
    try:
        yield
    finally:
        for s in sigs:
            signal.signal(s, old[s])
        for signum in held:
            signal.raise_signal(signum)


@dataclass
class TycoonJob:
    user: int
    host: int
    pid: int
    popen: subprocess.Popen | None  # None for a job without a process (tests)
    key: str = ""  # the job's key in the market's LocalExecutor
    stopped: bool = False
    pass_: float = 0.0
    quanta: int = 0  # quanta the stride scheduler gave it
    extra: dict = field(default_factory=dict)


class CpuShareHosts:
    """The machinery every live proportional-share market runs on: one job per (user, host)
    (``hosts``: distinct CPU numbers; ``users``: how many), started by the live market's
    executor, each host's CPU divided among its jobs in proportion to :meth:`tickets` (cgroup
    CPU weights, or stride scheduling: see the module docstring), and a periodic thread that
    calls :meth:`resplit` every ``interval`` seconds. Tycoon mode (:class:`TycoonMarket`) and the
    share market of Stößer (2009), chapter 6 (:class:`marketsched.live.share.ShareMarket`) are
    its subclasses: they set ``bids`` and define :meth:`resplit` (one period of their market).

    ``enforcement``: "auto" (see :func:`detect_enforcement`), "cgroup2", "cgroup1" or "stride";
    ``quantum``: the stride scheduler's time slice (s); ``kind`` names the threads and the
    market's cgroup folder (``marketsched-<kind>-<pid>-...``)."""

    kind = "share"

    def __init__(self, hosts, users: int, interval: float = 1.0, enforcement: str = "auto",
                 quantum: float = 0.02, name: str | None = None):
        self.hosts = [int(h) for h in hosts]
        self.users = int(users)
        m, n = self.users, len(self.hosts)
        cpus = os.sched_getaffinity(0)
        bad = [h for h in self.hosts if h not in cpus]
        if bad:
            raise ValueError(f"host CPU(s) {bad} are not available to this process (CPUs {sorted(cpus)})")
        if len(set(self.hosts)) != n:
            raise ValueError(f"hosts must be distinct CPUs, got {self.hosts}")
        if not interval > 0 or not quantum > 0:
            raise ValueError("interval and quantum must be positive")
        self.interval, self.quantum = float(interval), float(quantum)
        self.enforcement = detect_enforcement() if enforcement == "auto" else enforcement
        if self.enforcement not in ("cgroup2", "cgroup1", "stride"):
            raise ValueError(f"unknown enforcement {enforcement!r}")
        self.name = name or f"marketsched-{self.kind}-{os.getpid()}-{id(self) & 0xffff:x}"
        self.bids = np.zeros((m, n))  # set by the subclass: its market's bids (users x hosts)
        self.jobs: dict[tuple[int, int], TycoonJob] = {}
        self.history: list = []  # one entry per period, the subclass's record
        self.root: Path | None = None  # the market's cgroup folder, if jobs are in cgroups
        self.executor: LocalExecutor | None = None
        self._workdir: Path | None = None
        self._lock = threading.RLock()  # bids, history, enforcement (apply, stride threads)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        # stride scheduler, per host: the job running, each active job's bid at the last
        # quantum, each inactive job's (distance to the smallest pass, bid) when it left
        self._stride_current: list[TycoonJob | None] = [None] * n
        self._stride_last: list[dict[int, float]] = [{} for _ in range(n)]
        self._stride_away: list[dict[int, tuple[float, float]]] = [{} for _ in range(n)]
        self.last_error: str | None = None  # the last exception of a round of its threads, if any

    def tickets(self) -> np.ndarray:
        """What each host's CPU is divided in proportion to (users x hosts, >= 0; 0: the job is
        stopped): the bids by default (Tycoon's and Proportional Share's rule)."""
        return self.bids

    def resplit(self):
        """One period of the market, called by the periodic thread every ``interval`` seconds;
        subclasses define it (holding ``_lock`` while they change the bids and call :meth:`apply`)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ processes and cgroups
    def start(self, commands=None):
        """Start one job per (user, host): ``commands[i][j]`` (shell) or a CPU-bound loop; apply
        the initial bids; start the stride threads (if that is the enforcement) and the agents
        thread, which calls :meth:`resplit` every ``interval`` seconds until :meth:`stop`.

        The jobs are started like the live market's (:class:`~marketsched.platform.executor.LocalExecutor`:
        the launcher, a cgroup per job where the machine has one), pinned to their host's CPU and
        frozen until their share is set; with cgroup enforcement each job's cgroup gets the CPU
        weight its bid gives. A Ctrl-C or SIGTERM arriving meanwhile takes effect when every job
        is recorded (so :meth:`stop` finds them all)."""
        if self.jobs or self._stop.is_set():
            raise RuntimeError(f"a {type(self).__name__} starts once")
        with _interrupts_held():
            self._start(commands)
        return self

    def _start(self, commands) -> None:
        try:
            if self.enforcement == "stride":
                layout = Layout.detect(self.name, cpu=None, memory=None, pids=None)  # freezing only, where there is a cgroup
            else:
                layout = Layout.detect(self.name, cpu=self.enforcement, memory=None, pids=None)
                if layout.cpu is None:
                    layout.remove()
                    raise RuntimeError(f"{self.enforcement} enforcement asked for, but no writable cpu cgroup was found")
            self._workdir = Path(tempfile.mkdtemp(prefix=self.name + "-"))
            self.executor = LocalExecutor(self._workdir / "jobs", containment=layout, name=self.name,
                                          limits=JobLimits(cpus=None, memory=None))
            dirs = layout.dirs()
            self.root = (layout.cpu[1] if layout.cpu is not None else dirs[0]) if dirs else None
            for j, cpu in enumerate(self.hosts):
                for i in range(self.users):
                    cmd = BUSY if commands is None else commands[i][j]
                    key = f"u{i}-h{j}"
                    proc = self.executor.launch(key, cmd, affinity={cpu}, frozen=True, record_exit=False)
                    self.jobs[(i, j)] = TycoonJob(i, j, proc.pid, proc.popen, key=key, stopped=True)
            self.apply()
        except BaseException:
            self.stop()
            raise
        self._start_loops()

    def _start_loops(self) -> None:
        """Start the market's threads, each on the shared keep-alive loop
        (:func:`~marketsched.platform.rounds.start_rounds`: a round that raises is kept in
        ``last_error`` and printed, and the thread goes on, so enforcement never stops without a
        word): with stride enforcement, one per host running :meth:`stride_quantum` every
        ``quantum`` seconds; and the agents thread, running :meth:`resplit` every ``interval``
        seconds (:meth:`_agents_wait`). Each waits before its first round (the jobs are frozen
        until their host's first quantum, or held at their initial shares until the first
        re-split). All run until :meth:`stop`."""
        loops: list[tuple[str, Callable[[], bool], Callable[[], object]]] = [
            (f"{self.kind}-stride-{j}", partial(self._stop.wait, self.quantum), partial(self.stride_quantum, j))
            for j in range(len(self.hosts)) if self.enforcement == "stride"]
        loops.append((f"{self.kind}-agents", self._agents_wait(), self.resplit))
        for tname, wait, round_ in loops:
            self._threads.append(start_rounds(self, tname, wait, round_))

    def apply(self) -> None:
        """Make the current :meth:`tickets` the hosts' shares (cgroup weights, or the stride
        scheduler's strides); a zero ticket stops (freezes) that job."""
        if self.enforcement == "stride":
            return  # the stride threads read the tickets every quantum
        with self._lock:
            tickets = self.tickets()
            for j in range(len(self.hosts)):
                col = tickets[:, j]
                top = col.max()
                for i in range(self.users):
                    job = self.jobs[(i, j)]
                    x = col[i]
                    if x <= 0:
                        self._signal(job, signal.SIGSTOP)
                        continue
                    # weight x / top: the host's largest bid gets the cgroup's largest weight
                    assert self.executor is not None  # started
                    job.extra["weight"] = self.executor.set_weight(job.key, x / top)
                    self._signal(job, signal.SIGCONT)

    def _signal(self, job: TycoonJob, sig) -> None:
        """Stop (SIGSTOP: freeze) or continue (SIGCONT: thaw) one job, through the executor."""
        assert self.executor is not None  # started
        if sig == signal.SIGSTOP:
            self.executor.stop(job.key)
        else:
            self.executor.cont(job.key)
        job.stopped = sig == signal.SIGSTOP

    def stride_quantum(self, j: int) -> TycoonJob | None:
        """One quantum of user-space stride scheduling on host j: the job with the smallest pass
        (ties: the lower user) runs (thawed, the one that ran before frozen) and its pass
        grows by 1 / bid; returns it (None when nobody bids on j).

        Bid changes (Waldspurger and Weihl's dynamic tickets): when a job's bid changes from b to
        b', its distance to the smallest pass of the active jobs is scaled by b / b', so a job
        that once bid almost nothing is not starved after it bids more. A job that stops bidding
        (bid 0) keeps that distance and its bid; when it bids again it joins at the smallest pass
        plus the distance, scaled in the same way (their dynamic client participation), so it
        gets no burst for the time it was out and no penalty either. Each job's pass thus stays
        within one stride (1 / bid) above the smallest pass, so over any N quanta with fixed bids
        a job whose share is r (its bid over the sum of the k active bids) runs r N quanta, give
        or take 1 + k r."""
        with self._lock:
            last, away = self._stride_last[j], self._stride_away[j]
            tickets = self.tickets()
            cands = [i for i in range(self.users) if tickets[i, j] > 0]
            # distances are to the smallest pass of the jobs active at the last quantum (0 if none)
            floor = min((self.jobs[(i, j)].pass_ for i in last), default=0.0)
            for i in list(last):
                if i not in cands:  # left: keep its distance to the smallest pass, and its bid
                    away[i] = (self.jobs[(i, j)].pass_ - floor, last[i])
            for i in cands:
                jb, bid = self.jobs[(i, j)], tickets[i, j]
                if i not in last:
                    dist, old = away.pop(i, (0.0, bid))
                    jb.pass_ = floor + max(dist, 0.0) * old / bid
                elif last[i] != bid:
                    jb.pass_ = floor + (jb.pass_ - floor) * last[i] / bid
            self._stride_last[j] = {i: tickets[i, j] for i in cands}
            job = min((self.jobs[(i, j)] for i in cands), key=lambda jb: (jb.pass_, jb.user), default=None)
            current = self._stride_current[j]
            if current is not None and current is not job:
                self._signal(current, signal.SIGSTOP)
            if job is not None:
                if job.stopped:
                    self._signal(job, signal.SIGCONT)
                job.pass_ += 1.0 / tickets[job.user, j]
                job.quanta += 1
            self._stride_current[j] = job
            return job

    # ------------------------------------------------------------------ the periodic thread
    def _agents_wait(self) -> Callable[[], bool]:
        """The agents thread's wait (:meth:`_start_loops`): round k at start + k * interval until
        :meth:`stop`; a round more than an interval late puts the clock back to one interval
        after it (no burst of rounds)."""
        due = time.monotonic()

        def wait() -> bool:
            nonlocal due
            due += self.interval
            now = time.monotonic()
            if due < now:
                due = now + self.interval
            return self._stop.wait(max(0.0, due - time.monotonic()))

        return wait

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
        if self.executor is not None:
            self.executor.shutdown(kill=True)
            self.executor = None
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


class TycoonMarket(CpuShareHosts):
    """Tycoon's proportional share (Feldman, Lai & Zhang 2005, ACM EC) over ``hosts``
    (distinct CPU numbers) for users with ``budgets`` (m,) and private ``weights`` (m, n);
    ``interval``: seconds between the agents' re-splits; ``enforcement``: "auto" (see
    :func:`detect_enforcement`), "cgroup2", "cgroup1" or "stride"; ``quantum``: the stride
    scheduler's time slice (s). ``history[k]``: the bids of round k (``history[0]`` the initial
    bids)."""

    kind = "tycoon"

    def __init__(self, hosts, budgets, weights, interval: float = 1.0, reserve: float = 1e-3,
                 enforcement: str = "auto", quantum: float = 0.02, name: str | None = None):
        self.budgets = np.asarray(budgets, dtype=float)
        self.weights = np.asarray(weights, dtype=float)
        hosts = list(hosts)
        m, n = len(self.budgets), len(hosts)
        if self.weights.shape != (m, n):
            raise ValueError(f"weights must be (users, hosts) = ({m}, {n}), got {self.weights.shape}")
        if np.any(self.budgets <= 0) or not np.all(np.isfinite(self.budgets)):
            raise ValueError("budgets must be positive and finite")
        if np.any(self.weights < 0) or not np.all(np.isfinite(self.weights)):
            raise ValueError("weights must be finite and >= 0")
        if not reserve > 0:
            raise ValueError("reserve must be positive")
        super().__init__(hosts, m, interval=interval, enforcement=enforcement, quantum=quantum, name=name)
        self.reserve = float(reserve)
        # initial bids: proportional to the weights (each user spends its whole budget)
        w = self.weights
        tot = w.sum(axis=1, keepdims=True)
        self.bids = np.where(tot > 0, w / np.where(tot > 0, tot, 1), 1.0 / n) * self.budgets[:, None]
        self.history.append(self.bids.copy())

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

    def snapshot(self) -> tuple[int, np.ndarray, np.ndarray]:
        """``(rounds played, bids, shares)`` taken together: the shares are the ones the bids
        give, r_ij = x_ij / sum_k x_kj (users x hosts)."""
        with self._lock:
            bids = self.bids.copy()
            rounds = len(self.history) - 1
        tot = bids.sum(axis=0)
        return rounds, bids, np.divide(bids, tot, out=np.zeros_like(bids), where=tot > 0)
