"""The broker: a running MOSIX-style market on this machine (the market of Shudler et al. 2010, for real).

It joins four parts, all driven under one lock:

* the **mechanism**: a :class:`~marketsched.mechanisms.online.priority.PriorityScheduler` with a
  payment scheme, the very objects the simulator uses, inside a
  :class:`~marketsched.live.engine.LiveEngine` on wall-clock time (HB with k-th price by
  default; NPHB, WSEPT (and WSPT, see below) and first price selectable);
* the **executor** (:class:`~marketsched.live.executor.LocalExecutor`): ``slots`` jobs run at
  once, each a process group; the engine's start / preempt decisions become launch or SIGCONT /
  SIGSTOP;
* the **ledger** (:class:`~marketsched.live.ledger.Store`): users, deposits, per-second charges
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
  suspended with SIGSTOP, exactly as when preempted) and wait in state ``held``. A later deposit
  re-enters held jobs (new arrivals at that time, so they queue behind equal bids submitted
  while they were held) as long as each passes the admission rule.
* **Changing a bid.** A user changes the bid of an active job (``rebid``; Shudler et al. (2010) have no
  such event): the job keeps its place in submission order (ties), a running job pays its old
  price up to now and the new one from now, and the mechanism decides at once (HB may preempt
  either way). Raising a bid passes the admission rule again at the new bid (402 otherwise,
  nothing changed); lowering one always succeeds. A held job keeps the new bid for when it
  re-enters.
* **Cancel.** A user cancels their own jobs (the administrator any job); the process group is
  killed; what the job accrued until then is charged.
* **Serial jobs.** The priority mechanisms schedule serial jobs (Shudler et al. (2010) split parallel jobs
  first); a live job must ask for 1 processor (a slot).
* **WSPT** keys jobs by ``bid / actual run time``, which a live market cannot know at
  submission: here ``wspt`` uses the submitted run-time estimate in its place, which is WSEPT;
  both ask every job for an estimate.
* **Restart.** State lives in the database. A new broker reloads it: jobs whose process still
  runs (same pid and start time) are re-attached (all are stopped first, then the mechanism
  decides afresh, the jobs that were running entering first so a non-preemptive rule keeps
  them); a job whose process ended while the broker was down is completed with the exit code its
  wrapper wrote; the others are requeued and run from the start. Time the broker was down is
  not charged.
"""

from __future__ import annotations

import hashlib
import math
import os
import secrets
import shlex
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from marketsched.live.clock import WallClock
from marketsched.live.engine import LiveEngine
from marketsched.live.executor import LocalExecutor, read_exit_code
from marketsched.live.ledger import ACTIVE_STATES, DEPOSITS, MICRO, REVENUE, Store, user_account
from marketsched.mechanisms.online.pricing import RESERVATION_PRICE
from marketsched.mechanisms.online.priority import PriorityScheduler, priority_key

if TYPE_CHECKING:
    from marketsched.live.dayahead import DayAhead

LIVE_RULES = ("hb", "nphb", "wsept", "wspt")
LIVE_PRICINGS = ("kth", "first")
EXECUTORS = ("local", "slurm")
NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


class MarketError(Exception):
    """A request the market refuses; ``status`` is the HTTP status the API answers with."""

    status = 400

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        if status is not None:
            self.status = status


def hash_token(token: str) -> str:
    """Tokens are 256-bit random strings, so one SHA-256 is enough to store them safely (a slow
    password hash protects guessable secrets; these are not guessable)."""
    return hashlib.sha256(token.encode()).hexdigest()


def to_micro(amount: float) -> int:
    return int(round(amount * MICRO))


@dataclass
class MarketConfig:
    slots: int = 2
    mechanism: str = "hb"
    pricing: str = "kth"
    charge_interval: float = 1.0
    admission_seconds: float = 1.0
    sync: str = "full"  # SQLite: "full" (fsync per commit) or "normal" (see marketsched.live.ledger)
    executor: str = "local"  # "local" (process groups) or "slurm" (marketsched.live.slurm)
    partition: str | None = None  # Slurm partition for the "slurm" executor (None: Slurm's default)

    def check(self) -> None:
        if self.mechanism not in LIVE_RULES:
            raise ValueError(f"unknown mechanism {self.mechanism!r}; choose one of {', '.join(LIVE_RULES)}")
        if self.pricing not in LIVE_PRICINGS:
            raise ValueError(f"unknown pricing {self.pricing!r}; choose one of {', '.join(LIVE_PRICINGS)}")
        if int(self.slots) != self.slots or self.slots < 1:
            raise ValueError(f"slots must be a whole number >= 1, got {self.slots!r}")
        if not self.charge_interval > 0:
            raise ValueError(f"charge interval must be positive, got {self.charge_interval!r}")
        if not self.admission_seconds >= 0:
            raise ValueError(f"admission seconds must be >= 0, got {self.admission_seconds!r}")
        if self.sync not in ("full", "normal"):
            raise ValueError(f"sync must be 'full' or 'normal', got {self.sync!r}")
        if self.executor not in EXECUTORS:
            raise ValueError(f"unknown executor {self.executor!r}; choose one of {', '.join(EXECUTORS)}")


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
        self.data = Path(data)
        self.data.mkdir(parents=True, exist_ok=True)
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
        # The executor carries the mechanism's decisions out: local process groups by default,
        # Slurm jobs with config.executor == "slurm" (marketsched.live.slurm), or any object with
        # the same interface passed in. Optional hooks: ``arrange(queue)`` after every decision
        # (the mechanism's waiting jobs, best first) and ``outcome(job_id)`` -> (final state,
        # note) when a job ends (e.g. "failed" for a job Slurm killed).
        self.executor = executor if executor is not None else make_executor(self.config, self.data / "jobs")
        self._arrange = getattr(self.executor, "arrange", None)
        self.dayahead: DayAhead | None = None  # a marketsched.live.dayahead.DayAhead attached by `market serve --dayahead`
        rule = self.config.mechanism
        self.rule = "wsept" if rule == "wspt" else rule
        self.mechanism = PriorityScheduler([], [], [], preemptive=(rule == "hb"), pricing=self.config.pricing,
                                           name=rule)
        self.engine = LiveEngine(self.mechanism, self.config.slots, lambda: self._t)
        self.active: dict[int, Active] = {}  # jobs not yet ended, by id
        self.running_jobs: set[int] = set()  # ids of the jobs running now
        self.row_job: list[int] = []  # engine row -> job id
        self.balance: dict[str, int] = {}  # user -> micro-units (mirrors the ledger)
        self._short: set[str] = set()  # users who could not pay a posting: to be held
        self.admin_token: str | None = None
        self.last_error: str | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._next_charge = math.inf
        self._last_price: tuple[float, int, int] | None = None
        with self.lock, self.store.transaction():
            self._now()
            self._recover()

    def _now(self) -> float:
        """Move market time to the wall clock (never back) and integrate prices up to it."""
        self._t = max(self._t, float(self.wall()))
        self.engine._tick()
        return self._t

    # ================================================================== lifecycle
    def start(self) -> Broker:
        """Start the market thread (process exits, charging, running out of money)."""
        self._next_charge = self._t + self.config.charge_interval
        self._thread = threading.Thread(target=self._loop, name="market", daemon=True)
        self._thread.start()
        return self

    def stop(self, kill_jobs: bool = False) -> None:
        """Stop the market. With ``kill_jobs``, every job's process group is killed and the job
        cancelled; else charges are posted and running jobs suspended (SIGSTOP: nothing runs
        unpaid while the market is down), for the next broker to re-attach."""
        self._stopping = True
        if self.dayahead is not None:
            self.dayahead.stop()
        self.executor.wake()
        if self._thread is not None:
            self._thread.join(timeout=10)
        with self.lock:
            self._now()
            with self.store.transaction():
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
            path = self.data / "admin.token"
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(token + "\n")
            self.admin_token = token
            return token

    # ================================================================== accounts
    def authenticate(self, token: str | None) -> tuple[str, bool]:
        """``(user name, is_admin)`` for a token; MarketError 401 if missing or wrong."""
        if not token:
            raise MarketError("no token: send the header 'Authorization: Bearer TOKEN'", 401)
        with self.lock:
            found = self.store.user_by_token_hash(hash_token(token))
        if found is None:
            raise MarketError("wrong token: no user has this token", 401)
        return found

    def add_user(self, admin: bool, name, deposit=0.0) -> dict:
        """Create a user with an initial deposit; returns ``{"name", "token", "balance"}``."""
        if not admin:
            raise MarketError("only the administrator creates users", 403)
        if not isinstance(name, str) or not name or len(name) > 64 or not set(name) <= NAME_CHARS:
            raise MarketError(f"user name must be 1-64 letters, digits, '_', '.' or '-', got {name!r}")
        amount = _amount(deposit, "deposit", allow_zero=True)
        with self.lock:
            if name in dict(self.store.users()):
                raise MarketError(f"user {name!r} already exists", 409)
            token = secrets.token_urlsafe(32)
            t = self._now()
            with self.store.transaction():
                self.store.add_user(name, hash_token(token), False, t)
                self.balance[name] = 0
                if amount:
                    self._deposit(name, amount)
            return {"name": name, "token": token, "balance": self.balance[name] / MICRO}

    def deposit(self, admin: bool, name, amount) -> dict:
        """Add money to a user's account; their held jobs re-enter the market if they can pay."""
        if not admin:
            raise MarketError("only the administrator makes deposits", 403)
        micros = _amount(amount, "deposit")
        with self.lock:
            if name not in self.balance:
                raise MarketError(f"unknown user {name!r}", 404)
            self._now()
            with self.store.transaction():
                self._deposit(name, micros)
                self._release(name)
                self._after()
            return {"name": name, "balance": self.balance[name] / MICRO}

    def _deposit(self, name: str, micros: int) -> None:
        self.store.post(self._t, "deposit", DEPOSITS, user_account(name), micros, memo="deposit")
        self.balance[name] += micros

    # ================================================================== jobs
    def submit(self, user: str, admin: bool, bid, command, estimate=None, procs=1) -> dict:
        """Accept a job (committed before this returns) and let the mechanism decide at once."""
        bid = _bid(bid)
        if isinstance(command, list):
            if not all(isinstance(c, str) for c in command):
                raise MarketError("command must be a string or a list of strings")
            command = shlex.join(command) if command else ""
        if not isinstance(command, str) or not command.strip():
            raise MarketError("command is empty: give the command line to run")
        if "\x00" in command:
            raise MarketError("command contains a NUL character")
        if estimate is not None:
            estimate = _number(estimate, "runtime estimate")
            if not estimate > 0:
                raise MarketError(f"runtime estimate must be a finite positive number of seconds, got {estimate!r}")
        if self.rule == "wsept" and estimate is None:
            raise MarketError(f"the {self.config.mechanism} market orders jobs by bid / runtime estimate: "
                              "give a runtime estimate (seconds)")
        if isinstance(procs, bool) or not isinstance(procs, int) or procs != 1:
            raise MarketError(f"procs must be 1: the MOSIX market mechanisms schedule serial jobs (got {procs!r})")
        with self.lock:
            if user not in self.balance:
                raise MarketError(f"unknown user {user!r}", 404)
            now = self._now()
            self._admit(user, bid)
            with self.store.transaction():
                job_id = self.store.insert_job(user, bid, procs, estimate, command, now)
                self.store.add_event(job_id, now, "submit", f"bid {bid:g}")
                job = Active(job_id, user, bid, estimate, command, "queued")
                self.active[job_id] = job
                self._enter([job])
                self._after()
            return self._stored_view(job_id)

    def _admit(self, user: str, bid: float) -> None:
        """Admission rule (module docstring): the balance covers ``admission_seconds`` at the
        job's highest possible price."""
        need = to_micro(max(bid, RESERVATION_PRICE) * self.config.admission_seconds)
        have = self.balance[user] - self._unposted(user)
        if have < need or have <= 0:
            raise MarketError(
                f"balance too low: {have / MICRO:.6f} available, admission needs {need / MICRO:.6f} "
                f"({self.config.admission_seconds:g} s at max(bid, reservation price {RESERVATION_PRICE:g}))", 402)

    def cancel(self, user: str, admin: bool, job_id) -> dict:
        """Cancel a job of the user's (the administrator: any job): kill its process group."""
        job_id = _job_id(job_id)
        with self.lock:
            row, job = self._own_active(user, admin, job_id)
            self._now()
            with self.store.transaction():
                self._cancel(job, f"cancelled by {user}")
                self._after()
            return self._stored_view(job_id)

    def rebid(self, user: str, admin: bool, job_id, bid) -> dict:
        """Change the bid of an active job of the user's (the administrator: any job); the
        mechanism decides at once (:meth:`PriorityScheduler.rebid`: HB may preempt)."""
        job_id = _job_id(job_id)
        bid = _bid(bid)
        with self.lock:
            row, job = self._own_active(user, admin, job_id)
            if bid == job.bid:
                return self._job_view(row)
            now = self._now()
            if bid > job.bid:
                self._admit(job.owner, bid)
            with self.store.transaction():
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
        self.executor.kill(job.id)
        self._stopped_running(job, t)
        self._final(job, "cancelled", t, note=why)
        self._apply()

    # ================================================================== views
    def jobs(self, user: str, admin: bool, states=None, limit: int | None = None) -> list[dict]:
        """The user's jobs (the administrator: all), oldest first (``limit``: the newest N)."""
        with self.lock:
            self._now()
            return [self._job_view(r) for r in self.store.jobs(None if admin else user, states, limit)]

    def job(self, user: str, admin: bool, job_id, tail: int = 4000) -> dict:
        """One job with its events and the last ``tail`` bytes of its stdout and stderr."""
        job_id = _job_id(job_id)
        with self.lock:
            row = self.store.job(job_id)
            if row is None or not (admin or row["owner"] == user):
                raise MarketError(f"no job {job_id} of yours", 404)
            self._now()
            view = self._job_view(row)
            view["events"] = self.store.events(job_id)
            view["workdir"] = str(self.executor.workdir(job_id))
        for name in ("stdout", "stderr"):
            p = self.executor.workdir(job_id) / name
            try:
                with open(p, "rb") as f:
                    f.seek(max(0, p.stat().st_size - tail))
                    view[name] = f.read().decode(errors="replace")
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

    def statement(self, user: str, admin: bool, name: str | None = None, limit: int | None = 200) -> dict:
        """Ledger entries of the user's account (the administrator may name any user)."""
        who = name if (admin and name) else user
        with self.lock:
            if who not in self.balance:
                raise MarketError(f"unknown user {who!r}", 404)
            acct = user_account(who)
            entries = self.store.entries(acct, limit=limit)
            return {
                "user": who,
                "balance": self.balance.get(who, 0) / MICRO,
                "entries": [{**e, "amount": e["amount"] / MICRO,
                             "signed": (e["amount"] if e["to_account"] == acct else -e["amount"]) / MICRO}
                            for e in entries],
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
        job = self.active.get(row["id"])
        v["charged"] = row["charged"] / MICRO
        v["unpaid"] = row["unpaid"] / MICRO
        v["accrued"] = v["charged"]
        v["rate"] = 0.0
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
        rows = self.engine.batch(arrivals=[(b, float(k), float(c), 1) for b, k, c in zip(bids, keys, costs)])
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
        """Carry out the engine's decisions (launch or SIGCONT, SIGSTOP) and record them."""
        failed = []
        for kind, row, t in self.engine.drain():
            job = self.active[self.row_job[row]]
            if kind == "start":
                if job.id in self.executor.procs:
                    self.executor.cont(job.id)
                    self.store.add_event(job.id, t, "resume")
                else:
                    kw = {"priority_key": float(self.mechanism.key[row])} if self._arrange is not None else {}
                    try:
                        proc = self.executor.launch(job.id, job.command, env={"MARKETSCHED_JOB_ID": str(job.id)},
                                                    **kw)
                    except OSError as exc:
                        failed.append((job, f"launch failed: {exc}"))
                        continue
                    job.pid, job.start_ticks = proc.pid, proc.start_ticks
                    job.attempts += 1
                    self.store.add_event(job.id, t, "start", f"pid {proc.pid} attempt {job.attempts}")
                job.state = "running"
                job.run_since = t
                self.running_jobs.add(job.id)
                if job.first_start is None:
                    job.first_start = t
                self.store.update_job(job.id, state="running", first_start=job.first_start, pid=job.pid,
                                      start_ticks=job.start_ticks, attempts=job.attempts)
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
                self.executor.kill(job.id)
                self._stopped_running(job, t)
                self._final(job, "cancelled", t, note=f"mechanism: {kind}")
        for job, why in failed:
            self.engine.withdraw(job.engine_row)
            self._final(job, "failed", self._t, note=why)
            self._apply()

    def _stopped_running(self, job: Active, t: float) -> None:
        self.running_jobs.discard(job.id)
        if job.run_since is not None:
            job.run_seconds += t - job.run_since
            job.run_since = None

    def _final(self, job: Active, state: str, t: float, exit_code=None, note: str = "") -> None:
        if job.row is not None:
            self._post(job)
        self.active.pop(job.id, None)
        job.state = state
        detail = note if exit_code is None else f"exit code {exit_code}" + (f"; {note}" if note else "")
        self.store.add_event(job.id, t, state, detail)
        self.store.update_job(job.id, state=state, end_t=t, exit_code=exit_code, run_seconds=job.run_seconds,
                              charged=job.charged, unpaid=job.unpaid, preemptions=job.preemptions, note=note)
        job.row = None

    def _on_exit(self, job_id: int, code) -> None:
        job = self.active.get(job_id)
        if job is None:
            return
        t = self._t
        note = "ended while held" if job.state == "held" else ""
        if job.row is not None:
            self.engine.complete(job.row)
        self._stopped_running(job, t)
        state = "completed"
        outcome = getattr(self.executor, "outcome", None)
        if outcome is not None:  # e.g. Slurm killed it: "failed", "slurm: NODE_FAIL"
            state, why = outcome(job_id)
            note = "; ".join(x for x in (note, why) if x)
        self._final(job, state, t, exit_code=code, note=note)
        self._apply()

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

    def _post(self, job: Active) -> bool:
        """Post what ``job`` accrued since its last posting, up to the owner's balance; a
        shortfall is recorded as unpaid and marks the owner to be held. False if short."""
        if job.row is None:
            return True
        due = to_micro(self.engine.accrued(job.row)) - job.row_posted
        if due <= 0:
            return True
        paid = min(due, max(self.balance[job.owner], 0))
        if paid:
            self.store.post(self._t, "charge", user_account(job.owner), REVENUE, paid, job.id, memo=f"job {job.id}")
            self.balance[job.owner] -= paid
        job.row_posted += due
        job.charged += paid
        job.unpaid += due - paid
        self.store.update_job(job.id, charged=job.charged, unpaid=job.unpaid)
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
        (running ones suspended with SIGSTOP)."""
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
                self._admit(user, job.bid)
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
            out.append({"id": job.id, "key": float(key[row]), "command": job.command,
                        "env": {"MARKETSCHED_JOB_ID": str(job.id)},
                        "preempted": job.id in self.executor.procs})
        return out

    # ================================================================== the market thread
    def _loop(self) -> None:
        while not self._stopping:
            with self.lock:
                now = max(self._t, float(self.wall()))
                soonest, _ = self._exhaustion()
                deadline = min(self._next_charge, soonest, self.engine.next_timer())
                timeout = min(max(deadline - now, 0.0), 0.5)
            self.executor.wait(timeout)
            if self._stopping:
                break
            with self.lock:
                try:
                    with self.store.transaction():
                        self._tick_once()
                except Exception:  # keep the market alive; the error is printed and kept
                    self.last_error = traceback.format_exc()
                    traceback.print_exc()

    def _tick_once(self) -> None:
        self._now()
        changed = False
        for job_id, code in self.executor.exits():
            self._on_exit(job_id, code)
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
        """Reload state after a restart (see the module docstring)."""
        now = self._t
        for acct, bal in self.store.balances().items():
            if acct.startswith("user:"):
                self.balance[acct[5:]] = bal
        for name, _ in self.store.users():
            self.balance.setdefault(name, 0)
        first: list[Active] = []
        rest: list[Active] = []
        for r in self.store.jobs(states=ACTIVE_STATES):
            job = Active(r["id"], r["owner"], r["bid"], r["estimate"], r["command"], r["state"],
                         charged=r["charged"], unpaid=r["unpaid"], preemptions=r["preemptions"],
                         attempts=r["attempts"], first_start=r["first_start"], run_seconds=r["run_seconds"],
                         pid=r["pid"], start_ticks=r["start_ticks"])
            self.active[job.id] = job
            wd = self.executor.workdir(job.id)
            pid, ticks = job.pid, job.start_ticks
            if pid is None:  # launched, but the crash came before the database recorded it?
                pid, ticks = _proc_file(wd)
            was_running = r["state"] == "running"
            if pid is not None:
                if self.executor.adopt(job.id, pid, ticks, wd) is not None:
                    self.executor.stop(job.id)  # the mechanism decides afresh who runs
                    job.pid, job.start_ticks = pid, ticks
                    if job.state != "held":
                        job.state = "preempted"
                    self.store.add_event(job.id, now, "reattach", f"pid {pid}")
                    self.store.update_job(job.id, state=job.state, pid=pid, start_ticks=ticks)
                else:
                    code = read_exit_code(wd)
                    if code is not None:
                        self._final(job, "completed", now, exit_code=code, note="ended while the broker was down")
                        continue
                    job.pid = job.start_ticks = None
                    if job.state != "held":
                        job.state = "queued"
                    self.store.add_event(job.id, now, "requeue", "process gone without an exit code")
                    self.store.update_job(job.id, state=job.state, pid=None, start_ticks=None)
                    was_running = False
            if job.state == "held":
                continue
            (first if was_running else rest).append(job)
        self._enter(first)
        self._enter(rest)
        self._after()


def make_executor(config: MarketConfig, root: Path):
    """The executor ``config.executor`` names, for the jobs' folders under ``root``."""
    if config.executor == "slurm":
        from marketsched.live.slurm import SlurmExecutor

        return SlurmExecutor(root, partition=config.partition, slots=config.slots)
    return LocalExecutor(root)


def _proc_file(workdir: Path):
    try:
        pid, ticks = (workdir / "proc").read_text().split()
        return int(pid), int(ticks)
    except (OSError, ValueError):
        return None, None


def _number(x, what: str) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise MarketError(f"{what} must be a number, got {x!r}")
    x = float(x)
    if not math.isfinite(x):
        raise MarketError(f"{what} must be a finite number, got {x!r}")
    return x


def _bid(x) -> float:
    bid = _number(x, "bid")
    if not bid > 0:
        raise MarketError(f"bid must be a finite positive number (per second of running time), got {bid!r}")
    return bid


def _amount(x, what: str, allow_zero: bool = False) -> int:
    x = _number(x, what)
    if x < 0 or (x == 0 and not allow_zero):
        raise MarketError(f"{what} must be a positive amount, got {x!r}")
    micros = to_micro(x)
    if micros > 10**15:
        raise MarketError(f"{what} of {x!r} is larger than the market accepts (1e9)")
    return micros


def _job_id(x) -> int:
    try:
        if isinstance(x, bool):
            raise ValueError
        j = int(x)
        if str(j) != str(x).strip() and not isinstance(x, int):
            raise ValueError
        return j
    except (TypeError, ValueError):
        raise MarketError(f"job id must be a whole number, got {x!r}") from None
