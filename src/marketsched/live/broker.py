"""The broker: a running MOSIX-style market on this machine (the market of Shudler et al. 2010, for real).

It joins four parts, all driven under one lock:

* the **mechanism**: a :class:`~marketsched.mechanisms.online.priority.PriorityScheduler` with a
  payment scheme, the very objects the simulator uses, inside a
  :class:`~marketsched.platform.engine.LiveEngine` on wall-clock time (HB with k-th price by
  default; NPHB, WSEPT (and WSPT, see below) and first price selectable);
* the **executor** (:class:`~marketsched.platform.executor.LocalExecutor`): ``slots`` jobs run at
  once, each as its owner's Unix account in its own cgroup; the engine's start / preempt
  decisions become launch or thaw / freeze;
* the **ledger** (:class:`~marketsched.platform.ledger.Store`): users, deposits, per-second charges
  as double entries, jobs, events and the price history;
* a **market thread** that waits for process exits (pidfds), charges running jobs every
  ``charge_interval`` seconds and suspends users who run out of money.

Rules of the live market (decisions; the paper's market assumes budgets, not these mechanics)
--------------------------------------------------------------------------------------------
* **Charging.** A job pays, per second of running time, the price its payment scheme sets
  (Shudler et al. 2010, Algorithm 1 steps 2 and 5, as implemented in
  :mod:`~marketsched.mechanisms.online.pricing`). The broker reads each running job's accrued
  payment (``accrued``) every ``charge_interval`` seconds (default 1 s) and posts what was not
  yet posted, rounded to a micro-unit, as an entry ``user:NAME -> provider:revenue``; a job's
  final amount is posted when it stops. So the ledger equals the mechanism's payments (to a
  micro-unit) except for the unposted part at a crash (at most one interval's worth: lost to the
  provider, never charged twice).
* **Admission.** A submission is accepted only if the owner's balance, less what their running
  jobs have accrued and not yet posted, covers ``admission_seconds`` (default 1) seconds at the
  highest price the job can ever pay, ``max(bid, reservation price 1)`` (under both payment
  schemes a job pays at most its bid, or the reservation price 1 when the market is not full).
  Otherwise the submission is refused with HTTP 402 and nothing is stored.
* **Running out of money.** Prices are constant between events, so the broker knows when a
  user's balance will reach 0 at the current prices, and wakes up then. At that moment it posts
  what is due (up to the balance: the balance never goes negative; a shortfall, at most the
  owner's price times the broker's reaction time, is recorded on the job as ``unpaid`` and not
  charged), and *holds* all the user's active jobs: they leave the mechanism (running ones are
  frozen, exactly as when preempted) and wait in state ``held``. A later deposit
  re-enters held jobs (new arrivals at that time, so they queue behind equal bids submitted
  while they were held) as long as each passes the admission rule.
* **Changing a bid.** A user changes the bid of an active job (``rebid``; Shudler et al. (2010) have no
  such event): the job keeps its place in submission order (ties), a running job pays its old
  price up to now and the new one from now, and the mechanism decides at once (HB may preempt
  either way). Raising a bid passes the admission rule again at the new bid (402 otherwise,
  nothing changed); lowering one always succeeds. A held job keeps the new bid for when it
  re-enters.
* **Cancel.** A user cancels their own jobs (the administrator any job); every process of the
  job is killed once the cancel is committed; what the job accrued until then is charged.
* **Users are Unix users.** In multi-user mode (``MarketConfig.single_user`` False; the default
  when the broker runs as root) a job runs as the Unix account its owner is mapped to
  (``users.unix_user``, set by the administrator; :meth:`Broker.add_user` ``unix``); a
  submission of a user with none is refused (403), and so is a launch whose account has
  disappeared (the job fails). In single-user mode (the default otherwise) every job runs as the
  broker's own account: no isolation between market users.
* **Exactly once.** Effects on processes follow the commit of the decision that asks for them
  (:meth:`Broker._transaction`): a job's process is launched only once its start is committed,
  killed only once its end is; exits found in one scan end in one batch of the mechanism (one
  batch per exit let the first exit resume a preempted job whose own exit came later in the same
  scan, which was then launched a second time). Run time is recorded with every charge.
* **Parallel jobs.** A job asks for ``K`` CPUs (``procs``, ``market submit --cpus K``; default 1),
  from 1 to the market's slots (HTTP 400 otherwise). Shudler et al. (2010) split parallel jobs
  into serial ones; a live job cannot be split, so the mechanism decides on whole jobs
  (:class:`~marketsched.mechanisms.online.priority.PriorityScheduler` with ``whole_jobs``, the
  same object the simulator runs on parallel workloads): the list order is kept strictly, a job
  runs only with all its ``K`` CPUs, and one that does not fit waits, as do the jobs after it.
  It pays per CPU: ``K`` times its price per second (``K`` serial jobs at that price would pay as
  much), and the admission rule asks for ``K`` times the amount. On Slurm the job's ``K`` tasks
  may span nodes (:mod:`~marketsched.platform.slurm`); on the local executor its CPU limit is
  ``K`` times the per-job limit (the privileged launcher, whose limits are fixed, takes serial
  jobs only).
* **Restartable jobs** (``submit --restartable``; Slurm executor): a preempted job that the
  mechanism resumes while its own node is full and another node has a free CPU is restarted
  from the beginning there (``scontrol requeue``) instead of waiting for its node; without the
  flag it waits. Decision: what it was charged before the restart stays charged (it ran, and
  the market gave it those CPUs; a user who declares a job restartable accepts losing its work),
  and the market charges it from the mechanism's resume as for any resume, also while Slurm
  starts it again; its run time keeps counting from there (the recorded run is the mechanism's,
  so the replay still equals the ledger). The job's events say ``restart`` with the reason.
* **WSPT** keys jobs by ``bid / actual run time``, which a live market cannot know at
  submission: here ``wspt`` uses the submitted run-time estimate in its place, which is WSEPT;
  both ask every job for an estimate.
* **Restart.** State lives in the database. A new broker reloads it and reconciles each job by
  its id with what the executor started for it (its state file, else the database's pid): a
  process that still runs (same pid and start time) is re-attached (all are frozen first, then
  the mechanism decides afresh, the jobs that were running entering first so a non-preemptive
  rule keeps them); a job whose process ended while the broker was down is completed with the
  exit code its wrapper wrote; the others (never launched, or gone without an exit code) are
  requeued and run from the start; processes still running for jobs that have ended are killed.
  Time the broker was down is neither charged nor counted as run time.
"""

from __future__ import annotations

import json
import math
import os
import pwd
import secrets
import shlex
import threading
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from marketsched.mechanisms.online.pricing import RESERVATION_PRICE
from marketsched.mechanisms.online.priority import PriorityScheduler, priority_key
from marketsched.platform import validation
from marketsched.platform.clock import WallClock
from marketsched.platform.engine import LiveEngine
from marketsched.platform.executor import JobLimits, LocalExecutor, RunAs, warn
from marketsched.platform.files import data_folder, tighten, write_private
from marketsched.platform.jobfiles import JobFileError
from marketsched.platform.ledger import (
    ACTIVE_STATES,
    DEPOSITS,
    FINAL_STATES,
    MAX_BALANCE,
    MICRO,
    REVENUE,
    Store,
    user_account,
)
from marketsched.platform.rounds import start_rounds
from marketsched.platform.statement import signed_entries
from marketsched.platform.tokens import hash_token, page_key_id
from marketsched.platform.validation import MarketError, show, to_micro

if TYPE_CHECKING:
    from marketsched.live.dayahead import DayAhead
    from marketsched.live.dlgm_service import DLGMService
    from marketsched.live.ees_service import EESService

LIVE_RULES = ("hb", "nphb", "wsept", "wspt")
LIVE_PRICINGS = ("kth", "first")
EXECUTORS = ("local", "slurm")

# Bounds of the numbers a user gives besides those of marketsched.platform.validation.
MIN_ESTIMATE, MAX_ESTIMATE = 1e-3, 1e9  # seconds (WSEPT divides by it)
LIST_COMMAND_CHARS = 240  # list views show at most this much of a command (the job's own view: all)
JOB_EVENTS = 200  # a job's view shows its newest events, at most this many


@dataclass
class MarketConfig:
    slots: int = 2
    mechanism: str = "hb"
    pricing: str = "kth"
    charge_interval: float = 1.0
    admission_seconds: float = 1.0
    sync: str = "full"  # SQLite: "full" (fsync per commit) or "normal" (see marketsched.platform.ledger)
    executor: str = "local"  # "local" (this machine, cgroups) or "slurm" (marketsched.platform.slurm)
    partition: str | None = None  # Slurm partition for the "slurm" executor (None: Slurm's default)
    # Whose Unix account runs a job (see "Users are Unix users" in the module docstring):
    # False = each job as its owner's mapped Unix account (needs root); True = every job as the
    # broker's own account (one person, a demo); None = True unless the broker runs as root.
    single_user: bool | None = None
    # True: jobs are started, frozen and killed by a separate privileged launcher process
    # (marketsched.platform.launcherd), so the broker itself needs no root (serve --service-user)
    launcher: bool = False
    job_cpus: float = 1.0  # CPU limit per job (CPUs' worth of time; 0: no limit)
    job_memory: int | None = None  # memory limit per job in bytes (None: the machine's memory / slots; 0: no limit)
    job_processes: int = 512  # tasks (processes and threads) per job at once (0: no limit)
    max_jobs_per_user: int = 100  # active (queued, running, preempted, held) jobs one user may have: 429 beyond
    max_command_bytes: int = 65536  # a job's command line, UTF-8: 413 beyond
    # commands of one user's ended jobs kept whole, bytes in all: older ones keep their digests
    kept_command_bytes: int = 16 << 20

    def check(self) -> None:
        if self.mechanism not in LIVE_RULES:
            raise ValueError(f"unknown mechanism {self.mechanism!r}; choose one of {', '.join(LIVE_RULES)}")
        if self.pricing not in LIVE_PRICINGS:
            raise ValueError(f"unknown pricing {self.pricing!r}; choose one of {', '.join(LIVE_PRICINGS)}")
        if isinstance(self.slots, bool) or not isinstance(self.slots, int) or not 1 <= self.slots <= 10_000:
            raise ValueError(f"slots must be a whole number from 1 to 10000, got {self.slots!r}")
        if not 0 < self.charge_interval <= 3600:
            raise ValueError(f"charge interval must be positive and at most 3600 s, got {self.charge_interval!r}")
        if not 0 <= self.admission_seconds <= 1e6:
            raise ValueError(f"admission seconds must be from 0 to 1e6, got {self.admission_seconds!r}")
        for name, hi in (("max_jobs_per_user", 10**6), ("max_command_bytes", 1 << 20), ("kept_command_bytes", 1 << 40)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= hi:
                raise ValueError(f"{name} must be a whole number from 1 to {hi}, got {v!r}")
        if self.sync not in ("full", "normal"):
            raise ValueError(f"sync must be 'full' or 'normal', got {self.sync!r}")
        if self.executor not in EXECUTORS:
            raise ValueError(f"unknown executor {self.executor!r}; choose one of {', '.join(EXECUTORS)}")
        if not (isinstance(self.job_cpus, (int, float)) and math.isfinite(self.job_cpus) and self.job_cpus >= 0):
            raise ValueError(f"job CPU limit must be a number of CPUs >= 0 (0: no limit), got {self.job_cpus!r}")
        if self.job_memory is not None and (int(self.job_memory) != self.job_memory or self.job_memory < 0):
            raise ValueError(f"job memory limit must be a whole number of bytes >= 0 (0: no limit), got {self.job_memory!r}")
        if isinstance(self.job_processes, bool) or not isinstance(self.job_processes, int) \
                or not 0 <= self.job_processes <= 4_194_304:
            raise ValueError("job process limit must be a whole number from 0 to 4194304 (0: no limit), "
                             f"got {self.job_processes!r}")
        if self.launcher and (self.single_user or self.executor != "local"):
            raise ValueError("the privileged launcher starts local jobs as their owners' accounts: it needs "
                             "multi-user mode and the local executor")
        if self.single_user is False and os.geteuid() != 0 and not self.launcher:
            raise ValueError("a multi-user market starts each job as its owner's Unix account, which needs root; "
                             "run the broker as root, or use single-user mode (every job as your own account)")

    def resolved_single_user(self) -> bool:
        """Single-user mode unless asked otherwise or the broker runs as root."""
        return self.single_user if self.single_user is not None else os.geteuid() != 0 and not self.launcher

    def limits(self) -> JobLimits:
        """Per-job limits for the executor (default memory: the machine's memory / slots)."""
        memory = self.job_memory
        if memory is None:
            memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // self.slots
        return JobLimits(cpus=self.job_cpus or None, memory=memory or None, processes=self.job_processes or None)


@dataclass
class Active:
    """In-memory state of a job that has not ended (mirrors its database row)."""

    id: int
    owner: str
    bid: float
    estimate: float | None
    command: str
    state: str
    row: int | None = None  # the job's row in the engine while it is in the mechanism
    row_posted: int = 0  # micro-units posted from the current row's payment
    charged: int = 0
    unpaid: int = 0
    preemptions: int = 0
    attempts: int = 0
    first_start: float | None = None
    run_seconds: float = 0.0
    run_since: float | None = None
    pid: int | None = None
    start_ticks: int | None = None
    procs: int = 1  # CPUs the job asks for (it runs with all of them at once)
    restartable: bool = False  # may restart from the beginning elsewhere (the Slurm executor's requeue)
    extra: dict = field(default_factory=dict)

    @property
    def engine_row(self) -> int:
        """``row``, for a job known to be in the mechanism (an error otherwise)."""
        if self.row is None:
            raise RuntimeError(f"job {self.id} is not in the mechanism")
        return self.row


class Broker:
    """The market. Thread-safe: every public method takes the broker's lock.

    ``data`` is the market's folder (database unless ``db_url`` is given, jobs' working
    folders, the administrator's token file). ``clock`` returns market seconds (default: wall
    time since the epoch stored in the database).
    """

    def __init__(self, data, config: MarketConfig | None = None, db_url: str | None = None, clock=None,
                 executor=None):
        self.config = config or MarketConfig()
        self.config.check()
        self.single_user = self.config.resolved_single_user()
        if self.single_user and os.geteuid() == 0:
            warn("single-user mode as root: every job runs as root with no isolation between market users; "
                 "map market users to Unix accounts and drop --single-user (docs/live_market.md)")
        # effects carried out once the transaction that decided them has committed (launches,
        # kills, state files dropped): see _transaction
        self._deferred: list = []
        self._launched: list = []  # (job id, t, pid, start ticks) not yet in the database
        self._depth = 0
        self._draining = False
        self.unix: dict[str, str | None] = {}  # market user -> Unix account (None: not mapped)
        self._accounts: dict[str, RunAs] = {}  # Unix account -> its last lookup
        self.data = data_folder(data)  # 0711, its files 0600: see marketsched.platform.files
        tighten(self.data / "admin.token")
        self.store = Store(db_url or self.data, sync=self.config.sync)
        self.lock = threading.RLock()
        epoch = self.store.get_meta("epoch")
        if epoch is None:
            epoch = time.time()
            self.store.set_meta("epoch", repr(epoch))
        self.epoch = float(epoch)
        self.store.set_meta("config", repr(self.config))
        # Market time moves only at the start of an operation (under the lock), so all events
        # of one operation (a submission, a batch of exits, a charging tick) share one
        # timestamp, in the engine and in the database alike.
        self.wall = clock or WallClock(self.epoch)
        self._t = float(self.wall())
        # The executor carries the mechanism's decisions out: local cgroups by default,
        # Slurm jobs with config.executor == "slurm" (marketsched.platform.slurm), or any object with
        # the same interface passed in. Optional hooks: ``arrange(queue)`` after every decision
        # (the mechanism's waiting jobs, best first) and ``outcome(job_id)`` -> (final state,
        # note) when a job ends (e.g. "failed" for a job Slurm killed).
        if executor is None and self.config.launcher and db_url is not None:
            raise ValueError("the privileged launcher reads the market's users from its SQLite database: "
                             "it does not work with --db")
        self.executor = executor if executor is not None else make_executor(self.config, self.data / "jobs")
        self._arrange = getattr(self.executor, "arrange", None)
        check = getattr(self.executor, "check_reachable", None)
        if check is not None and not self.single_user:
            check()  # Slurm enters each job's folder as the job's user
        self.dayahead: DayAhead | None = None  # a marketsched.live.dayahead.DayAhead attached by `market serve --dayahead`
        self.dlgm: DLGMService | None = None  # marketsched.live.dlgm_service, `market serve --mechanism dlgm|pdlgm`
        self.ees: EESService | None = None  # marketsched.live.ees_service, `market serve --mechanism ees|relaxed-ees`
        rule = self.config.mechanism
        self.rule = "wsept" if rule == "wspt" else rule
        self.mechanism = PriorityScheduler([], [], [], preemptive=(rule == "hb"), pricing=self.config.pricing,
                                           name=rule, whole_jobs=True)
        self.engine = LiveEngine(self.mechanism, self.config.slots, lambda: self._t)
        self.active: dict[int, Active] = {}  # jobs not yet ended, by id
        self.active_by_user: Counter = Counter()  # user -> how many of self.active are theirs
        self.kept_bytes: Counter = Counter(self.store.kept_command_bytes())  # user -> bytes of ended jobs' commands
        self._users = _UserIndex.of(self.store)  # who is who, for authentication without the lock
        self.running_jobs: set[int] = set()  # ids of the jobs running now
        self.row_job: list[int] = []  # engine row -> job id
        self.balance: dict[str, int] = {}  # user -> micro-units (mirrors the ledger)
        self._short: set[str] = set()  # users who could not pay a posting: to be held
        self.admin_token: str | None = None
        self.last_error: str | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._next_charge = float(self.wall()) + self.config.charge_interval  # (re)set by start()
        self._last_price: tuple[float, int, int] | None = None
        with self.lock, self._transaction():
            self._now()
            capacity = self._capacity()  # a node down at the start: the mechanism decides with the nodes up
            if capacity is not None:
                self.engine.batch(capacity=capacity)
            self._recover()

    @contextmanager
    def _transaction(self):
        """A database transaction (nested ones join the outer one) after whose COMMIT the
        effects it deferred (:meth:`_defer`) are carried out, in order; a rollback drops them.
        So a job's process is started only once the row saying it runs is committed, and
        killed only once its end is committed (a crash in between leaves a running job the
        restarted broker re-attaches, or an ended job whose process it kills: never a process
        the database does not know, nor a cancelled job started again)."""
        self._depth += 1
        try:
            with self.store.transaction():
                if self._depth == 1:
                    self._record_launches()
                yield
        except BaseException:
            if self._depth == 1:
                self._deferred.clear()
            raise
        finally:
            self._depth -= 1
        if self._depth == 0 and not self._draining:
            self._draining = True
            try:
                while self._deferred:
                    self._deferred.pop(0)()
            finally:
                self._draining = False

    def _defer(self, fn) -> None:
        """Run ``fn`` once the current transaction commits (at once outside a transaction)."""
        if self._depth:
            self._deferred.append(fn)
        else:
            fn()

    def _now(self) -> float:
        """Move market time to the wall clock (never back) and integrate prices up to it."""
        self._t = max(self._t, float(self.wall()))
        self.engine._tick()
        return self._t

    # ================================================================== lifecycle
    def start(self) -> Broker:
        """Start the market thread (process exits, charging, running out of money)."""
        self._next_charge = self._t + self.config.charge_interval
        self._thread = start_rounds(self, "market", self._wait, self.step)
        return self

    def stop(self, kill_jobs: bool = False) -> None:
        """Stop the market. With ``kill_jobs``, every job is killed (all its processes) and the job
        cancelled; else charges are posted and running jobs frozen (nothing runs
        unpaid while the market is down), for the next broker to re-attach. A second call does
        nothing."""
        if self._stopping:
            return
        self._stopping = True
        if self.dayahead is not None:
            self.dayahead.stop()
        if self.dlgm is not None:
            self.dlgm.stop(kill=kill_jobs)
        if self.ees is not None:
            self.ees.stop(kill=kill_jobs)
        self.executor.wake()
        if self._thread is not None:
            self._thread.join(timeout=10)
        with self.lock:
            self._now()
            with self._transaction():
                if kill_jobs:
                    for job in sorted(self.active.values(), key=lambda j: j.id):
                        if job.id in self.active:
                            self._cancel(job, "market shut down")
                else:
                    self._post_all()
                    for job_id in self.running_jobs:
                        self.executor.stop(job_id)
            self.executor.shutdown(kill=kill_jobs)
            self.store.close()

    def ensure_admin(self) -> str | None:
        """Create the administrator on first start; returns the new token (None if one exists).
        The token is also written to ``DATA/admin.token`` (mode 0600)."""
        with self.lock:
            if any(admin for _, admin in self.store.users()):
                return None
            token = secrets.token_urlsafe(32)
            self.store.add_user("admin", hash_token(token), True, self._now())
            write_private(self.data / "admin.token", token + "\n")
            self._users = _UserIndex.of(self.store)
            self.admin_token = token
            return token

    # ================================================================== accounts
    def authenticate(self, token: str | None) -> tuple[str, bool]:
        """``(user name, is_admin)`` for a token; MarketError 401 if missing or wrong."""
        if not token:
            raise MarketError("no token: send the header 'Authorization: Bearer TOKEN'", 401)
        found = self._users.by_hash.get(hash_token(token))
        if found is None:
            raise MarketError("wrong token: no user has this token", 401)
        return found

    def authenticate_unix(self, uid: int) -> tuple[str, bool]:
        """``(user name, is_admin)`` for a caller on the Unix socket with user id ``uid`` (from
        the kernel: SO_PEERCRED). Root and the broker's own account are the administrator; any
        other account is the market user linked to it (``user add NAME --unix ACCOUNT``)."""
        users = self._users
        if uid == 0 or uid == os.geteuid():
            if users.admin is None:
                raise MarketError("the market has no administrator yet", 401)
            return users.admin, True
        try:
            unix = pwd.getpwuid(uid).pw_name
        except KeyError:
            raise MarketError(f"uid {uid} has no Unix account name on this machine", 401) from None
        found = users.by_unix.get(unix)
        if found is None:
            raise MarketError(f"Unix user {unix!r} (uid {uid}) has no market account: the administrator links one "
                              f"with `marketsched market user add NAME --unix {unix}`", 401)
        return found

    def page_user(self, key_id: str) -> tuple[str, bool, str] | None:
        """``(user, is_admin, token hash)`` of the user whose web-page key id is ``key_id``
        (:func:`page_key_id`), or None."""
        return self._users.by_kid.get(key_id)

    def add_user(self, admin: bool, name, deposit=0.0, unix=None) -> dict:
        """Create a user with an initial deposit, mapped to Unix account ``unix`` (their jobs
        run as it, see the module docstring; on the Unix socket that account's processes act as
        this user); returns ``{"name", "token", "balance", "unix"}``."""
        if not admin:
            raise MarketError("only the administrator creates users", 403)
        if not isinstance(name, str) or not name or len(name) > 64 or not set(name) <= validation.NAME_CHARS:
            raise MarketError(f"user name must be 1-64 letters, digits, '_', '.' or '-', got {show(name)}")
        amount = validation.amount(deposit, "deposit", allow_zero=True)
        if unix is not None:
            validation.unix_account(unix)
        with self.lock:
            if name in dict(self.store.users()):
                raise MarketError(f"user {name!r} already exists", 409)
            taken = None if unix is None else self.store.user_by_unix(unix)
            if taken is not None:
                raise MarketError(f"Unix account {unix!r} is already mapped to user {taken!r}", 409)
            token = secrets.token_urlsafe(32)
            t = self._now()
            with self._transaction():
                self._check_deposit_total(amount)
                self.store.add_user(name, hash_token(token), False, t, unix_user=unix)
                self.unix[name] = unix
                self.balance[name] = 0
                if amount:
                    self._deposit(name, amount)
            self._users = _UserIndex.of(self.store)
            return {"name": name, "token": token, "balance": self.balance[name] / MICRO, "unix": unix}

    def new_token(self, user: str, admin: bool, name) -> dict:
        """Issue user ``name`` a new token (the administrator for anyone, a user for themselves);
        the old one stops working at once, over HTTP and for the web page's signed reads (the
        Unix socket needs none). The administrator's new token also replaces ``admin.token``.
        Returns ``{"name", "token"}``."""
        if not (admin or name == user):
            raise MarketError("only the administrator issues tokens for other users", 403)
        with self.lock:
            if not isinstance(name, str) or name not in dict(self.store.users()):
                raise MarketError(f"unknown user {show(name)}", 404)
            token = secrets.token_urlsafe(32)
            with self._transaction():
                self.store.set_token_hash(name, hash_token(token))
            if name == self._users.admin:
                write_private(self.data / "admin.token", token + "\n")
                self.admin_token = token
            self._users = _UserIndex.of(self.store)
            return {"name": name, "token": token}

    def deposit(self, admin: bool, name, amount) -> dict:
        """Add money to a user's account; their held jobs re-enter the market if they can pay."""
        if not admin:
            raise MarketError("only the administrator makes deposits", 403)
        micros = validation.amount(amount, "deposit")
        with self.lock:
            if name not in self.balance:
                raise MarketError(f"unknown user {show(name)}", 404)
            self._now()
            with self._transaction():
                self._check_deposit_total(micros)
                self._deposit(name, micros)
                self._release(name)
                self._after()
            return {"name": name, "balance": self.balance[name] / MICRO}

    def _check_deposit_total(self, micros: int) -> None:
        """Refuse a deposit that would take the total deposited past the ledger's bound (every
        balance is at most the total, so none can overflow)."""
        total = -self.store.balance(DEPOSITS)
        if total + micros > MAX_BALANCE:
            raise MarketError(f"a deposit of {micros / MICRO:g} would take the market's total deposits past "
                              f"{MAX_BALANCE / MICRO:.0e}, the most its ledger holds exactly "
                              f"(now {total / MICRO:.6f})", 409)

    def _deposit(self, name: str, micros: int) -> None:
        self.store.post(self._t, "deposit", DEPOSITS, user_account(name), micros, memo="deposit")
        self.balance[name] += micros

    # ================================================================== jobs
    def submit(self, user: str, admin: bool, bid, command, estimate=None, procs=1, restartable=False) -> dict:
        """Accept a job (committed before this returns) and let the mechanism decide at once.
        ``restartable``: the job may be restarted from the beginning on another node instead of
        waiting for its own (the Slurm executor's requeue; module docstring)."""
        bid = validation.bid(bid)
        if isinstance(command, list):
            if not all(isinstance(c, str) for c in command):
                raise MarketError("command must be a string or a list of strings")
            command = shlex.join(command) if command else ""
        if not isinstance(command, str) or not command.strip():
            raise MarketError("command is empty: give the command line to run")
        if "\x00" in command:
            raise MarketError("command contains a NUL character")
        size = len(validation.utf8(command, "command"))
        if size > self.config.max_command_bytes:
            raise MarketError(f"command is {size} bytes long, more than the {self.config.max_command_bytes} this "
                              "market accepts (put a long script in a file and run the file)", 413)
        if estimate is not None:
            estimate = validation.number(estimate, "runtime estimate")
            if not MIN_ESTIMATE <= estimate <= MAX_ESTIMATE:
                raise MarketError(f"runtime estimate must be a finite positive number of seconds from {MIN_ESTIMATE:g} "
                                  f"to {MAX_ESTIMATE:g}, got {estimate!r}")
        if self.rule == "wsept" and estimate is None:
            raise MarketError(f"the {self.config.mechanism} market orders jobs by bid / runtime estimate: "
                              "give a runtime estimate (seconds)")
        if not isinstance(restartable, bool):
            raise MarketError(f"restartable must be true or false (got {restartable!r})")
        cap = self.engine.max_capacity
        if isinstance(procs, bool) or not isinstance(procs, int) or not 1 <= procs <= cap:
            raise MarketError(f"procs (the CPUs the job asks for) must be a whole number from 1 to {cap}, this "
                              f"market's CPUs (got {procs!r})")
        if procs > 1 and not getattr(self.executor, "per_job_limits", True):
            raise MarketError("this market's executor (the privileged launcher) runs serial jobs only: procs must be 1")
        if self.dlgm is not None:
            raise MarketError(f"this market runs {self.dlgm.name.upper()}: submit a weight and a reported run time "
                              "(`market submit --bid W --runtime D`, POST /api/dlgm/jobs)", 409)
        if self.ees is not None:
            raise MarketError(f"this market runs {self.ees.name.upper()}: submit a value, a delay cost (or patience) "
                              "and a declared run time (`market submit --value V --delay-cost D --runtime R`, "
                              "POST /api/ees/jobs)", 409)
        with self.lock:
            if user not in self.balance:
                raise MarketError(f"unknown user {user!r}", 404)
            if self.active_by_user[user] >= self.config.max_jobs_per_user:
                raise MarketError(f"{user} has {self.active_by_user[user]} active jobs (queued, running, preempted "
                                  f"or held), the most this market allows one user "
                                  f"({self.config.max_jobs_per_user}): wait for some to end, or cancel some", 429)
            self._run_as(user)  # refused now if the job could never start
            now = self._now()
            self._admit(user, bid, procs)
            with self._transaction():
                job_id = self.store.insert_job(user, bid, procs, estimate, command, now, restartable)
                self.store.add_event(job_id, now, "submit", f"bid {bid:g}" + (f", {procs} CPUs" if procs > 1 else "")
                                     + (", restartable" if restartable else ""))
                job = Active(job_id, user, bid, estimate, command, "queued", procs=procs, restartable=restartable)
                self.active[job_id] = job
                self.active_by_user[user] += 1
                self._enter([job])
                self._after()
            return self._stored_view(job_id)

    def _run_as(self, owner: str, cached: bool = False) -> RunAs | None:
        """The Unix account ``owner``'s jobs run as (None: the broker's own, single-user mode);
        MarketError 403 when a multi-user market cannot run them. Looked up afresh in the
        system's user database (a launch always is); ``cached``: the last lookup will do (the
        Slurm queue view, rebuilt after every decision)."""
        if self.single_user:
            return None
        unix = self.unix.get(owner)
        if cached and unix in self._accounts:
            return self._accounts[unix]
        if unix is None:
            raise MarketError(
                f"user {owner!r} has no Unix account: this market runs every job as its owner's Unix account "
                "(the administrator maps one: `marketsched market user add NAME --unix ACCOUNT`), or the "
                "market must run in single-user mode (--single-user)", 403)
        try:
            self._accounts[unix] = RunAs.lookup(unix)
        except ValueError as exc:
            self._accounts.pop(unix, None)
            raise MarketError(f"user {owner!r}: {exc}", 403) from None
        return self._accounts[unix]

    def _admit(self, user: str, bid: float, procs: int = 1) -> None:
        """Admission rule (module docstring): the balance covers ``admission_seconds`` at the
        job's highest possible price (per CPU: times the ``procs`` it asks for)."""
        need = to_micro(procs * max(bid, RESERVATION_PRICE) * self.config.admission_seconds)
        have = self.balance[user] - self._unposted(user)
        if have < need or have <= 0:
            cpus = f" x {procs} CPUs" if procs > 1 else ""
            raise MarketError(
                f"balance too low: {have / MICRO:.6f} available, admission needs {need / MICRO:.6f} "
                f"({self.config.admission_seconds:g} s at max(bid, reservation price {RESERVATION_PRICE:g}){cpus})",
                402)

    def cancel(self, user: str, admin: bool, job_id) -> dict:
        """Cancel a job of the user's (the administrator: any job): kill all its processes."""
        job_id = _job_id(job_id)
        with self.lock:
            row, job = self._own_active(user, admin, job_id)
            self._now()
            with self._transaction():
                self._cancel(job, f"cancelled by {user}")
                self._after()
            return self._stored_view(job_id)

    def rebid(self, user: str, admin: bool, job_id, bid) -> dict:
        """Change the bid of an active job of the user's (the administrator: any job); the
        mechanism decides at once (:meth:`PriorityScheduler.rebid`: HB may preempt)."""
        job_id = _job_id(job_id)
        bid = validation.bid(bid)
        with self.lock:
            row, job = self._own_active(user, admin, job_id)
            if bid == job.bid:
                return self._job_view(row)
            now = self._now()
            if bid > job.bid:
                self._admit(job.owner, bid, job.procs)
            with self._transaction():
                old = job.bid
                self.store.update_job(job_id, bid=bid)
                self.store.add_event(job_id, now, "rebid", f"bid {old:g} -> {bid:g}")
                if job.row is not None:  # held jobs keep the new bid for when they re-enter
                    key, _ = self._keys([bid], [job.estimate])
                    self.engine.batch(rebids=[(job.row, bid, float(key[0]))])
                job.bid = bid
                self._apply()
                self._after()
            return self._stored_view(job_id)

    def _own_active(self, user: str, admin: bool, job_id: int) -> tuple[dict, Active]:
        """The stored row and active state of a job of the user's (the administrator: any
        job); 404 if it is not theirs, 409 if it has ended. Call with the lock held."""
        row = self.store.job(job_id)
        if row is None or not (admin or row["owner"] == user):
            raise MarketError(f"no job {job_id} of yours", 404)
        job = self.active.get(job_id)
        if job is None:
            raise MarketError(f"job {job_id} already ended ({row['state']})", 409)
        return row, job

    def _cancel(self, job: Active, why: str) -> None:
        t = self._t
        if job.row is not None:
            self.engine.withdraw(job.row)
        self._stopped_running(job, t)
        # once the cancel is committed: kill, and only then drop the record of the process
        # (_final defers that), so a crash in between leaves the restarted broker a process to kill
        self._defer(lambda key=job.id: self.executor.kill(key))
        self._final(job, "cancelled", t, note=why)
        self._apply()

    # ================================================================== views
    def jobs(self, user: str, admin: bool, states=None, limit: int | None = None, before: int | None = None) -> list[dict]:
        """The user's jobs (the administrator: all), oldest first (``limit``: the newest N;
        ``before``: only jobs whose id is below it, to page back). A command longer than
        ``LIST_COMMAND_CHARS`` is cut (``command_truncated``); the job's own view has it whole."""
        bad = set(states or ()) - set(ACTIVE_STATES) - set(FINAL_STATES)
        if bad:
            raise MarketError(f"unknown job state(s) {sorted(bad)}; states are {', '.join(ACTIVE_STATES + FINAL_STATES)}")
        with self.lock:
            self._now()
            out = []
            for r in self.store.jobs(None if admin else user, states, limit, before):
                v = self._job_view(r)
                if len(v["command"]) > LIST_COMMAND_CHARS:
                    v["command"] = v["command"][:LIST_COMMAND_CHARS] + "\u2026"
                    v["command_truncated"] = True
                out.append(v)
            return out

    def count_active(self, user: str, admin: bool) -> int:
        """How many active jobs the user has (the administrator: the market)."""
        with self.lock:
            return len(self.active) if admin else self.active_by_user[user]

    def job(self, user: str, admin: bool, job_id, tail: int = 4000) -> dict:
        """One job with its newest ``JOB_EVENTS`` events (``events_total``: how many it has)
        and the last ``tail`` bytes of its stdout and stderr."""
        job_id = _job_id(job_id)
        with self.lock:
            row = self.store.job(job_id)
            if row is None or not (admin or row["owner"] == user):
                raise MarketError(f"no job {job_id} of yours", 404)
            self._now()
            view = self._job_view(row)
            view["events"] = self.store.events(job_id, JOB_EVENTS)
            view["events_total"] = self.store.count_events(job_id)
            view["workdir"] = str(self.executor.workdir(job_id))
        for name in ("stdout", "stderr"):  # never through a link the job made (jobfiles)
            try:
                view[name] = self.executor.read_file(job_id, name, tail)
            except JobFileError as exc:
                view[name] = f"[not shown: {exc}]"
            except OSError:
                view[name] = ""
        return view

    def price(self) -> dict:
        """The market now: price, counts, best queued and lowest running priority keys."""
        with self.lock:
            self._now()
            eng = self.engine
            best = self.mechanism.best_queued()
            keys = [self.mechanism.key[self.active[j].engine_row] for j in self.running_jobs]
            return {
                "t": self._t,
                "time": self.epoch + self._t,
                "price": self._market_price(),
                "mechanism": self.config.mechanism,
                "pricing": self.config.pricing,
                "slots": self.config.slots,
                "running": len(self.running_jobs),
                "queued": len(self.mechanism.waiting),
                "held": sum(1 for j in self.active.values() if j.state == "held"),
                "best_queued_key": None if best is None else -best[0],
                "lowest_running_key": min(keys, default=None),
                "reservation_price": RESERVATION_PRICE,
                "rates": {str(j): eng.rate(self.active[j].engine_row) for j in sorted(self.running_jobs)},
            }

    def price_history(self, since: float | None = None, limit: int = 1000) -> list[dict]:
        with self.lock:
            return self.store.prices(since, limit)

    def balances(self, user: str, admin: bool) -> dict:
        """The user's balance and what their running jobs are accruing (not yet posted); the
        administrator gets every user, the revenue and the deposits (checked double entry)."""
        with self.lock:
            self._now()
            accruing = {u: self._unposted(u) for u in self.balance}
            if admin:
                books = self.store.check_books()
                return {
                    "users": {u: {"balance": b / MICRO, "accruing": accruing[u] / MICRO}
                              for u, b in sorted(self.balance.items())},
                    "revenue": books["revenue"] / MICRO,
                    "deposits": books["deposits"] / MICRO,
                }
            return {"user": user, "balance": self.balance.get(user, 0) / MICRO,
                    "accruing": accruing.get(user, 0) / MICRO}

    def statement(self, user: str, admin: bool, name: str | None = None, limit: int | None = 200,
                  before: int | None = None) -> dict:
        """Ledger entries of the user's account, oldest first (the newest ``limit``, with ids
        below ``before`` if given); the administrator may name any user."""
        who = name if (admin and name) else user
        with self.lock:
            if who not in self.balance:
                raise MarketError(f"unknown user {show(who)}", 404)
            return {
                "user": who,
                "balance": self.balance.get(who, 0) / MICRO,
                "entries": signed_entries(self.store, user_account(who), limit, before),
            }

    def books(self) -> dict:
        """Deposits, user balances and revenue (currency units), after checking the double entry."""
        with self.lock:
            return {k: v / MICRO for k, v in self.store.check_books().items()}

    def _stored_view(self, job_id: int) -> dict:
        """The view of a job as the database holds it (after a change just written)."""
        row = self.store.job(job_id)
        if row is None:
            raise MarketError(f"job {job_id} is not in the market's database")
        return self._job_view(row)

    def _job_view(self, row: dict) -> dict:
        v = dict(row)
        v["command_truncated"] = False
        job = self.active.get(row["id"])
        v["charged"] = row["charged"] / MICRO
        v["unpaid"] = row["unpaid"] / MICRO
        v["accrued"] = v["charged"]
        v["rate"] = 0.0
        if job is not None and job.pid is not None:  # launched, maybe not yet recorded
            v["pid"], v["start_ticks"] = job.pid, job.start_ticks
        if job is not None and job.row is not None:
            unposted = to_micro(self.engine.policy.pricing.accrued(job.row)) - job.row_posted
            v["accrued"] = (job.charged + max(unposted, 0)) / MICRO
            v["rate"] = self.engine.rate(job.row)
            if job.run_since is not None:
                v["run_seconds"] = job.run_seconds + self._t - job.run_since
        return v

    # ================================================================== the mechanism's decisions
    def _enter(self, jobs: list[Active]) -> None:
        """Jobs enter the mechanism as one batch of arrivals now; carry out its decision."""
        if not jobs:
            return
        bids = [j.bid for j in jobs]
        keys, costs = self._keys(bids, [j.estimate for j in jobs])
        rows = self.engine.batch(arrivals=[(b, float(k), float(c), j.procs)
                                           for b, k, c, j in zip(bids, keys, costs, jobs)])
        for job, row in zip(jobs, rows):
            job.row = row
            job.row_posted = 0
            self.row_job.append(job.id)
        self._apply()

    def _keys(self, bids, estimates):
        """The mechanism's ``(key, cost)`` for live jobs: run times are unknown (NaN); WSEPT
        uses the estimates (None: NaN)."""
        est = [math.nan if e is None else e for e in estimates]
        return priority_key(self.rule, bids, [math.nan] * len(bids), est)

    def _apply(self) -> None:
        """Carry out the engine's decisions and record them. A resume (thaw) and a preemption
        (freeze) happen at once; a start is recorded now (state running, attempt counted) and
        its process launched once that is committed (:meth:`_launch`); a kill once the job's end
        is committed."""
        for kind, row, t in self.engine.drain():
            job = self.active[self.row_job[row]]
            if kind == "start":
                if job.id in self.executor.procs:
                    self.executor.cont(job.id)
                    self.store.add_event(job.id, t, "resume")
                else:
                    job.attempts += 1
                    job.pid = job.start_ticks = None
                    self.store.add_event(job.id, t, "start", f"attempt {job.attempts}")
                job.state = "running"
                job.run_since = t
                self.running_jobs.add(job.id)
                if job.first_start is None:
                    job.first_start = t
                self.store.update_job(job.id, state="running", first_start=job.first_start, pid=job.pid,
                                      start_ticks=job.start_ticks, attempts=job.attempts)
                if job.id not in self.executor.procs:
                    self._defer(lambda job=job, row=row: self._launch(job, row))
            elif kind == "preempt":
                self.executor.stop(job.id)
                job.preemptions += 1
                self._stopped_running(job, t)
                self._post(job)  # a job that stops is posted at once: queued jobs owe nothing
                job.state = "preempted"
                self.store.add_event(job.id, t, "preempt")
                self.store.update_job(job.id, state="preempted", preemptions=job.preemptions,
                                      run_seconds=job.run_seconds)
            else:  # the priority mechanisms never kill, discard or reject on their own
                self._stopped_running(job, t)
                self._defer(lambda key=job.id: self.executor.kill(key))  # before _final's forget
                self._final(job, "cancelled", t, note=f"mechanism: {kind}")

    def _launch(self, job: Active, row: int) -> None:
        """Start the process of a job whose start is committed (deferred by :meth:`_apply`),
        then record its pid; a job that cannot start fails (its slot goes to the next)."""
        if self.active.get(job.id) is not job or job.row != row or job.state != "running" \
                or job.id in self.executor.procs:
            return  # decided otherwise since (e.g. an earlier launch of the batch failed)
        kw: dict[str, object] = {"priority_key": float(self.mechanism.key[row])} if self._arrange is not None else {}
        if job.procs > 1:  # Slurm: K tasks (nodes as Slurm places them); local: K times the CPU limit
            if self._arrange is not None:
                kw["tasks"] = job.procs
            else:
                limits = self.config.limits()
                kw["limits"] = replace(limits, cpus=None if limits.cpus is None else limits.cpus * job.procs)
        try:
            user = self._run_as(job.owner)
            if user is not None:
                kw["user"] = user
            proc = self.executor.launch(job.id, job.command, env={"MARKETSCHED_JOB_ID": str(job.id)}, **kw)
        except (OSError, MarketError) as exc:
            why = f"launch failed: {exc}"
            with self._transaction():
                self._now()
                self.engine.withdraw(job.engine_row)
                self._stopped_running(job, self._t)
                self._final(job, "failed", self._t, note=why)
                self._apply()
                self._after()
            return
        # recorded with the next transaction, not a commit (an fsync) of its own: until then the
        # executor's state file (written before the process could run) is the record a
        # restarted broker reconciles by
        job.pid, job.start_ticks = proc.pid, proc.start_ticks
        self._launched.append((job.id, self._t, proc.pid, proc.start_ticks))

    def _record_restarts(self) -> None:
        """Record the jobs the executor restarted from the beginning since the last call (the
        Slurm executor's requeue, ``restarted``): an event ``restart`` each. Their charges so
        far stay (module docstring)."""
        restarted = getattr(self.executor, "restarted", None)
        while restarted:
            job_id, note = restarted.pop(0)
            if job_id in self.active:
                self.store.add_event(job_id, self._t, "restart", note)

    def _record_launches(self) -> None:
        """Write the pids of the processes launched since the last transaction (in it)."""
        launched, self._launched = self._launched, []
        for job_id, t, pid, ticks in launched:
            self.store.add_event(job_id, t, "launch", f"pid {pid}")
            self.store.update_job(job_id, pid=pid, start_ticks=ticks)

    def _stopped_running(self, job: Active, t: float) -> None:
        self.running_jobs.discard(job.id)
        if job.run_since is not None:
            job.run_seconds += t - job.run_since
            job.run_since = None

    def _ran(self, job: Active) -> float:
        """Seconds the market has metered ``job`` up to now (its open interval included)."""
        return job.run_seconds + (self._t - job.run_since if job.run_since is not None else 0.0)

    def _final(self, job: Active, state: str, t: float, exit_code=None, note: str = "",
               settle: float | None = None) -> None:
        if job.row is not None:
            self._post(job, settle)
        if self.active.pop(job.id, None) is not None:
            self.active_by_user[job.owner] -= 1
        job.state = state
        detail = note if exit_code is None else f"exit code {exit_code}" + (f"; {note}" if note else "")
        self.store.add_event(job.id, t, state, detail)
        self.store.update_job(job.id, state=state, end_t=t, exit_code=exit_code, run_seconds=job.run_seconds,
                              charged=job.charged, unpaid=job.unpaid, preemptions=job.preemptions, note=note)
        if state == "cancelled" or job.attempts == 0:  # only the command's digest is kept (ledger: Retention)
            self.store.retire_command(job.id)
        else:  # kept whole, within the owner's quota: the oldest give way
            self.kept_bytes[job.owner] += len(job.command.encode("utf-8", "surrogatepass"))
            over = self.kept_bytes[job.owner] - self.config.kept_command_bytes
            if over > 0:
                self.kept_bytes[job.owner] -= self.store.retire_oldest_commands(job.owner, over)
        job.row = None
        self._defer(lambda key=job.id: self.executor.forget(key))

    def _capacity(self) -> int | None:
        """The executor's capacity now if it differs from the engine's (None otherwise, and for
        an executor without the ``capacity`` hook). Decision: the capacity enters the engine as a
        number in the batch of the exits found in the same poll (a dead node's jobs end in the
        batch its CPUs leave in), and the mechanism's own step decides who stops (lowest key
        first); each change is recorded in the database (meta ``capacity``: ``[[t, slots], ...]``)
        for a replay."""
        cap = getattr(self.executor, "capacity", None)
        if cap is None or cap == self.engine.capacity:
            return None
        changes = capacity_changes(self.store)
        changes.append([self._t, int(cap)])
        self.store.set_meta("capacity", json.dumps(changes))
        return int(cap)

    def _on_exits(self, exits, capacity: int | None = None) -> None:
        """Processes found ended in one scan: their jobs complete together, in *one* batch of
        the mechanism, and only then does it decide. (One batch per exit let the first exit
        resume a preempted job whose own exit was later in the same scan, and its process,
        already gone, was launched a second time.) ``capacity``: the market's new capacity
        (see :meth:`_capacity`), set in the same batch."""
        ended = [(self.active[j], code) for j, code in exits if j in self.active]
        if not ended:
            if capacity is not None:
                self.engine.batch(capacity=capacity)
                self._apply()
            return
        t = self._t
        rows = sorted(job.engine_row for job, _ in ended if job.row is not None)
        notes = {job.id: "ended while held" if job.state == "held" else "" for job, _ in ended}
        failed = self._failures(ended)  # before the batch: the rows still run in the engine
        if rows or capacity is not None:
            self.engine.batch(completed=rows, capacity=capacity)
        outcome = getattr(self.executor, "outcome", None)
        for job, code in ended:
            tf, settle = failed.get(job.id, (t, None))
            self._stopped_running(job, tf)
            state, note = "completed", notes[job.id]
            if outcome is not None:  # e.g. Slurm killed it: "failed", "slurm: NODE_FAIL"
                state, why = outcome(job.id)
                note = "; ".join(x for x in (note, why) if x)
            if settle is not None:
                self.store.add_event(job.id, tf, "node-failure",
                                     f"charged and metered up to its node's failure (t={tf:.6f}), "
                                     f"{t - tf:.3f} s before Slurm reported it")
            self._final(job, state, t, exit_code=code, note=note, settle=settle)
        self._apply()

    def _failures(self, ended) -> dict[int, tuple[float, float]]:
        """Jobs of ``ended`` whose machine failed before the executor reported their end (the
        executor's ``failure_time`` hook: a Slurm node that died): ``{job id: (failure time in
        market seconds, the job's payment up to it)}``. Decision: the mechanism learns of the
        failure when it is reported and decides then (the capacity change too); only the failed
        job's charge and run time end at the failure time (``LiveEngine.accrued_at``), so it never
        pays for time after it, and what was posted since is refunded; its recorded run time
        ends there too, so a replay of the recorded run gives the same payments. A failure time
        before the job's last start counts from that start."""
        hook = getattr(self.executor, "failure_time", None)
        out: dict[int, tuple[float, float]] = {}
        if hook is None:
            return out
        epoch = getattr(self.wall, "epoch", None)
        for job, _ in ended:
            f = hook(job.id)
            if f is None or job.row is None or job.run_since is None:
                continue
            tf = f - epoch if epoch is not None else self._t - max(0.0, time.time() - f)
            tf = min(max(tf, job.run_since), self._t)
            out[job.id] = (tf, self.engine.accrued_at(job.row, tf))
        return out

    # ================================================================== money
    def _unposted(self, user: str) -> int:
        """Micro-units the user's running jobs have accrued and not yet posted (a job that
        stops is posted at once, so only running jobs can owe anything)."""
        total = 0
        pricing = self.engine.policy.pricing
        for job_id in self.running_jobs:
            job = self.active[job_id]
            if job.owner == user:
                total += max(0, to_micro(pricing.accrued(job.row)) - job.row_posted)
        return total

    def _post(self, job: Active, settle: float | None = None) -> bool:
        """Post what ``job`` accrued since its last posting, up to the owner's balance; a
        shortfall is recorded as unpaid and marks the owner to be held. False if short.
        ``settle``: the row's whole payment instead of what it accrued up to now (a job whose
        node failed earlier); what was posted beyond it is taken off what is unpaid first, then
        refunded (an entry ``refund``, revenue to the owner)."""
        if job.row is None:
            return True
        due = to_micro(self.engine.accrued(job.row) if settle is None else settle) - job.row_posted
        if due < 0:
            over = -due
            forgiven = min(over, job.unpaid)
            back = over - forgiven
            if back:
                self.store.post(self._t, "refund", REVENUE, user_account(job.owner), back, job.id,
                                memo=f"job {job.id}: posted after its node failed")
                self.balance[job.owner] += back
            job.row_posted += due
            job.charged -= back
            job.unpaid -= forgiven
            self.store.update_job(job.id, charged=job.charged, unpaid=job.unpaid, run_seconds=self._ran(job))
            return True
        if due <= 0:
            self.store.update_job(job.id, run_seconds=self._ran(job))
            return True
        paid = min(due, max(self.balance[job.owner], 0))
        if paid:
            self.store.post(self._t, "charge", user_account(job.owner), REVENUE, paid, job.id, memo=f"job {job.id}")
            self.balance[job.owner] -= paid
        job.row_posted += due
        job.charged += paid
        job.unpaid += due - paid
        # the run time metered so far goes with the charge, so a crash leaves the two consistent
        self.store.update_job(job.id, charged=job.charged, unpaid=job.unpaid, run_seconds=self._ran(job))
        if paid < due:
            self._short.add(job.owner)
            return False
        return True

    def _post_all(self) -> None:
        for job_id in sorted(self.running_jobs):
            self._post(self.active[job_id])

    def _exhaustion(self) -> tuple[float, list[str]]:
        """Earliest time a user's balance reaches 0 at current prices, and users already at 0."""
        eng = self.engine
        rate: dict[str, float] = {}
        for job_id in self.running_jobs:
            job = self.active[job_id]
            rate[job.owner] = rate.get(job.owner, 0.0) + eng.rate(job.engine_row)
        soonest, broke = math.inf, []
        for user, r in sorted(rate.items()):
            left = self.balance[user] - self._unposted(user)
            if left <= 0:
                broke.append(user)
            elif r > 0:
                soonest = min(soonest, self._t + left / MICRO / r)
        return soonest, broke

    def _hold(self, user: str) -> None:
        """The user is out of money: all their jobs in the mechanism leave it and wait, held
        (running ones frozen)."""
        jobs = sorted((j for j in self.active.values() if j.owner == user and j.row is not None), key=lambda j: j.id)
        if not jobs:
            return
        was_running = [self.engine.running[j.engine_row] for j in jobs]
        self.engine.withdraw(*sorted(j.engine_row for j in jobs))
        t = self._t
        for job, ran in zip(jobs, was_running):
            self._post(job)  # the row's final amount, up to the balance
            if ran:
                self.executor.stop(job.id)
                self._stopped_running(job, t)
            job.row = None
            job.state = "held"
            self.store.add_event(job.id, t, "hold", "owner out of money")
            self.store.update_job(job.id, state="held", run_seconds=job.run_seconds)
        self._apply()

    def _release(self, user: str) -> None:
        """After a deposit: held jobs re-enter the mechanism, oldest first, while they pass
        admission."""
        back = []
        for job in sorted((j for j in self.active.values() if j.owner == user and j.state == "held"),
                          key=lambda j: j.id):
            try:
                self._admit(user, job.bid, job.procs)
            except MarketError:
                break
            back.append(job)
        for job in back:
            job.state = "preempted" if job.id in self.executor.procs else "queued"
            self.store.add_event(job.id, self._t, "release", "deposit received")
            self.store.update_job(job.id, state=job.state)
        self._enter(back)

    # ================================================================== price record
    def _market_price(self) -> float:
        """The price shown: the mean per-second price the running jobs pay now (with HB and
        k-th price, the uniform k-th price); the reservation price when nothing runs."""
        rates = [self.engine.rate(self.active[j].engine_row) for j in self.running_jobs]
        return sum(rates) / len(rates) if rates else RESERVATION_PRICE

    def _after(self) -> None:
        """After every change: hold users who could not pay, record the price if it moved,
        wake the market thread."""
        while self._short:
            user = min(self._short)
            self._hold(user)
            self._short.discard(user)
        if self._arrange is not None:
            self._arrange(self._queue_view())
        running = len(self.running_jobs)
        queued = len(self.mechanism.waiting)
        snap = (round(self._market_price(), 9), queued, running)
        if snap != self._last_price:
            self.store.add_price(self._t, snap[0], queued, running)
            self._last_price = snap
        self.executor.wake()

    def _queue_view(self) -> list[dict]:
        """The mechanism's waiting jobs, best first (its heap order: key, then submission), for
        an executor's ``arrange`` hook."""
        out = []
        key = self.mechanism.key
        for _, row in sorted(self.mechanism.waiting):
            job = self.active.get(self.row_job[row])
            if job is None or job.row != row:
                continue
            out.append({"id": job.id, "key": float(key[row]), "command": job.command, "tasks": job.procs,
                        "restartable": job.restartable,
                        "env": {"MARKETSCHED_JOB_ID": str(job.id)}, "user": self._run_as(job.owner, cached=True),
                        "preempted": job.id in self.executor.procs})
        return out

    # ================================================================== the market thread
    def _wait(self) -> bool:
        """Wait for the market thread's next round (the next charge, user out of money or timer;
        at most 0.5 s, woken by the executor); True: the market is stopping."""
        if self._stopping:
            return True
        with self.lock:
            now = max(self._t, float(self.wall()))
            soonest, _ = self._exhaustion()
            deadline = min(self._next_charge, soonest, self.engine.next_timer())
            timeout = min(max(deadline - now, 0.0), 0.5)
        self.executor.wait(timeout)
        return self._stopping

    def step(self) -> None:
        """One round of the market thread, without waiting: process exits, due timers, charges
        and users out of money (tests with an injected clock and executor call it directly)."""
        with self.lock, self._transaction():
            self._tick_once()

    def _tick_once(self) -> None:
        self._now()
        changed = False
        exits = self.executor.exits()
        self._record_restarts()
        capacity = self._capacity()
        if exits or capacity is not None:
            self._on_exits(exits, capacity)
            changed = True
        if self.engine.poll():
            self._apply()
            changed = True
        if self._t >= self._next_charge:
            self._post_all()
            self._next_charge = self._t + self.config.charge_interval
            changed = True
        _, broke = self._exhaustion()
        if broke:
            self._post_all()  # posts up to each balance and marks the users short
            self._short.update(broke)
            changed = True
        if changed:
            self._after()

    # ================================================================== restart
    def _recover(self) -> None:
        """Reload state after a restart (see the module docstring): reconcile every active job
        with what runs for its id, then kill whatever still runs for jobs that have ended."""
        now = self._t
        for acct, bal in self.store.balances().items():
            if acct.startswith("user:"):
                self.balance[acct[5:]] = bal
        for name, _ in self.store.users():
            self.balance.setdefault(name, 0)
            self.unix[name] = self.store.unix_user(name)
        first: list[Active] = []
        rest: list[Active] = []
        for r in self.store.jobs(states=ACTIVE_STATES):
            job = Active(r["id"], r["owner"], r["bid"], r["estimate"], r["command"], r["state"],
                         charged=r["charged"], unpaid=r["unpaid"], preemptions=r["preemptions"],
                         attempts=r["attempts"], first_start=r["first_start"], run_seconds=r["run_seconds"],
                         pid=r["pid"], start_ticks=r["start_ticks"], procs=int(r["procs"]),
                         restartable=bool(r["restartable"]))
            self.active[job.id] = job
            wd = self.executor.workdir(job.id)
            # what was started for this job id: the executor's state file (written before the
            # process may run) or, failing that, the database's pid
            rec = self.executor.recorded(job.id)
            started = rec is not None or job.pid is not None
            was_running = r["state"] == "running"
            proc = self.executor.adopt(job.id, job.pid, job.start_ticks, wd) if started else None
            if proc is not None:
                self.executor.stop(job.id)  # the mechanism decides afresh who runs
                job.pid, job.start_ticks = proc.pid, proc.start_ticks
                if job.state != "held":
                    job.state = "preempted"
                self.store.add_event(job.id, now, "reattach", f"pid {proc.pid}")
                self.store.update_job(job.id, state=job.state, pid=proc.pid, start_ticks=proc.start_ticks)
            elif started or was_running:
                code = self.executor.exit_code(job.id) if started else None
                if code is not None:
                    self._final(job, "completed", now, exit_code=code, note="ended while the broker was down")
                    continue
                job.pid = job.start_ticks = None
                if job.state != "held":
                    job.state = "queued"
                why = "process gone without an exit code" if started else "its process had not been started yet"
                self.store.add_event(job.id, now, "requeue", why)
                self.store.update_job(job.id, state=job.state, pid=None, start_ticks=None)
                self._defer(lambda key=job.id: self.executor.forget(key))
                was_running = False
            if job.state == "held":
                continue
            (first if was_running else rest).append(job)
        self.active_by_user = Counter(j.owner for j in self.active.values())
        killed = self.executor.reap(self.active)
        if killed:
            warn(f"killed {killed} process(es) still running for jobs that had ended")
        self._enter(first)
        self._enter(rest)
        self._after()


@dataclass(frozen=True)
class _UserIndex:
    """Users by token hash, web-page key id and Unix account, read without the broker's lock:
    the broker replaces the whole index (one assignment) whenever it adds a user, and is the
    only writer of its database's users (one broker per database)."""

    by_hash: dict
    by_kid: dict
    by_unix: dict
    admin: str | None

    @classmethod
    def of(cls, store: Store) -> _UserIndex:
        rows = store._rows("SELECT name, is_admin, token_hash, unix_user FROM users ORDER BY name")
        return cls(by_hash={h: (n, bool(a)) for n, a, h, _ in rows},
                   by_kid={page_key_id(h): (n, bool(a), h) for n, a, h, _ in rows},
                   by_unix={u: (n, bool(a)) for n, a, _, u in rows if u is not None},
                   admin=next((n for n, a, _, _ in rows if a), None))


def make_executor(config: MarketConfig, root: Path):
    """The executor ``config.executor`` names, for the jobs' folders under ``root``."""
    if config.executor == "slurm":
        from marketsched.platform.slurm import SlurmExecutor

        return SlurmExecutor(root, partition=config.partition, slots=config.slots)
    if config.launcher:  # the launcher's parent is this (root) process: for a broker that stays root
        from marketsched.platform.launcherd import LauncherExecutor, spawn

        return LauncherExecutor(root, spawn(root, os.geteuid(), config.limits(), root.parent / "market.db"))
    return LocalExecutor(root, limits=config.limits())


def capacity_changes(store: Store) -> list[list]:
    """The market's recorded capacity changes, ``[[t, slots], ...]`` oldest first (empty when
    its capacity never changed from its slots)."""
    return json.loads(store.get_meta("capacity") or "[]")


def _job_id(x) -> int:
    return validation.whole(x, "job id")
