"""EES and relaxed EES as a running market: a batch queue whose head runs or is discarded, with
expected-externality payments on the ledger (Mutz 2008, chapters 4 and 6).

The mechanism is the simulator's own policy object
(:class:`~marketsched.mechanisms.online.ees_driver.EESPolicy` or
:class:`~marketsched.mechanisms.online.ees_driver.RelaxedEESPolicy`, fed one submission at a
time by :mod:`marketsched.live.ees_policy`) inside a
:class:`~marketsched.platform.engine.LiveEngine`; the market is a front-end on the platform (a
:class:`~marketsched.platform.ledger.Store` for jobs, events and money, an executor for the
processes), as :class:`~marketsched.live.dlgm.DLGMMarket` is.

Why a market of its own and not a rule of the priority broker: the broker's bid language (a bid
per second), its admission rule (a balance covering seconds of the highest price), its charging
(per second of running time, read from the payment scheme's ``accrued``), its holds (a user out
of money is taken out of the mechanism) and its restart (jobs re-enter the mechanism afresh) are
all per-second pricing. EES has none of them: a job reports a value, a delay cost and a run
time; money moves only at decisions, between the queued jobs' owners; a decision is final (a
discarded job never comes back), so a restart must restore the queue and the Monte Carlo
generator exactly rather than decide afresh. The broker serves this very market beside it
(``market serve --mechanism ees|relaxed-ees``, :mod:`marketsched.live.ees_service`: its users,
ledger, lock, API and page), and ``market ees`` runs it in the foreground
(:mod:`marketsched.live.ees_cli`).

Steps of a submission (value ``v``, delay cost ``d`` per second of waiting, declared run time
``r`` in seconds, and in the relaxed EES a CPU count ``k``):

1. the fields are checked: ``v`` and ``d`` within the declared prior's support (the
   expected-externality payments are expectations over that prior, Mutz 2008, section 4.1.3: a
   report outside it is not a type the mechanism knows), ``r`` from ``MIN_RUNTIME`` to
   ``MAX_RUNTIME``, ``k`` from 1 to the machine's CPUs (EES: every job holds the whole machine,
   section 4.1.1, so ``k`` is the machine's size); a bad field is refused with 400 naming it;
2. admission: the owner's balance must be positive and cover ``v`` (decision: a job may not
   report a run worth more than its owner holds; the thesis has no budgets, so a payment is
   posted in full even when it takes a balance below zero, and an owner in debt cannot submit);
   otherwise 402 and nothing is recorded;
3. one engine batch: the policy decides (EES: if the machine is idle, the head runs if
   ``v >= sum_j d_j r`` and is discarded otherwise, eqs. 4.1-4.3, and the next head is decided
   on; relaxed EES: section 6.1.3's delays from two greedy schedules, eqs. 6.1-6.3, an accepted
   head starting now or at its planned start);
4. in the same database transaction: the batch's inputs (one row of ``ees_batches``), each
   decision (``ees_decisions``: the snapshot, the numbers, every queued job's payment and the
   generator's state before it), the payments as ledger entries, the jobs' new states; a
   discarded job's note gives the reason with the numbers;
5. after the commit, the executor launches the started jobs (exactly once: a crash before the
   commit leaves nothing started, a crash after it leaves a start the restart carries out).

**Payments** (eq. 4.4 / 6.4): at every decision every queued job ``m`` pays ``mu_m`` (negative:
receives). Each is rounded once to micro-units and posted between the owner and the market's
revenue account (``mu > 0``: owner to revenue; ``mu < 0``: revenue to owner). The estimator's
payments sum to zero (``cached``, ``shared``), so the revenue account holds only the rounding
(at most half a micro-unit per queued job per decision). The decision records keep the
unrounded amounts: the ledger's entry for a decision and job equals ``to_micro`` of the
simulator's payment for that decision and job.

**Overrun rule**: a job is stopped at its declared run time (the thesis's *maximal* running time,
section 4.1.1: the delay it causes the others was charged for ``r``, and the relaxed EES plans
every later start on it). A job whose process ends earlier completes then.

**Batches**: the simulator batches every event of one time stamp (completions, then arrivals,
then one decision). Here a submission's batch holds the exits, stops and planned starts due at
its time too, and a scan of the executor's exits holds the stops and planned starts due then;
two submissions are two batches. A recorded run whose submissions have distinct times replays
through the simulator to the same decisions and payments (:func:`simulate_recorded`); two
submissions at one time may be decided in other groups.

**Restart** (after kill -9): the market's state is a function of its recorded batches. A new
market replays them through a fresh policy on the recorded times, checks that every recorded
decision comes out again (the same head, outcome and payments, bit for bit), carries out at their
own market times the stops at declared run times and the planned starts that fell due while it
was down, then reconciles the running jobs with the executor: a process still running is
re-attached, one that ended while the market was down completes now (with its recorded exit
code), a start that was committed but never launched is launched now, and whatever still runs
for a job that has ended is killed.
"""

from __future__ import annotations

import json
import math
import secrets
from collections import Counter
from dataclasses import asdict, dataclass, replace

import numpy as np

from marketsched.engine.records import Records
from marketsched.engine.simulator import Simulator
from marketsched.live.ees_policy import LiveEESPolicy, LiveRelaxedEESPolicy
from marketsched.mechanisms.online.ees import ESTIMATORS, TypePrior, Uniform
from marketsched.mechanisms.online.ees_driver import EESPolicy, RelaxedEESPolicy
from marketsched.platform import validation
from marketsched.platform.engine import LiveEngine
from marketsched.platform.ledger import DEPOSITS, REVENUE, user_account
from marketsched.platform.tokens import hash_token
from marketsched.platform.validation import MarketError
from marketsched.workloads.workload import Workload

MECHANISMS = ("ees", "relaxed-ees")
MIN_RUNTIME, MAX_RUNTIME = 1e-3, 1e7  # declared run time, seconds
MAX_COMMAND_BYTES = 65536
PAYMENT_REQUIRED = 402
_ACTIVE = ("queued", "planned", "running")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS ees_batches (
    id {pk},
    t REAL NOT NULL,
    detail TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS ees_decisions (
    id {pk},
    batch BIGINT NOT NULL,
    t REAL NOT NULL,
    head BIGINT NOT NULL,
    runs INTEGER NOT NULL,
    detail TEXT NOT NULL
)
"""


@dataclass(frozen=True)
class EESConfig:
    """An EES market: ``mechanism`` (``ees`` or ``relaxed-ees``), the machine's ``cpus``, the
    declared uniform priors of the values and of the delay costs per second (Mutz 2008, section
    8.3: all preferences uniform), the Monte Carlo settings of the payments and their ``seed``,
    and (relaxed EES) ``compress``."""

    mechanism: str = "ees"
    cpus: int = 2
    value: tuple[float, float] = (0.0, 100.0)
    delay_cost: tuple[float, float] = (0.0, 1.0)
    n_draws: int = 200
    estimator: str = "cached"
    seed: int = 0
    compress: bool = True
    max_jobs_per_user: int = 100  # a user's jobs waiting or running at once (429 beyond): each decision
    # weighs the whole queue (O(I^2 S) for the cached estimator), so one party may not fill it

    def check(self) -> EESConfig:
        if self.mechanism not in MECHANISMS:
            raise ValueError(f"unknown mechanism {self.mechanism!r}; choose one of {', '.join(MECHANISMS)}")
        if isinstance(self.cpus, bool) or not isinstance(self.cpus, int) or not 1 <= self.cpus <= 10_000:
            raise ValueError(f"cpus must be a whole number from 1 to 10000, got {self.cpus!r}")
        if self.estimator not in ESTIMATORS or self.estimator == "exact":
            raise ValueError(f"estimator must be 'cached', 'shared' or 'naive', got {self.estimator!r}")
        if isinstance(self.max_jobs_per_user, bool) or not isinstance(self.max_jobs_per_user, int) \
                or not 1 <= self.max_jobs_per_user <= 10**6:
            raise ValueError(f"max_jobs_per_user must be a whole number from 1 to 1000000, got {self.max_jobs_per_user!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed must be a whole number >= 0, got {self.seed!r}")
        if isinstance(self.n_draws, bool) or not isinstance(self.n_draws, int) or not 1 <= self.n_draws <= 10**6:
            raise ValueError(f"n_draws must be a whole number from 1 to 1000000, got {self.n_draws!r}")
        for name in ("value", "delay_cost"):
            lo, hi = getattr(self, name)
            if not (math.isfinite(lo) and math.isfinite(hi) and 0 <= lo <= hi):
                raise ValueError(f"the {name} prior must be finite with 0 <= low <= high, got {(lo, hi)!r}")
        return self

    @property
    def prior(self) -> TypePrior:
        return TypePrior(value=Uniform(*self.value), delay_cost=Uniform(*self.delay_cost))

    @property
    def relaxed(self) -> bool:
        return self.mechanism == "relaxed-ees"

    def policy(self, live: bool = True, value=(), delay_cost=(), runtime=()):
        """The policy object: the live one (fed by submissions), or the simulator's with the
        given reports (:func:`simulate_recorded`)."""
        n, est, seed = self.n_draws, self.estimator, self.seed
        if live and self.relaxed:
            return LiveRelaxedEESPolicy(self.prior, n_draws=n, estimator=est, seed=seed, compress=self.compress)
        if live:
            return LiveEESPolicy(self.prior, n_draws=n, estimator=est, seed=seed)
        r = np.asarray(runtime, dtype=np.float64)
        if self.relaxed:
            return RelaxedEESPolicy(value, delay_cost, self.prior, n_draws=n, estimator=est, seed=seed, time_unit=1.0,
                                    runtime=r, compress=self.compress)
        return EESPolicy(value, delay_cost, self.prior, n_draws=n, estimator=est, seed=seed, time_unit=1.0, runtime=r)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> EESConfig:
        d = json.loads(text)
        return cls(**{**d, "value": tuple(d["value"]), "delay_cost": tuple(d["delay_cost"])})


class EESMarket:
    """An EES or relaxed-EES market on ``config.cpus`` CPUs, its state in ``store`` (a
    :class:`~marketsched.platform.ledger.Store`, or a served market's
    :class:`~marketsched.live.ees_service.EESTables` on the broker's).

    ``clock`` returns market seconds (never going back); ``executor`` (optional) carries out the
    decisions on real processes: ``launch(key, command, env=..., limits=...)``, ``kill(key)``,
    ``exits()``, and for a restart ``adopt``, ``recorded``, ``exit_code``, ``reap``.
    """

    def __init__(self, store, config: EESConfig, clock, executor=None, run_as=None):
        self.config = config.check()
        self.run_as = run_as  # owner -> the account a job runs as (a served multi-user market), or None
        self.store = store
        self.clock = clock
        self.executor = executor
        self._t = float(clock())
        pk = "BIGSERIAL PRIMARY KEY" if store.kind == "postgresql" else "INTEGER PRIMARY KEY AUTOINCREMENT"
        with store.transaction():
            for stmt in _SCHEMA.format(pk=pk).split(";"):
                if stmt.strip():
                    store._exec(stmt)
            store._ensure_account(REVENUE)
            stored = store.get_meta("ees_config")
            # the limit of jobs per user may change at a restart: it refuses submissions, which
            # record nothing, so the recorded decisions replay the same under any limit
            if stored is None or replace(EESConfig.from_json(stored), max_jobs_per_user=config.max_jobs_per_user) == config:
                store.set_meta("ees_config", config.to_json())
            else:
                raise ValueError(f"this market's database was made for {stored}; it cannot run as {config.to_json()}")
        batches = store._rows("SELECT t, detail FROM ees_batches ORDER BY id")
        if batches:  # the engine starts at the first recorded time, for the replay (_recover)
            self._t = batches[0][0]
        self.policy = config.policy()
        self.engine = LiveEngine(self.policy, config.cpus, lambda: self._t)
        self.row_job: list[int] = []  # engine row -> job id
        self.job_row: dict[int, int] = {}
        self.owner: list[str] = []  # engine row -> owner
        self.state: dict[int, str] = {}  # job id -> queued, planned, running, completed, stopped, discarded, cancelled
        self.commands: dict[int, str] = {}
        self.running: set[int] = set()  # running rows
        self.active_by_user: Counter = Counter()  # user -> jobs queued, planned or running
        self._charged: set[str] = set()  # owners whose balance a decision moved (charged_owners)
        self._replaying = False
        self._recover(batches)

    # ------------------------------------------------------------------ users and money
    def add_user(self, name: str, deposit: float = 0.0) -> str:
        """A new user with ``deposit`` on their account; returns their token."""
        if not isinstance(name, str) or not name or len(name) > 64 or not set(name) <= validation.NAME_CHARS:
            raise MarketError(f"user name must be 1-64 letters, digits, '_', '.' or '-', got {validation.show(name)}")
        micros = validation.amount(deposit, "deposit", allow_zero=True)
        t = self._now()
        token = secrets.token_urlsafe(32)
        with self.store.transaction():
            self.store.add_user(name, hash_token(token), False, t)
            if micros:
                self.store.post(t, "deposit", DEPOSITS, user_account(name), micros, memo="deposit")
        return token

    def balance(self, name: str) -> int:
        """``name``'s balance in micro-units."""
        return self.store.balance(user_account(name))

    # ------------------------------------------------------------------ the bid language
    def _fields(self, value, delay_cost, runtime, cpus) -> tuple[float, float, float, int]:
        cfg = self.config
        v = validation.number(value, "value")
        d = validation.number(delay_cost, "delay cost")
        for name, x, (lo, hi) in (("value", v, cfg.value), ("delay cost", d, cfg.delay_cost)):
            if not lo <= x <= hi:
                raise MarketError(f"{name} {x!r} is outside this market's declared prior [{lo:g}, {hi:g}] (the "
                                  "expected-externality payments are expectations over it)")
        r = validation.number(runtime, "runtime")
        if not MIN_RUNTIME <= r <= MAX_RUNTIME:
            raise MarketError(f"runtime (the declared maximal run time) must be a number of seconds from "
                              f"{MIN_RUNTIME:g} to {MAX_RUNTIME:g}, got {r!r}")
        if cpus is None:
            k = 1 if cfg.relaxed else cfg.cpus
        else:
            k = validation.whole(cpus, "cpus", lo=1)
            if cfg.relaxed and k > cfg.cpus:
                raise MarketError(f"cpus {k} is more than this machine's {cfg.cpus}")
            if not cfg.relaxed and k != cfg.cpus:
                raise MarketError(f"cpus must be {cfg.cpus}: under EES every job holds the whole machine "
                                  "(Mutz 2008, section 4.1.1); the relaxed EES packs jobs by CPU count")
        return v, d, r, k

    # ------------------------------------------------------------------ jobs
    def submit(self, user: str, value, delay_cost, runtime, command: str, cpus=None) -> dict:
        """Accept a job and decide at once (the module's steps); returns its view."""
        v, d, r, k = self._fields(value, delay_cost, runtime, cpus)
        validation.command_line(command, MAX_COMMAND_BYTES)
        try:
            have = self.balance(user)
        except KeyError:
            raise MarketError(f"unknown user {validation.show(user)}", 404) from None
        if self.active_by_user[user] >= self.config.max_jobs_per_user:
            raise MarketError(f"{user} has {self.active_by_user[user]} jobs waiting or running, the most this market "
                              f"allows one user ({self.config.max_jobs_per_user}): wait for some to end", 429)
        need = validation.to_micro(v)
        if have <= 0 or have < need:
            raise MarketError(f"balance too low: {user} holds {have / 1e6:.6f}, a job of value {v:g} needs at least "
                              "that much (and a positive balance)", PAYMENT_REQUIRED)
        t = self._now()
        ended, stops, codes = self._due(t)  # in the arrival's batch, as the simulator batches one time stamp
        with self.store.transaction():
            job_id = self.store.insert_job(user, v, k, r, command, t)
            self.store.add_event(job_id, t, "submit", json.dumps({"value": v, "delay_cost": d, "runtime": r, "cpus": k}))
            after = self._batch(t, arrivals=[[job_id, user, v, d, r, k, command]], completed=ended, stopped=stops,
                                codes=codes)
        self._carry_out(after)
        return self.view(job_id)

    def cancel(self, user: str, job_id) -> dict:
        """The owner withdraws a job that has not ended (a running one is killed); 404 if it is
        not theirs, 409 if it has ended. Payments already posted stand."""
        job_id = validation.whole(job_id, "job id")
        row = self.store.job(job_id)
        if row is None or row["owner"] != user:
            raise MarketError(f"no job {job_id} of yours", 404)
        if self.state.get(job_id) not in _ACTIVE:
            raise MarketError(f"job {job_id} already ended ({row['state']})", 409)
        self.tick()
        if self.state.get(job_id) not in _ACTIVE:
            raise MarketError(f"job {job_id} already ended ({self.state[job_id]})", 409)
        t = self._now()
        with self.store.transaction():
            after = self._batch(t, withdrawn=[job_id])
        self._carry_out(after)
        return self.view(job_id)

    def tick(self) -> list[int]:
        """Process exits (executor), stops at the declared run time and due planned starts;
        returns the ids of the jobs that ended."""
        t = self._now()
        ended, stops, codes = self._due(t)
        after: list = []
        if ended or stops or self.engine.next_timer() <= t:  # one batch, the due planned starts in it
            with self.store.transaction():
                after = self._batch(t, completed=ended, stopped=stops, codes=codes)
        self._carry_out(after)
        return sorted(ended + stops + self._caught)

    def _due(self, t: float) -> tuple[list[int], list[int], dict]:
        """What goes into a batch at ``t``: first every stop and planned start due *before*
        ``t`` is carried out in a batch of its own at its own time (market time is the plan's,
        however late the market notices: a job stopped at its declared run time ran exactly that
        long, as in the simulator); then the jobs whose processes ended (the executor's exits),
        the running jobs whose declared run time is used up at ``t`` (the overrun rule), and the
        exit codes."""
        self._caught: list[int] = []
        while (nxt := self.next_event()) < t:
            stops = [self.row_job[j] for j in sorted(self.running) if self._deadline(j) <= nxt]
            with self.store.transaction():
                after = self._batch(nxt, stopped=stops)
            self._carry_out(after)
            self._caught += stops
        self._t = t
        exits = dict(self.executor.exits()) if self.executor is not None and hasattr(self.executor, "exits") else {}
        ended = sorted(j for j in exits if self.state.get(j) == "running")
        stops = [self.row_job[j] for j in sorted(self.running) if self._deadline(j) <= t
                 and self.row_job[j] not in exits]
        return ended, stops, exits

    def next_event(self) -> float:
        """When the market must next act without a request: a running job's declared run time
        used up, or a planned start (``inf``: nothing)."""
        ends = (self._deadline(j) for j in self.running)
        return min(min(ends, default=math.inf), self.engine.next_timer())

    def _deadline(self, row: int) -> float:
        return self.engine.first_start[row] + float(self.policy.runtime[row])

    # ------------------------------------------------------------------ one batch
    def _batch(self, t: float, arrivals=(), completed=(), stopped=(), withdrawn=(), codes=None) -> list:
        """One engine batch at ``t`` and everything it decides, recorded (inside the caller's
        transaction); returns the process actions to carry out after the commit."""
        codes = codes or {}
        self._t = t
        first = self.engine.n_jobs
        done_rows = sorted(self.job_row[j] for j in (*completed, *stopped))
        gone_rows = sorted(self.job_row[j] for j in withdrawn)
        self.engine.batch(arrivals=[(a[2], a[3], a[4], a[5]) for a in arrivals], completed=done_rows,
                          withdrawn=gone_rows)
        for i, a in enumerate(arrivals):
            self.row_job.append(a[0])
            self.job_row[a[0]] = first + i
            self.owner.append(a[1])
            self.commands[a[0]] = a[6]
            self.state[a[0]] = "queued"
            self.active_by_user[a[1]] += 1
        after: list = []
        for j in (*done_rows, *gone_rows):
            self.active_by_user[self.owner[j]] -= 1
        for j in done_rows:
            self.running.discard(j)
        for j in gone_rows:
            if j in self.running:
                self.running.discard(j)
                after.append(("kill", self.row_job[j]))
        if self._replaying:
            for j in (*completed, *stopped, *withdrawn):
                self.state[j] = "ended"
        else:
            batch = self.store._exec("INSERT INTO ees_batches (t, detail) VALUES (?, ?)" + self.store._lastid,
                                     (t, json.dumps({"arrivals": [list(a[:6]) for a in arrivals],
                                                     "completed": list(completed), "stopped": list(stopped),
                                                     "withdrawn": list(withdrawn)}))).fetchone()[0]
            for j in completed:
                self._end(j, t, "completed", exit_code=codes.get(j))
                after.append(("forget", j))
            for j in stopped:
                self._end(j, t, "stopped", note=f"stopped at its declared run time "
                          f"({self.policy.runtime[self.job_row[j]]:g} s)")
                after += [("kill", j), ("forget", j)]
            for j in withdrawn:
                self._end(j, t, "cancelled", note="cancelled by its owner")
                after.append(("forget", j))
        decisions, self.policy.records = self.policy.records, []
        for dec in decisions:
            if self._replaying:
                self._replayed.append(dec)
            else:
                self._record(batch, dec)
        for kind, row, te in self.engine.drain():
            job_id = self.row_job[row]
            if kind == "start":
                self.running.add(row)
                self.state[job_id] = "running"
                if not self._replaying:
                    self.store.add_event(job_id, te, "start")
                    self.store.update_job(job_id, state="running", first_start=te, attempts=1)
                    after.append(("launch", job_id))
            elif kind == "discard":
                self.state[job_id] = "discarded"
                self.active_by_user[self.owner[row]] -= 1
            elif kind not in ("finish",):
                raise AssertionError(f"the EES policy took an unexpected action {kind} on job {job_id}")
        if not self._replaying and self.config.relaxed:
            for row, s in self.policy.committed.items():
                job_id = self.row_job[row]
                if self.state[job_id] == "queued":
                    self.state[job_id] = "planned"
                    self.store.update_job(job_id, state="planned")
                    self.store.add_event(job_id, t, "planned", f"starts at {s:g}")
        return after

    def _record(self, batch: int, dec: dict) -> None:
        """A decision's record, its payments on the ledger, its head's outcome (with the reason
        and numbers for a discard)."""
        jobs = [self.row_job[r] for r in dec["rows"]]
        head = jobs[0]
        detail = dict(dec, jobs=jobs)
        self.store._exec("INSERT INTO ees_decisions (batch, t, head, runs, detail) VALUES (?, ?, ?, ?, ?)",
                         (batch, dec["t"], head, int(dec["runs"]), json.dumps(detail)))
        n = len(jobs)
        for job_id, mu in zip(jobs, dec["payments"]):
            micros = validation.to_micro(mu)
            self._charged.add(self.owner[self.job_row[job_id]])
            acct = user_account(self.owner[self.job_row[job_id]])
            memo = f"decision on job {head}: {'runs' if dec['runs'] else 'discarded'}"
            if micros > 0:
                self.store.post(dec["t"], "ees payment", acct, REVENUE, micros, job_id, memo=memo)
            elif micros < 0:
                self.store.post(dec["t"], "ees payment", REVENUE, acct, -micros, job_id, memo=memo)
        if not dec["runs"]:
            what = ("its run time" if not self.config.relaxed else "the delay its run causes each")
            note = (f"discarded: its value {dec['value']:g} is below the delay it causes, {dec['externality']:g} "
                    f"(the sum over the {n - 1} waiting jobs of their delay cost per second x {what}"
                    + (f", {dec['runtime'][0]:g} s" if not self.config.relaxed else "") + ")")
            self._end(head, dec["t"], "discarded", note=note)

    def _end(self, job_id: int, t: float, state: str, exit_code=None, note: str = "") -> None:
        self.state[job_id] = state
        detail = note if exit_code is None else f"exit code {exit_code}" + (f"; {note}" if note else "")
        self.store.add_event(job_id, t, state, detail)
        self.store.update_job(job_id, state=state, end_t=t, exit_code=exit_code, note=note)

    def _carry_out(self, after: list) -> None:
        """The process actions of committed decisions (launch, kill, forget an ended job's
        record), in order: after the commit, so a crash between the two leaves a recorded
        decision the restart carries out, never a process the database does not know."""
        ex = self.executor
        if ex is None:
            return
        for kind, job_id in after:
            if kind == "forget":
                if hasattr(ex, "forget"):
                    ex.forget(job_id)
            elif kind == "launch":
                kw = {}
                limits = getattr(ex, "limits", None)
                if limits is not None and self.config.relaxed:
                    kw["limits"] = replace(limits, cpus=float(self.engine.procs[self.job_row[job_id]]))
                try:
                    if self.run_as is not None:
                        kw["user"] = self.run_as(self.owner[self.job_row[job_id]])
                    ex.launch(job_id, self.commands[job_id], env={"MARKETSCHED_JOB_ID": str(job_id)}, **kw)
                except (OSError, MarketError) as exc:  # it ends now, as a job whose process ended at once
                    t = self._now()
                    with self.store.transaction():
                        again = self._batch(t, completed=[job_id])
                        self.store.update_job(job_id, note=f"launch failed: {exc}")
                    self._carry_out(again)
            else:
                ex.kill(job_id)

    # ------------------------------------------------------------------ views
    def charged_owners(self) -> set[str]:
        """The owners whose balances decisions moved since the last call (for a balance cache)."""
        out, self._charged = self._charged, set()
        return out

    def decisions(self, after: int = 0) -> list[dict]:
        """The recorded decisions with an id above ``after`` (0: all), oldest first (job ids,
        outcome, numbers, payments, the generator's state before it)."""
        rows = self.store._rows("SELECT id, batch, detail FROM ees_decisions WHERE id > ? ORDER BY id", (after,))
        return [dict(json.loads(d), id=i, batch=b) for i, b, d in rows]

    def view(self, job_id: int) -> dict:
        """A job as its owner sees it: its row (state, note with a discard's reason and
        numbers) and the decisions that charged it, with its payment in each."""
        row = self.store.job(job_id)
        if row is None:
            raise MarketError(f"no job {job_id}", 404)
        v = dict(row, value=row["bid"], runtime=row["estimate"], cpus=row["procs"])
        v["payments"] = [e for e in self.store.entries(job_id=job_id) if e["kind"] == "ees payment"]
        return v

    def status(self) -> dict:
        """The queue (head first) with each job's value, delay cost and run time, the running
        jobs, and the head's discard threshold: the delay it would cause now."""
        pol = self.policy
        queue = list(pol.queue)
        rows = [{"id": self.row_job[r], "owner": self.owner[r], "value": float(pol.value[r]), "delay_cost": float(pol.d_per_second[r]),
                 "runtime": float(pol.runtime[r]), "cpus": int(self.engine.procs[r])} for r in queue]
        threshold = None
        if queue and not self.config.relaxed:  # EES: the head runs iff its value >= sum_j d_j r_head
            threshold = float(sum(pol.d_per_second[r] for r in queue[1:]) * pol.runtime[queue[0]])
        return {"mechanism": self.config.mechanism, "cpus": self.config.cpus, "queue": rows,
                "head_threshold": threshold, "running": sorted(self.row_job[r] for r in self.running)}

    # ------------------------------------------------------------------ time and restart
    def _now(self) -> float:
        self._t = max(self._t, float(self.clock()))
        return self._t

    def _recover(self, batches: list[tuple]) -> None:
        """Replay the recorded batches (the module docstring's Restart), check the decisions,
        then reconcile the running jobs with the executor."""
        if not batches:
            return
        recorded = self.decisions()
        commands = {r["id"]: r["command"] for r in self.store.jobs()}
        self._replaying = True
        self._replayed: list[dict] = []
        try:
            for t, detail in batches:
                b = json.loads(detail)
                arrivals = [[*a, commands[a[0]]] for a in b["arrivals"]]
                self._batch(t, arrivals=arrivals, completed=b["completed"], stopped=b["stopped"],
                            withdrawn=b["withdrawn"])
        finally:
            self._replaying = False
        got = [(d["rows"], d["runs"], d["payments"]) for d in self._replayed]
        want = [(d["rows"], d["runs"], d["payments"]) for d in recorded]
        if got != want:
            raise RuntimeError(f"the recorded decisions do not replay: {len(want)} recorded, {len(got)} replayed; "
                               "the database and this market's policy disagree")
        for r in self.store.jobs():
            if r["id"] in self.state:
                self.state[r["id"]] = r["state"]
        self._t = max(self._t, batches[-1][0])
        ex = self.executor
        if ex is None:
            return
        t = self._now()
        _, stops, _ = self._due(t)  # stops and planned starts due while the market was down, at their times
        ended, codes, launch = [], {}, []
        for row in sorted(self.running):
            job_id = self.row_job[row]
            if job_id in stops:
                continue
            if ex.adopt(job_id, None, None, ex.workdir(job_id)) is not None:
                continue
            if ex.recorded(job_id) is None and ex.exit_code(job_id) is None:
                launch.append(("launch", job_id))  # its start was committed, its launch never ran
                continue
            ended.append(job_id)
            codes[job_id] = ex.exit_code(job_id)
        ex.reap({self.row_job[r] for r in self.running} - set(stops))
        after = launch
        if ended or stops:
            with self.store.transaction():
                after += self._batch(t, completed=ended, stopped=stops, codes=codes)
        self._carry_out(after)


def simulate_recorded(market: EESMarket):
    """The market's recorded run through the simulator: the same arrivals (submission times,
    values, delay costs, declared run times, CPUs) with each job's measured run time (a job that
    never ran gets its declared one); returns ``(policy, records)``. ``policy.ledger`` holds the
    simulator's decisions and payments, to compare with :meth:`EESMarket.decisions`. A run with
    cancellations cannot be replayed (the simulator has no cancel)."""
    eng, pol = market.engine, market.policy
    n = eng.n_jobs
    if any(s == "cancelled" for s in market.state.values()):
        raise ValueError("a run with cancelled jobs cannot be replayed through the simulator (it has no cancel)")
    start = np.asarray(eng.first_start, dtype=np.float64)
    end = np.asarray(eng.end_time, dtype=np.float64)
    r = pol.runtime[:n].copy()
    ran = ~np.isnan(start) & ~np.isnan(end)
    runtime = np.where(ran, end - start, r)
    w = Workload.from_columns(submit_time=eng.submit, runtime=runtime, runtime_estimate=r, procs=eng.procs,
                              capacity=market.config.cpus, sort=False)
    sim_policy = market.config.policy(live=False, value=pol.value[:n].copy(), delay_cost=pol.delay_cost[:n].copy(),
                                      runtime=r)
    records: Records = Simulator(w, sim_policy).run()
    return sim_policy, records
