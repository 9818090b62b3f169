"""Slurm executor: the live market drives a real Slurm cluster instead of local processes.

The broker (:mod:`marketsched.live.broker`) keeps deciding *who runs* with the simulator's own
mechanism (Highest-Bid of Shudler et al. 2010 and friends, through the live engine); this
executor carries the decisions out on Slurm 22.05 through its command-line tools (measured:
PySlurm has no release for 22.05, every control answers in about 5 ms). It has the interface
the broker uses of :class:`~marketsched.platform.executor.LocalExecutor` (``launch``, ``stop``,
``cont``, ``kill``, ``adopt``, ``exits``, ``wait``, ``wake``, ``workdir``, ``procs``,
``shutdown``) plus two hooks the broker calls when present (``arrange`` after every decision,
``outcome`` when a job ends).

How the market's decisions map onto Slurm
-----------------------------------------
* **Submission** (``sbatch --parsable``). Every job the mechanism holds is a Slurm batch job,
  submitted as soon as it enters the market (``arrange``), not only when it starts: Slurm
  then knows the whole queue and can act on it by itself. The batch script runs the command in
  the job's folder (``DATA/jobs/job-ID``) like the local executor's wrapper, appends to
  ``stdout``/``stderr`` there and writes the command's exit status to ``exit_code``.
* **As the job's user.** In a multi-user market the broker (root) submits with ``sbatch
  --uid=UID --gid=GID`` of the job owner's Unix account: Slurm then runs the batch script, its
  steps and its output files as that account (slurmstepd drops privileges, as for a job the
  user submitted; checked on Slurm 22.05: the job's ``UserId`` is the account). The job's folder
  is created owned by that account (0700), the script goes to sbatch on stdin (no file the
  user could change) and the environment is exactly the local executor's clean one: sbatch
  runs in it and passes it whole (``--export=ALL``, :func:`submit_environment`), so nothing of
  the broker's environment is passed and no login shell runs (with ``--export=VARS`` or
  ``NONE`` slurmd would first run ``su - ACCOUNT`` to load the account's login environment). Slurm enters the folder as the user, so every folder above the jobs' folder must be
  traversable by other accounts (:meth:`SlurmExecutor.check_reachable`, checked at start).
* **Order = priorities.** ``slurm-up.sh`` configures ``PriorityType=priority/multifactor`` with
  every weight 0, so a job's priority is exactly the value the market sets. A job's priority
  is its mechanism key (HB: the bid; WSEPT: bid / estimate) times :data:`PRIORITY_SCALE`,
  rounded, clipped to ``[1, MAX_PRIORITY]`` (``priority=0`` would mean held). Slurm breaks
  equal priorities by job id (older first, measured), the mechanism by submission order (seed
  000), which is the same order for jobs submitted in order.
* **Eligibility gate.** When a core frees, Slurm starts the best *eligible* pending job within
  ~50 ms, before the broker even notices the exit. For that to be the job the mechanism starts,
  the eligible pending jobs must be exactly a prefix of the mechanism's queue on which Slurm's
  order (priority, then job id) agrees with the mechanism's: walking the mechanism's queue from
  the best job, a queued job is eligible while no preempted job has been passed (a preempted
  job resumes only through the market, so nothing ranked below it may take its core) and while
  its (priority, id) comes strictly after the previous eligible one's in Slurm's order (two
  different keys that round to the same priority stop the prefix). The other pending jobs are
  gated with a far begin time (``scontrol update StartTime=now+365days``; unlike a hold,
  ``priority=`` updates still work on them), and ungated with ``StartTime=now``. A job the
  mechanism starts is always ungated (``launch``/``cont``).
* **Preemption** (``stop``/``cont``): ``scontrol suspend`` / ``scontrol resume`` of a running
  job; a pending job is gated / ungated instead.
  - *The market owns capacity accounting*: Slurm's resume does not check capacity (it
    oversubscribes a node). A resume is carried out only when Slurm's running jobs leave a free
    CPU (``squeue`` count of the partition's running CPUs below its CPUs); otherwise it is
    deferred and retried at every poll.
  - *A job resumes on its own node* (Slurm cannot move a suspended job). On a partition of
    several nodes a resume is carried out only when the job's node has an idle CPU (``sinfo
    -N``); a free CPU on another node does not count. The simulator's model resumes a preempted
    job on any free processor (as MOSIX, which migrates processes, can), so
    on a cluster the job may wait for its node while a CPU elsewhere idles (jobs ranked below it
    stay gated, so none takes that CPU). The charges follow the mechanism's decisions, as for
    every deferred resume: the job is charged from the mechanism's resume, also while it waits
    for its node (docs/slurm_and_dayahead.md, "On a cluster").
  - *2 s rule*: slurmd delays a resume that comes less than 2 s after the suspend (seen with Slurm 22.05). The
    executor defers such a resume itself until ``suspend + RESUME_GAP``. The market charges
    the job from the moment its mechanism resumed it (at most ``RESUME_GAP`` s early; only when
    a preemptor ends within 2 s of preempting).
  - *A suspend waits for the job's tasks*: Slurm calls a job RUNNING as soon as it allocates
    it, but slurmd launches the batch script later (1.6 s later in the case seen in the test
    suite under two busy loops). A suspend that reaches slurmd while the job's step is not yet running
    its tasks is lost: Slurm records the job SUSPENDED while it runs on (seen once in CI under
    load: the victim ran beside its preemptor to its end, and sacct recorded 0 s suspended).
    So the executor suspends a job only once ``sstat`` lists the PIDs of its batch step (slurmd
    asks the job's slurmstepd, so a user cannot fake it); until then the suspend is retried at
    every poll. Meanwhile Slurm still counts the job's CPU as taken, so the preemptor waits in
    Slurm and no CPU is shared; the market charges follow its mechanism's decisions, as always.
  - Safe order: the operations a decision asks for are buffered and carried out in
    ``arrange`` in this order: gates, suspends, resumes, ungates; so no core is freed while a
    job that must not take it is still eligible.
* **Slurm ahead of the market.** A job Slurm starts from the eligible prefix runs before the
  market's start (by the broker's reaction time: one poll, 0.2 s, plus the decision); that time
  is not charged. If it even ends before the market starts it, its exit is kept and reported
  right after the market's start, so the mechanism's sequence is kept. If the market has not
  started it ``UNSTARTED_GRACE`` s after Slurm did (a decision went another way), it is
  suspended until the market starts it. A gate that reaches Slurm after it started the job
  ("no longer pending") is left to that reconciliation.
* **Capacity follows the nodes.** At every poll, before it reads the jobs, the executor reads
  the CPUs Slurm can run on (:meth:`SlurmExecutor.usable_cpus`: ``sinfo -N %C`` of the partition,
  less the CPUs of nodes that are down, drained or failing, and the free CPUs of nodes that miss
  pings); :attr:`SlurmExecutor.capacity` is that, capped at
  the market's slots, and the broker sets it as the live engine's capacity in the batch of the
  exits of the same poll (Slurm fails a dead node's jobs when it declares the node down, so
  they end in the batch its CPUs leave in; when a job of the poll ended ``NODE_FAIL`` the nodes
  are read again after the jobs, as Slurm may have declared the node down between the reads).
  The mechanism then stops the lowest keys when fewer CPUs remain than jobs running, and starts the best waiting jobs when the node returns
  (:meth:`~marketsched.mechanisms.online.priority.PriorityScheduler.step`; docs/slurm_and_dayahead.md,
  "On a cluster"). Without this the market kept its slots and started, and charged, jobs that
  Slurm held pending for lack of CPUs.
* **A node that fails** ends its jobs ``NODE_FAIL`` when Slurm declares it down, some 17 s
  after it died; :meth:`SlurmExecutor.failure_time` gives the broker the failure time (see
  there: the earlier of the declared end less ``SlurmdTimeout`` and the first poll that saw the
  node unreachable), up to which the broker charges the job.
* **Cancel** (``kill``): ``scancel`` (also of suspended and pending jobs).
* **State** is read with ``squeue -h -o`` (9 ms; ``squeue --json`` costs 60-70 ms with 100
  jobs and ignores ``-j`` in 22.05, so it serves only :meth:`SlurmExecutor.squeue_json`), one
  call per ``poll`` seconds; the end of a job with ``scontrol -o show job`` (while Slurm keeps it,
  ``MinJobAge`` 300 s) or ``sacct --json``.
* **Accounting**: :meth:`SlurmExecutor.accounting` reads ``sacct --json`` (start, end,
  suspended and elapsed seconds, Slurm's final state); needs slurmdbd (``slurm-up.sh``'s
  default).
* **Jobs Slurm fails or kills** are reported as such: :meth:`outcome` gives the broker the final
  state ``failed`` with a note naming Slurm's state (``CANCELLED`` by someone else than the
  market, ``TIMEOUT``, ``NODE_FAIL``, ``OUT_OF_MEMORY``, ``BOOT_FAIL``, ``DEADLINE``,
  ``PREEMPTED``); ``COMPLETED`` and ``FAILED`` (the command exited non-zero) are completions
  with the command's exit code, as on the local executor.
* **Identity across a broker restart**: the broker's ``pid`` column holds the Slurm job id
  (``start_ticks`` 0), and the broker's state file ``DATA/jobs/job-ID.proc`` (outside the
  job's folder, which its user may change) records it right after ``sbatch``; :meth:`adopt`
  re-attaches a Slurm job that is still pending, running or suspended and carries the market's
  job name (``NAME_PREFIX-MARKET-ID``, so another market's or a user's job is never taken for
  it); :meth:`reap` cancels the Slurm jobs of jobs that ended in the market.

Open decisions (documented here, where they are taken)
-------------------------------------------------------
* A job the broker re-attaches that had never started (pending in Slurm) is kept as
  not-started, so its first start is still a ``start`` event with an attempt count.
* Queued jobs stay in Slurm while the broker is down; :meth:`shutdown` gates them so that none
  starts unpaid; after a crash (kill -9) an eligible one may start, and the restarted broker
  suspends it (time run while the broker was down is not charged, as on the local executor).
* At a shutdown the broker suspends every job it runs. A job whose batch script has not
  started on its node yet cannot be suspended (see "a suspend waits for the job's tasks"), so
  :meth:`shutdown` waits up to ``SHUTDOWN_WAIT`` seconds for it, retrying at every poll (the
  lag seen under load was 1.6 s). A job still not started then runs on while the broker is
  down, and the restarted broker re-attaches it as running.
* **Parallel jobs** (``market submit --cpus K``): ``sbatch -n K -c 1``, ``K`` tasks of one CPU
  each, so Slurm places them on any nodes with free CPUs (a 4-CPU job on 4 nodes x 2 CPUs may
  take two CPUs on each of two nodes; ``-c K`` would keep it on one node, as the exchange's
  contracts want). The batch script runs on the allocation's first node; the command reaches
  its other CPUs with ``srun`` (``srun -n K ...`` inside the job runs one task per CPU where
  Slurm placed them). A serial job is ``-n 1 -c 1``. The mechanism decides on whole jobs
  (:mod:`~marketsched.mechanisms.online.priority`, ``whole_jobs``): a wide job starts only when
  ``K`` CPUs are free. Decision: a queued wide job is never in the eligible prefix (it and the
  jobs after it stay gated until the market starts it), because Slurm's own choice for a wide
  job can differ from the market's (its backfill may start narrower jobs ranked below it, and
  it places by nodes); the market's start ungates it (one poll later than a serial job).
  A suspend stops every task of the job on every node (``scontrol suspend``); a resume waits
  until each of the job's nodes has idle CPUs for its tasks there (``scontrol -d show job``:
  ``Nodes=... CPU_IDs=...``).
* **Requeue instead of suspend** (jobs submitted ``--restartable``): when the mechanism resumes
  a restartable job whose own nodes lack the idle CPUs it needs, while the partition has them
  elsewhere, the job is restarted instead of waiting: ``scontrol update Requeue=1``, ``scontrol
  requeue`` (Slurm kills its processes; the job keeps its id and counts a restart), ``scontrol
  release`` (measured on Slurm 22.05: a requeued job comes back held, priority 0, with a begin
  time 10 s away), and once it is pending again ``scontrol update Priority=P StartTime=now
  Requeue=0`` (its market priority back, eligible at once, and not requeued by Slurm itself on
  a node failure, which the market reports as a failure as before). Slurm then starts it from
  the beginning on the free CPU. The broker records a ``restart`` event (:attr:`restarted`);
  the charges follow the mechanism (the job was resumed), and what it was charged before stays.
  Every job is submitted ``--no-requeue``, so Slurm never requeues one by itself.
* The partition's CPU count should equal the market's ``--slots`` (checked at start: more slots
  than CPUs is refused; the CPUs of nodes that are down count, so a broker starts while a node
  is down, with the capacity of the nodes that are up).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import select
import shutil
import subprocess
import time
import time as wallclock  # Unix time of node failures (tests replace this module's `time` by a fake clock)
from dataclasses import dataclass, field
from pathlib import Path

from marketsched.platform import jobfiles
from marketsched.platform.executor import JobFolders, RunAs, WakePipe, job_environment, read_exit_code

PRIORITY_SCALE = 1000.0
MAX_PRIORITY = 2**31 - 1  # uint32 in Slurm; 0 = held and the top values are reserved
UNSTARTED_GRACE = 2.0  # s a job may run in Slurm before the market starts it (see exits)
RESUME_GAP = 2.05  # s; slurmd delays a resume that comes less than 2 s after its suspend
SHUTDOWN_WAIT = 10.0  # s a shutdown waits for a job's tasks to start so that it can be suspended
GATE = "now+365days"
NAME_PREFIX = "ms"
ACTIVE = {"PENDING", "RUNNING", "SUSPENDED", "CONFIGURING", "COMPLETING", "REQUEUED", "RESIZING", "SIGNALING",
          "STAGE_OUT", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SPECIAL_EXIT", "STOPPED"}
USABLE_NODE_STATES = {"idle", "mix", "alloc", "mixed", "allocated", "comp", "completing", "plnd", "planned"}  # sinfo %t
COMPLETION_STATES = {"COMPLETED", "FAILED"}  # the command ran and exited (0 / non-zero)

BATCH = """#!/bin/sh
# marketsched job {key} (written by marketsched.platform.slurm)
cd {workdir} || exit 97
/bin/sh ./command.sh; c=$?
echo "$c" > exit_code.tmp && mv exit_code.tmp exit_code
exit "$c"
"""


class SlurmError(RuntimeError):
    """A Slurm command failed; the message names the command and quotes its error."""


def run(args: list[str], timeout: float = 30.0, input: str | None = None, env: dict[str, str] | None = None) -> str:
    """Run a Slurm command (``input``: its stdin, e.g. a batch script for sbatch; ``env``: its
    whole environment, None: ours); return stdout, raise :class:`SlurmError` with its stderr if
    it fails."""
    try:
        p = subprocess.run(args, capture_output=True, text=True, timeout=timeout, input=input,
                           stdin=None if input is not None else subprocess.DEVNULL, env=env)
    except FileNotFoundError:
        raise SlurmError(f"{args[0]} not found: Slurm's client commands are not installed "
                         "(run `bash scripts/slurm-up.sh`)") from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"`{' '.join(args)}` did not answer in {timeout:g} s (is slurmctld up?)") from None
    if p.returncode != 0:
        raise SlurmError(f"`{' '.join(args)}` failed (exit {p.returncode}): {p.stderr.strip() or p.stdout.strip()}")
    return p.stdout


def slurm_up() -> bool:
    """True when a Slurm controller answers and a node is usable (``sinfo``). A node whose
    jobs are all ending is usable (``comp``: for up to KillWait, 5 s, after a cancel), and so is
    an idle node the backfill scheduler has planned a job on (``plnd``); a node the controller
    cannot reach (``*`` after its state, e.g. ``idle*``) is not: Slurm starts no job on it."""
    if shutil.which("sinfo") is None:
        return False
    try:
        out = run(["sinfo", "-h", "-o", "%t"], timeout=10)
    except SlurmError:
        return False
    return any(not s.endswith("*") and s.rstrip("~#") in USABLE_NODE_STATES for s in out.split())


def priority_of(key: float) -> int:
    """Slurm priority expressing a mechanism key: ``round(key * PRIORITY_SCALE)`` in [1, MAX]."""
    p = round(float(key) * PRIORITY_SCALE)
    return int(min(max(p, 1), MAX_PRIORITY))


def parse_scontrol(line: str) -> dict[str, str]:
    """``scontrol -o show job`` output (one ``key=value`` line) as a dict. Values with spaces
    (Command=, WorkDir= of odd paths) are not needed here; a token without '=' joins the
    previous value."""
    out: dict[str, str] = {}
    last = None
    for tok in line.strip().split(" "):
        if "=" in tok:
            k, v = tok.split("=", 1)
            out[k] = v
            last = k
        elif last is not None:
            out[last] += " " + tok
    return out


@dataclass
class SlurmJob:
    """A market job as a Slurm job. ``pid`` is the Slurm job id (the broker stores it as a pid)."""

    key: int
    pid: int
    workdir: Path
    priority: int
    started: bool = False  # the market started it (launch), or re-attached it as started
    gated: bool = False
    suspended_at: float | None = None  # monotonic time of our last suspend
    start_ticks: int = 0
    tasks: int = 1  # CPUs (Slurm tasks of one CPU each) of a market job
    restartable: bool = False  # may be requeued (restarted elsewhere) instead of waiting for its node
    popen: None = None
    extra: dict = field(default_factory=dict)


class SlurmExecutor(JobFolders):
    """Runs the market's jobs as Slurm batch jobs (see the module docstring for the rules).

    ``root``: the jobs' folders (the broker passes ``DATA/jobs``); ``partition``: Slurm
    partition (default: Slurm's default); ``market_id``: a short name distinguishing this
    market's jobs (default: derived from ``root``); ``poll``: seconds between ``squeue`` calls.
    """

    def __init__(self, root: Path, partition: str | None = None, market_id: str | None = None, poll: float = 0.2,
                 slots: int | None = None):
        self.root = Path(root).resolve()
        self.root_fd = jobfiles.open_root(self.root)
        self.partition = partition
        self.market_id = market_id or hashlib.sha256(str(self.root).encode()).hexdigest()[:8]
        self.poll = float(poll)
        self.procs: dict[int, SlurmJob] = {}  # started (or re-attached as started) jobs
        self.queued: dict[int, SlurmJob] = {}  # submitted, never started
        self.outcomes: dict[int, tuple[str, str]] = {}  # key -> (final state, note) for the broker
        self._gate: set[int] = set()  # buffered operations (see "safe order")
        self._ungate: set[int] = set()
        self._suspend: set[int] = set()
        self._resume: dict[int, float] = {}  # key -> earliest monotonic time for the resume
        self._last_poll = 0.0
        self._waker = WakePipe()
        self.calls = 0  # Slurm commands issued (for benchmarks)
        self._default_partition: str | None = None
        self._slurmd_timeout: float | None = None
        self.unreachable: dict[str, float] = {}  # node -> Unix time a poll first saw it unreachable ("*")
        self.failures: dict[int, float] = {}  # key -> failure time of a job ended NODE_FAIL (failure_time)
        self.usable = self.partition_cpus()  # CPUs Slurm can run on now (re-read at every poll)
        self.cpus = self._cpu_counts()[1]  # the partition's CPUs, those of nodes down included
        self.slots = self.cpus if slots is None else int(slots)
        if slots is not None and slots > self.cpus:
            raise ValueError(f"the market has {slots} slots but Slurm partition "
                             f"{self.partition or '(default)'} has only {self.cpus} CPUs")
        self._prio: dict[int, int] = {}
        self.early: dict[int, SlurmJob] = {}  # ran and ended in Slurm before the market started them
        self.restarted: list[tuple[int, str]] = []  # (key, note) of jobs requeued, for the broker to record
        self._ready: set[int] = set()  # such jobs the market has now started: exits to report
        # Fewer market slots than Slurm CPUs: Slurm would start eligible jobs on the spare CPUs
        # at once, so no queued job is eligible; the market's starts ungate them one by one.
        self.gate_all = slots is not None and slots < self.cpus

    # ------------------------------------------------------------------ Slurm plumbing
    def _run(self, args: list[str], timeout: float = 30.0, input: str | None = None,
             env: dict[str, str] | None = None) -> str:
        self.calls += 1
        return run(args, timeout, input) if env is None else run(args, timeout, input, env)

    def partition_cpus(self) -> int:
        """CPUs of the partition's nodes that are up (``sinfo``); an error if there are none."""
        total = self.usable_cpus()
        if total < 1:
            raise SlurmError(f"Slurm partition {self.partition or '(default)'} has no usable CPU (sinfo)")
        return total

    def usable_cpus(self) -> int:
        """CPUs Slurm can run jobs on now: per node of the partition (``sinfo -N -o '%N %C %t'
        -p PARTITION``: a node is listed once per partition, so always one partition), its CPUs
        less those Slurm counts as "other" (down, drained or failing). A node the controller
        cannot reach (a ``*`` after its state: ``idle*``, ``mix*``; ``down*`` once declared down)
        offers no free CPU from the first poll that sees it so, before Slurm declares it down
        (Slurm starts nothing there): it counts only the CPUs its running jobs hold, until Slurm
        decides their fate (they end ``NODE_FAIL`` when it declares the node down, and the
        capacity drops in the batch of their ends; counting them until then keeps the mechanism
        from stopping jobs elsewhere in their place). Notes when each node was first seen
        unreachable (:attr:`unreachable`)."""
        return self._cpu_counts()[0]

    def _partition_name(self) -> str:
        """The partition the market runs on: its own, else Slurm's default (``sinfo %P`` marks
        it with ``*``); read once."""
        if self.partition:
            return self.partition
        if self._default_partition is None:
            names = self._run(["sinfo", "-h", "-o", "%P"], timeout=10).split()
            default = [x[:-1] for x in names if x.endswith("*")]
            if not default:
                raise SlurmError(f"Slurm has no default partition (sinfo %P printed {names!r}): pass a partition")
            self._default_partition = default[0]
        return self._default_partition

    def _cpu_counts(self) -> tuple[int, int]:
        """``(usable, total)`` CPUs of the partition (see :meth:`usable_cpus`)."""
        args = ["sinfo", "-h", "-N", "-o", "%N %C %t", "-p", self._partition_name()]
        out = self._run(args, timeout=10).splitlines()
        if not out:
            raise SlurmError(f"Slurm partition {self._partition_name()} not found (sinfo printed nothing)")
        nodes: dict[str, tuple[int, int]] = {}
        now = wallclock.time()
        for line in out:
            parts = line.split()
            try:
                a, i, o, t = (int(c) for c in parts[1].split("/"))
                state = parts[2]
            except (IndexError, ValueError):
                raise SlurmError(f"`{' '.join(args)}` printed {line!r}, not a node, its CPUs A/I/O/T and its state") from None
            if state.endswith("*"):  # unreachable: no free CPU; its jobs' CPUs until Slurm ends them
                self.unreachable.setdefault(parts[0], now)
                held = a if state.rstrip("*~#").rstrip("-") in USABLE_NODE_STATES else 0
                nodes[parts[0]] = (min(held, t - o), t)
            else:
                self.unreachable.pop(parts[0], None)
                nodes[parts[0]] = (t - o, t)
        return sum(u for u, _ in nodes.values()), sum(t for _, t in nodes.values())

    def slurmd_timeout(self) -> float | None:
        """Slurm's ``SlurmdTimeout`` (s; ``scontrol show config``), read once; None if unknown."""
        if self._slurmd_timeout is None:
            try:
                out = self._run(["scontrol", "show", "config"], timeout=10)
            except SlurmError:
                return None
            for line in out.splitlines():
                k, _, v = line.partition("=")
                if k.strip() == "SlurmdTimeout" and v.split() and v.split()[0].isdigit():
                    self._slurmd_timeout = float(v.split()[0])
        return self._slurmd_timeout

    def failure_time(self, key: int) -> float | None:
        """The time (Unix seconds) job ``key``'s node failed, for a job that ended
        ``NODE_FAIL``; None otherwise (the broker's hook, read when the job ends).

        Decision: Slurm records only when it *declared* the node down (the job's ``EndTime``,
        to the second), about 15 s after the node died here, never when it died: a node is
        declared down once it has not answered for ``SlurmdTimeout`` s. So it had not answered
        since ``EndTime - SlurmdTimeout`` at the latest, and the failure time is the earlier of
        that and the first poll of this executor that saw the node unreachable (``*``: a ping
        failed, so it had died). The job is charged up to there, never after; the time between
        the node's last answer and this point (a ping interval plus the ping's timeout, at most)
        cannot be told apart from the node's failure with what Slurm reports."""
        return self.failures.pop(key, None)

    @property
    def capacity(self) -> int:
        """The market's capacity now: its slots, fewer while Slurm can run on fewer CPUs (the
        broker's hook, read after every :meth:`exits`; see "Capacity follows the nodes")."""
        return min(self.slots, self.usable)

    def job_name(self, key: int | str) -> str:
        return f"{NAME_PREFIX}-{self.market_id}-{key}"

    def _sbatch(self, key: int, command: str, env: dict | None, priority: int, gated: bool,
                user: RunAs | None = None, cpus: int = 1, mem_mib: int | None = None, tasks: int = 1,
                nodelist: str | None = None) -> SlurmJob:
        wd = self.workdir(key)
        uid, gid = (user.uid, user.gid) if user is not None else (None, None)
        dfd = jobfiles.open_jobdir(self.root_fd, wd.name, create=True, uid=uid, gid=gid)
        try:
            jobfiles.replace_file(dfd, "command.sh", (command + "\n").encode(), uid, gid)
            for stale in ("exit_code", "exit_code.tmp"):
                jobfiles.unlink(dfd, stale)
        finally:
            os.close(dfd)
        args = ["sbatch", "--parsable", "-J", self.job_name(key), "-n", str(int(tasks)), "-c", str(int(cpus)), "-D", str(wd),
                "-o", str(wd / "stdout"), "-e", str(wd / "stderr"), "--open-mode=append", "--no-requeue",
                f"--priority={priority}", EXPORT] + run_as_options(user)
        if mem_mib is not None:
            args.append(f"--mem={int(mem_mib)}M")
        if gated:
            args.append(f"--begin={GATE}")
        if nodelist is not None:  # the node the market chose (DLGM: marketsched.live.dlgm_slurm)
            args += ["-w", nodelist]
        if self.partition:
            args += ["-p", self.partition]
        # the script goes on sbatch's stdin: no file anyone but the broker could change
        out = self._run(args, input=BATCH.format(key=key, workdir=shell_quote(str(wd))),
                        env=submit_environment(user, env)).strip()
        try:
            slurm_id = int(out.split(";")[0])
        except ValueError:
            raise SlurmError(f"sbatch printed {out!r}, not a job id") from None
        jobfiles.write_state(self.root, key, {"pid": slurm_id, "ticks": 0, "slurm": True})
        return SlurmJob(key, slurm_id, wd, priority, gated=gated, tasks=int(tasks))

    def check_reachable(self) -> None:
        """Slurm starts a job in its folder as the job's user: every folder above the jobs'
        folder must let other accounts through (o+x). ValueError naming the first that does not."""
        for d in [self.root, *self.root.parents]:
            if not d.stat().st_mode & 0o001:
                raise ValueError(f"folder {d} is closed to other accounts (mode {d.stat().st_mode & 0o777:o}): Slurm "
                                 f"starts each job in {self.root}/job-ID as its user, so every folder above must be "
                                 "traversable (chmod o+x), or choose a --data folder elsewhere")

    def _update(self, job: SlurmJob, **fields) -> None:
        self._run(["scontrol", "update", f"jobid={job.pid}"] + [f"{k}={v}" for k, v in fields.items()])

    # ------------------------------------------------------------------ the broker's interface
    def launch(self, key: int, command: str, env: dict | None = None, priority_key: float | None = None,
               user: RunAs | None = None, cpus: int = 1, mem_mib: int | None = None, tasks: int = 1,
               nodelist: str | None = None) -> SlurmJob:
        """The mechanism starts job ``key``: submit it eligible (or ungate its pending Slurm job).
        The broker passes the job's mechanism key as ``priority_key`` (its Slurm priority), the
        Unix account it runs as (``user``; None: the broker's own) and a parallel job's CPUs
        (``tasks``: ``-n``, one CPU each, across nodes); the exchange passes the contract's
        ``cpus`` (``--cpus-per-task``, on one node) and memory (``mem_mib``, ``--mem``; None:
        Slurm's default) for a job submitted now; DLGM passes the node it chose (``nodelist``:
        ``sbatch -w``)."""
        early = self.early.pop(key, None)
        if early is not None:  # it already ran to its end: report the exit at the next call
            early.started = True
            self.procs[key] = early
            self._ready.add(key)
            self.wake()
            return early
        job = self.queued.pop(key, None)
        if job is not None and job.suspended_at is not None:  # suspended by _unstarted_running
            self._resume[key] = 0.0
        if job is None:
            p = priority_of(priority_key) if priority_key is not None else self._prio.get(key, MAX_PRIORITY)
            job = self._sbatch(key, command, env, p, gated=False, user=user, cpus=cpus, mem_mib=mem_mib, tasks=tasks,
                               nodelist=nodelist)
        elif job.gated:
            self._gate.discard(key)
            self._ungate.add(key)
        job.started = True
        self.procs[key] = job
        return job

    def stop(self, key: int) -> bool:
        """Suspend (running) or gate (pending) job ``key``; carried out by :meth:`arrange`."""
        job = self.procs.get(key) or self.queued.get(key)
        if job is None:
            return False
        self._ungate.discard(key)
        if key in self._resume:  # a resume not yet carried out: the job is still suspended
            del self._resume[key]
            return True
        self._suspend.add(key)
        return True

    def cont(self, key: int) -> bool:
        """Resume (suspended) or ungate (pending) job ``key``; carried out by :meth:`arrange`."""
        job = self.procs.get(key) or self.queued.get(key)
        if job is None:
            return False
        if key in self._suspend:  # a suspend not yet carried out: cancel it
            self._suspend.discard(key)
            if job.suspended_at is None and not job.gated:
                return True  # running (or eligible) in Slurm: nothing to undo
        self._resume[key] = 0.0  # suspended in Slurm (e.g. re-attached so), or gated: resume / ungate
        return True

    def kill(self, key: int) -> None:
        """Cancel job ``key`` (``scancel``) and forget it."""
        job = self.procs.pop(key, None) or self.queued.pop(key, None) or self.early.pop(key, None)
        self._ready.discard(key)
        for buf in (self._gate, self._ungate, self._suspend):
            buf.discard(key)
        self._resume.pop(key, None)
        if job is None:
            return
        try:
            self._run(["scancel", str(job.pid)])
        except SlurmError:
            pass  # already gone: nothing to cancel

    def adopt(self, key: int, pid: int | None = None, start_ticks: int | None = None,
              workdir: Path | None = None) -> SlurmJob | None:
        """Re-attach job ``key``'s Slurm job after a broker restart (the one its state file
        records, else ``pid``) if it is still active and is this market's job ``key``; else None."""
        rec = self.recorded(key)
        if rec is not None:
            pid = rec[0]
        if pid is None:
            return None
        workdir = workdir or self.workdir(key)
        info = self.show(pid)
        if info is None or info.get("JobName") != self.job_name(key) or info.get("JobState") not in ACTIVE:
            return None
        job = SlurmJob(key, int(pid), Path(workdir), int(info.get("Priority", 1) or 1),
                       tasks=int(info.get("NumTasks", "1")) if info.get("NumTasks", "").isdigit() else 1)
        state = info["JobState"]
        if state == "PENDING":
            job.gated = info.get("Reason") == "BeginTime"
            if info.get("Reason") == "JobHeldAdmin" and info.get("Restarts", "0") != "0":
                # requeued by a broker that stopped before releasing it: released at the next
                # poll (its priority back, gated until the market starts it again)
                job.extra["restart"] = True
                job.gated = True
            self.queued[key] = job
        else:
            job.started = True
            if state == "SUSPENDED":
                job.suspended_at = time.monotonic()  # unknown: assume just now (2 s rule)
            self.procs[key] = job
        return job

    def recorded(self, key) -> tuple[int, int] | None:
        """``(Slurm job id, 0)`` from job ``key``'s state file, or None."""
        rec = jobfiles.read_state(self.root, key)
        return None if rec is None or rec.get("pid") is None else (int(rec["pid"]), 0)

    def forget(self, key) -> None:
        """The broker has recorded job ``key``'s end. The state file stays: it maps the job to
        its Slurm job id for :meth:`accounting` (Slurm keeps the record)."""

    def reap(self, keep) -> int:
        """Cancel the Slurm jobs of every state file whose job is not in ``keep`` (ended in the
        market, e.g. a cancel committed just before a crash); returns how many were still active."""
        keep = {str(k) for k in keep}
        n = 0
        listed = self.squeue()  # one call; only jobs Slurm still lists are looked at closer
        for key in jobfiles.recorded_keys(self.root):
            if key in keep:
                continue
            rec = jobfiles.read_state(self.root, key)
            sid = None if rec is None else rec.get("pid")
            if sid not in listed or listed[sid][0] not in ACTIVE:
                continue
            info = self.show(sid)
            if info is not None and info.get("JobName") == self.job_name(key) and info.get("JobState") in ACTIVE:
                try:
                    self._run(["scancel", str(sid)])
                    n += 1
                except SlurmError:
                    pass
        return n

    # ------------------------------------------------------------------ the market's order
    def arrange(self, queue: list[dict]) -> None:
        """The broker's hook after every decision. ``queue``: the mechanism's waiting jobs, best
        first: dicts with ``id``, ``key`` (the mechanism's priority key), ``command``, ``env``,
        ``preempted`` (it has run before), ``tasks`` (its CPUs; default 1). Submits new jobs, sets
        the eligibility gate and carries out the buffered operations in the safe order."""
        self._prio = {q["id"]: priority_of(q["key"]) for q in queue}
        prev: tuple[int, int] | None = None  # (priority, slurm id) of the last eligible job
        open_ = not self.gate_all
        for q in queue:
            k = q["id"]
            if k in self.procs:
                self.procs[k].restartable = bool(q.get("restartable", False))
            if q["preempted"] or k in self.procs or k in self.early:
                open_ = False  # nothing ranked below it may take a CPU before it
                continue
            job = self.queued.get(k)
            p = self._prio[k]
            tasks = int(q.get("tasks", 1))
            if tasks > 1:
                open_ = False  # a wide job starts through the market only (module docstring), so do those after it
            if open_:
                sid = job.pid if job is not None else 1 << 62  # a new submission gets a larger id
                if prev is not None and not (p < prev[0] or (p == prev[0] and sid > prev[1])):
                    open_ = False
            if job is None:
                job = self._sbatch(k, q["command"], q.get("env"), p, gated=not open_, user=q.get("user"), tasks=tasks)
                self.queued[k] = job
            else:
                if job.priority != p:
                    self._update(job, priority=p)
                    job.priority = p
                if open_ and job.gated:
                    self._gate.discard(k)
                    self._ungate.add(k)
                elif not open_ and not job.gated:
                    self._ungate.discard(k)
                    self._gate.add(k)
            if open_:
                prev = (p, job.pid)
        self.flush()

    def flush(self) -> None:
        """Carry out buffered operations: gates, suspends, resumes (capacity and 2 s rule
        permitting), ungates."""
        for k in sorted(self._gate):
            job = self.queued.get(k) or self.procs.get(k)
            if job is not None and not job.gated:
                self._try(job, "StartTime", GATE)
                job.gated = True
        self._gate.clear()
        self._do_suspends()
        if self._resume:
            self._do_resumes()
        for k in sorted(self._ungate):
            job = self.queued.get(k) or self.procs.get(k)
            if job is not None and job.gated:
                self._try(job, "StartTime", "now")
                job.gated = False
        self._ungate.clear()

    def _try(self, job: SlurmJob, field_: str, value: str) -> None:
        """An update that may come too late: the job has ended, or (a begin time) Slurm has
        already started it, which the next poll reconciles (:meth:`_unstarted_running`)."""
        try:
            self._update(job, **{field_: value})
        except SlurmError as exc:
            msg = str(exc)
            held = "held state" in msg.lower()  # a requeued job not yet released: gated by _restart_pending
            if not (_gone(msg) or (field_ == "StartTime" and ("no longer pending" in msg.lower() or held))):
                raise

    def _do_suspends(self) -> None:
        """The buffered suspends; a job whose tasks have not started on its node yet stays
        buffered (retried at every poll), a job still pending in Slurm is gated instead."""
        waiting = set()
        for k in sorted(self._suspend):
            job = self.procs.get(k) or self.queued.get(k)
            if job is None:
                continue
            if job.started:
                done = self._suspend_job(job)
                if done is None:
                    waiting.add(k)
                if done is not False:
                    continue
            if not job.gated:  # pending in Slurm: gate instead
                self._try(job, "StartTime", GATE)
                job.gated = True
        self._suspend = waiting

    def _tasks_started(self, job: SlurmJob) -> bool:
        """True once the job's batch step runs its tasks on the node: ``sstat`` lists their PIDs
        (slurmd asks the step's slurmstepd). Slurm says RUNNING earlier, from the allocation."""
        if job.extra.get("tasks_started"):
            return True
        try:
            out = self._run(["sstat", "-n", "-P", "-a", "-j", str(job.pid), "-o", "JobID,Pids"], timeout=10)
        except SlurmError:  # "No steps running", or slurmd too busy to answer: not yet
            return False
        for line in out.splitlines():
            step, _, pids = line.partition("|")
            if step == f"{job.pid}.batch" and any(c.isdigit() for c in pids):
                job.extra["tasks_started"] = True
                return True
        return False

    def _suspend_job(self, job: SlurmJob) -> bool | None:
        """scontrol suspend; False if the job is not running in Slurm (still pending); None if
        Slurm runs it but its tasks have not started on the node yet (a suspend now is lost)."""
        if not self._tasks_started(job):
            try:
                state = self._run(["squeue", "-h", "-j", str(job.pid), "-o", "%T"]).strip()
            except SlurmError as exc:
                if not _gone(str(exc)):
                    raise
                state = ""
            if state in ("RUNNING", "CONFIGURING"):
                return None
            if state == "PENDING":
                return False
            # suspended, completing or gone: scontrol below says which
        try:
            self._run(["scontrol", "suspend", str(job.pid)])
        except SlurmError as exc:
            msg = str(exc)
            if "pending" in msg.lower() or "not running" in msg.lower() or "Job is pending" in msg:
                return False
            if _gone(msg) or "already suspended" in msg.lower():
                return True
            raise
        job.suspended_at = time.monotonic()
        return True

    def _do_resumes(self) -> None:
        now = time.monotonic()
        running_cpus = None
        free: dict[str, int] | None = None
        for k in sorted(self._resume, key=lambda k: self._resume[k]):
            job = self.procs.get(k) or self.queued.get(k)
            if job is None:
                del self._resume[k]
                continue
            if job.suspended_at is None:  # never suspended by us: pending, ungate it
                if job.gated:
                    self._try(job, "StartTime", "now")
                    job.gated = False
                del self._resume[k]
                continue
            if now < job.suspended_at + RESUME_GAP:
                continue  # 2 s rule: retried at the next poll
            if running_cpus is None:
                running_cpus = self.running_cpus()
            if running_cpus + job.tasks > self.usable:  # Slurm would oversubscribe: wait for free CPUs
                continue
            if free is None:
                free = self.idle_cpus_per_node()
            need: dict[str, int] = {}
            if len(free) > 1:  # several nodes: the job resumes on its own nodes, which need the free CPUs
                need = self.cpus_per_node(job)
                if any(free.get(n, 0) < c for n, c in need.items()):
                    if job.restartable and sum(free.values()) >= job.tasks:
                        self._requeue(job, need)  # restarted from the beginning where CPUs are free
                        del self._resume[k]
                        running_cpus += job.tasks
                        free = None  # where Slurm puts it: read again for the next resume
                    continue
            try:
                self._run(["scontrol", "resume", str(job.pid)])
            except SlurmError as exc:
                if "not suspended" not in str(exc).lower() and not _gone(str(exc)):
                    raise
            job.suspended_at = None
            running_cpus += job.tasks
            for n, c in need.items():
                free[n] -= c
            del self._resume[k]

    def _requeue(self, job: SlurmJob, nodes: dict[str, int]) -> None:
        """Restart suspended job ``job`` from the beginning wherever Slurm has free CPUs (module
        docstring, "Requeue instead of suspend"); the release of the hold Slurm puts on it and
        its priority follow in :meth:`_restart_pending` once it is pending again."""
        try:
            self._update(job, Requeue=1)
            self._run(["scontrol", "requeue", str(job.pid)])
        except SlurmError as exc:
            if _gone(str(exc)):
                return  # it ended meanwhile: the next poll reports it
            raise
        try:
            self._run(["scontrol", "release", str(job.pid)])
        except SlurmError:
            pass  # retried with the priority once it is pending
        job.suspended_at = None
        job.extra.pop("tasks_started", None)  # a new run: a suspend waits for its tasks again
        job.extra["restart"] = True
        job.extra["restarts"] = job.extra.get("restarts", 0) + 1
        where = ",".join(sorted(nodes)) or "its node"
        self.restarted.append((job.key, f"restarted from the beginning (Slurm requeue): {where} had no idle CPU for "
                                        "it and another node had"))

    def _restart_pending(self, job: SlurmJob) -> None:
        """A requeued job is pending again: release Slurm's hold, give it its priority back and
        make it eligible now (unless the market has stopped it meanwhile: then it is gated),
        and switch Slurm's own requeue off again."""
        job.priority = self._prio.get(job.key, job.priority)  # its key when the market last queued it
        fields = {"Priority": job.priority, "Requeue": 0, "StartTime": GATE if job.gated else "now"}
        try:
            self._run(["scontrol", "release", str(job.pid)])
        except SlurmError:
            pass  # not held (released already)
        self._update(job, **fields)
        job.extra.pop("restart", None)

    def cpus_per_node(self, job: SlurmJob) -> dict[str, int]:
        """The CPUs job ``job`` holds on each of its nodes (``scontrol -d -o show job``: its
        ``Nodes=LIST CPU_IDs=IDS`` pairs; a serial job: its one node, 1). Nodes Slurm no longer
        lists for it: empty."""
        if job.tasks == 1:
            node = (self.show(job.pid) or {}).get("NodeList")
            return {node: 1} if node and node != "(null)" else {}
        try:
            out = self._run(["scontrol", "-d", "-o", "show", "job", str(job.pid)])
        except SlurmError as exc:
            if "Invalid job id" in str(exc):
                return {}
            raise
        need: dict[str, int] = {}
        for nodes, ids in re.findall(r"\bNodes=(\S+) CPU_IDs=(\S+)", out):
            for node in self._hostnames(nodes):
                need[node] = need.get(node, 0) + count_ids(ids)
        return need

    def _hostnames(self, hostlist: str) -> list[str]:
        """A Slurm host list (``node[1-2]``) as names (``scontrol show hostnames``)."""
        if "[" not in hostlist and "," not in hostlist:
            return [hostlist]
        return self._run(["scontrol", "show", "hostnames", hostlist]).split()

    def idle_cpus_per_node(self) -> dict[str, int]:
        """Idle CPUs of each node of the partition, as Slurm sees them now (``sinfo -N``, %C is
        allocated/idle/other/total; a suspended job's CPUs are idle: Slurm frees them)."""
        args = ["sinfo", "-h", "-N", "-o", "%N %C", "-p", self._partition_name()]
        free = {}
        for line in self._run(args).splitlines():
            parts = line.split()
            if len(parts) != 2 or len(parts[1].split("/")) != 4:
                raise SlurmError(f"`{' '.join(args)}` printed {line!r}, not a node and its CPU counts A/I/O/T")
            free[parts[0]] = int(parts[1].split("/")[1])
        return free

    def running_cpus(self) -> int:
        """CPUs held by running jobs in the market's partition (its own, else Slurm's default:
        :meth:`_partition_name`), as Slurm sees them now; jobs of other partitions do not take
        the partition's CPUs."""
        args = ["squeue", "-h", "-t", "R", "-o", "%C", "-p", self._partition_name()]
        return sum(int(x) for x in self._run(args).split())

    # ------------------------------------------------------------------ state
    def squeue(self) -> dict[int, tuple[str, str]]:
        """Every job Slurm lists now: ``{slurm id: (state, reason)}`` (``squeue -h -o``)."""
        out = self._run(["squeue", "-h", "-a", "-o", "%i|%T|%r"])
        jobs = {}
        for line in out.splitlines():
            parts = line.split("|")
            if len(parts) == 3 and parts[0].isdigit():
                jobs[int(parts[0])] = (parts[1], parts[2])
        return jobs

    def squeue_json(self) -> list[dict]:
        """This market's jobs from ``squeue --json`` (filtered here: 22.05 ignores ``-j``)."""
        data = json.loads(self._run(["squeue", "--json"]))
        prefix = f"{NAME_PREFIX}-{self.market_id}-"
        return [j for j in data.get("jobs", []) if str(j.get("name", "")).startswith(prefix)]

    def show(self, slurm_id: int) -> dict[str, str] | None:
        """``scontrol -o show job`` as a dict; None if Slurm no longer knows the job."""
        try:
            out = self._run(["scontrol", "-o", "show", "job", str(slurm_id)])
        except SlurmError as exc:
            if "Invalid job id" in str(exc):
                return None
            raise
        return parse_scontrol(out) if out.strip() else None

    def accounting(self, key: int | None = None, slurm_id: int | None = None) -> dict | None:
        """Slurm's accounting record of a job (``sacct --json``): ``state``, ``exit_code``,
        ``submission``, ``start``, ``end``, ``suspended``, ``elapsed`` (s); None if unknown."""
        if slurm_id is None:
            if key is None:
                raise ValueError("accounting: pass the job's key or its Slurm id")
            job = self.procs.get(key) or self.queued.get(key)
            if job is None:
                rec = self.recorded(key)
                slurm_id = None if rec is None else rec[0]
            else:
                slurm_id = job.pid
        if slurm_id is None:
            return None
        data = json.loads(self._run(["sacct", "--json", "-X", "-j", str(slurm_id)]))
        for j in data.get("jobs", []):
            if int(j.get("job_id", -1)) == int(slurm_id):
                t = j.get("time", {})
                ec = j.get("exit_code", {})
                return {"slurm_id": int(slurm_id), "name": j.get("name"), "state": j.get("state", {}).get("current"),
                        "exit_code": ec.get("return_code"), "submission": t.get("submission"),
                        "start": t.get("start"), "end": t.get("end"), "suspended": t.get("suspended"),
                        "elapsed": t.get("elapsed")}
        return None

    # ------------------------------------------------------------------ exits
    def wake(self) -> None:
        self._waker.wake()

    def wait(self, timeout: float | None) -> None:
        """Block until the next poll is due, :meth:`wake` is called, or ``timeout``."""
        due = max(0.0, self._last_poll + self.poll - time.monotonic())
        t = due if timeout is None else min(timeout, due)
        if self._resume or self._suspend:
            t = min(t, self.poll)
        if self._ready:
            t = 0.0
        r, _, _ = select.select([self._waker.r], [], [], t)
        if r:
            self._waker.drain()

    def exits(self) -> list[tuple[int, int | None]]:
        """Jobs that ended since the last call: ``(key, exit_code)``; :meth:`outcome` says how.

        Also retries deferred resumes. Polls Slurm at most every ``poll`` seconds."""
        out = []
        for key in sorted(self._ready):  # ran to its end before the market started it (below)
            job = self.procs.pop(key, None)
            if job is not None:
                code, state, note = job.extra["ended"]
                self.outcomes[key] = (state, note)
                out.append((key, code))
        self._ready.clear()
        now = time.monotonic()
        if now < self._last_poll + self.poll:
            return out
        self._last_poll = now
        if self._suspend:
            self._do_suspends()
        if self._resume:
            self._do_resumes()
        # the nodes before the jobs: Slurm fails a dead node's jobs when it declares the node
        # down, so a capacity drop seen here comes with those exits in the same poll
        try:
            self.usable = self.usable_cpus()
        except SlurmError:
            pass  # controller unreachable: keep the last figure (the job poll below fails too)
        tracked = {**self.queued, **self.procs}
        if not tracked:
            return out
        listed = self.squeue()
        node_failed = False
        for key, job in sorted(tracked.items()):
            st = listed.get(job.pid)
            if st is not None and st[0] in ACTIVE:
                if key in self.queued and st[0] == "RUNNING":
                    self._unstarted_running(job, now)
                elif job.extra.get("restart") and st[0] == "PENDING":
                    self._restart_pending(job)
                continue
            code, state, note = self._ending(job, st)
            self._resume.pop(key, None)
            if key in self.queued and (state == "completed" or "seen_running" in job.extra):
                # Slurm started it on a CPU the market was about to give it (eligible prefix)
                # and it ended before the market's start: kept until the mechanism starts it,
                # then reported at once (see launch); the mechanism's order is kept.
                self.queued.pop(key)
                job.extra["ended"] = (code, state, note)
                self.early[key] = job
                continue
            self.procs.pop(key, None)
            self.queued.pop(key, None)
            self.outcomes[key] = (state, note)
            out.append((key, code))
            node_failed = node_failed or note.startswith("slurm: NODE_FAIL")
        if node_failed:
            # Slurm may have declared the node down between the two reads (sinfo still showed
            # it unreachable with its jobs' CPUs): read the nodes again, so that the CPUs leave
            # in the batch of their jobs' ends
            try:
                self.usable = self.usable_cpus()
            except SlurmError:
                pass
        return out

    def _unstarted_running(self, job: SlurmJob, now: float) -> None:
        """A job Slurm runs that the market has not started. Normal for a moment (Slurm gives a
        freed CPU to the best eligible job before the broker notices the exit); if the market
        still has not started it after ``UNSTARTED_GRACE`` s (a decision went another way), it
        is suspended, and resumed when the market starts it."""
        seen = job.extra.setdefault("seen_running", now)
        if now - seen >= UNSTARTED_GRACE and job.suspended_at is None:
            if self._suspend_job(job):
                job.extra["reconciled"] = job.extra.get("reconciled", 0) + 1

    def _ending(self, job: SlurmJob, listed) -> tuple[int | None, str, str]:
        """Exit code, final market state and note of a job Slurm no longer runs."""
        info = self.show(job.pid)
        slurm_state = info.get("JobState") if info else (listed[0] if listed else None)
        reason = info.get("Reason", "") if info else ""
        if slurm_state is None:
            acct = None
            try:
                acct = self.accounting(slurm_id=job.pid)
            except SlurmError:
                pass
            slurm_state = acct["state"] if acct else None
        code = read_exit_code(job.workdir)
        if code is None and info is not None and ":" in info.get("ExitCode", ""):
            rc, sig = info["ExitCode"].split(":", 1)
            code = int(rc) if sig == "0" else -int(sig)
        if slurm_state in COMPLETION_STATES:
            return code, "completed", "" if slurm_state == "COMPLETED" else "slurm: FAILED (non-zero exit)"
        if slurm_state == "NODE_FAIL" and info is not None:
            self._node_failed(job.key, info)
        what = slurm_state or "unknown to Slurm"
        note = f"slurm: {what}" + (f" ({reason})" if reason and reason != "None" else "")
        return code, "failed", note

    def _node_failed(self, key: int, info: dict[str, str]) -> None:
        """Note the failure time of job ``key`` that ended ``NODE_FAIL`` (see :meth:`failure_time`)."""
        times = []
        seen = self.unreachable.get(info.get("NodeList", ""))
        if seen is not None:
            times.append(seen)
        timeout = self.slurmd_timeout()
        try:
            declared = wallclock.mktime(wallclock.strptime(info.get("EndTime", ""), "%Y-%m-%dT%H:%M:%S"))
        except ValueError:
            declared = None
        if declared is not None and timeout is not None:
            times.append(declared - timeout)
        if times:
            self.failures[key] = min(times)

    def outcome(self, key: int) -> tuple[str, str]:
        """The broker's hook when job ``key`` ended: ``(final state, note)`` (see the module
        docstring); ``("completed", "")`` when the executor knows nothing more."""
        return self.outcomes.pop(key, ("completed", ""))

    def shutdown(self, kill: bool = False) -> None:
        """Stop (with ``kill``: cancel every job). Otherwise buffered operations are carried out
        and pending jobs gated, so nothing starts while the market is down; a suspend waiting
        for a job's tasks to start is retried at every poll for up to ``SHUTDOWN_WAIT`` s."""
        if kill:
            for key in list(self.procs) + list(self.queued):
                self.kill(key)
        else:
            self._resume.clear()  # the broker suspended everything it ran: no resume now
            for k, job in self.queued.items():
                if not job.gated:
                    self._gate.add(k)
            self.flush()
            end = time.monotonic() + SHUTDOWN_WAIT
            while self._suspend and time.monotonic() < end:
                time.sleep(self.poll)
                self._do_suspends()
        self._waker.close()
        os.close(self.root_fd)


EXPORT = "--export=ALL"  # with submit_environment: the job's environment, and no login shell


def submit_environment(user: RunAs | None, env: dict | None) -> dict[str, str]:
    """The whole environment sbatch runs in, which ``--export=ALL`` passes to the job as it is:
    exactly :func:`~marketsched.platform.executor.job_environment` (a documented minimal
    ``PATH``, the account's ``HOME``, ``USER``, ``LOGNAME``, ``SHELL=/bin/sh``, ``LANG`` and the
    market's variables; never the broker's), plus ``SLURM_CONF`` when the broker has it (sbatch
    needs it to find the cluster); Slurm adds its own ``SLURM_*`` variables.

    Why not ``--export=PATH=...,HOME=...`` (or ``NONE``): sbatch then sets ``SLURM_GET_USER_ENV``
    (Slurm 22.05, ``sbatch.c``), and slurmd loads the account's login environment for every job
    with ``su - ACCOUNT -c env`` before the job starts: a login shell that reads the account's
    ``.profile`` (for root, e.g. ``pyenv rehash``; one killed there left a stale lock that made
    every later job start wait 60 s), and whose variables the job then inherits."""
    items = job_environment(user, env)
    bad = [k for k in items if not k or "=" in k or "\0" in k or "\0" in items[k]]
    if bad:
        raise SlurmError(f"environment variable(s) {bad} cannot be passed to a Slurm job")
    if os.environ.get("SLURM_CONF"):
        items["SLURM_CONF"] = os.environ["SLURM_CONF"]
    return items


def run_as_options(user: RunAs | None) -> list[str]:
    """``sbatch --uid --gid`` for a job of ``user`` (root submits as the user; Slurm then runs
    the job, its steps and its files as that account); [] for the broker's own account."""
    return [] if user is None else [f"--uid={user.uid}", f"--gid={user.gid}"]


def count_ids(ids: str) -> int:
    """How many ids a Slurm id list names (``0-1,3`` -> 3)."""
    n = 0
    for part in ids.split(","):
        lo, _, hi = part.partition("-")
        n += int(hi) - int(lo) + 1 if hi else 1
    return n


def _gone(msg: str) -> bool:
    """Slurm's answer says the job has ended (or is unknown): nothing left to do to it."""
    m = msg.lower()
    return "already complet" in m or "already finished" in m or "invalid job id" in m


def shell_quote(s: str) -> str:
    """``s`` quoted for a POSIX shell (single quotes; an inner quote closed, escaped, reopened)."""
    return "'" + s.replace("'", "'\"'\"'") + "'"
