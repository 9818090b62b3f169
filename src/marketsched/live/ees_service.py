"""EES and relaxed EES served by ``market serve --mechanism ees|relaxed-ees``: the
:class:`~marketsched.live.ees.EESMarket` (the simulator's own EES policy objects, Mutz 2008,
chapters 4 and 6) attached to a :class:`~marketsched.live.broker.Broker`, whose users, ledger,
lock, API server and web page it shares, as the DLGM market does
(:mod:`marketsched.live.dlgm_service`).

The market is the very object ``market ees`` runs in the foreground: the run-or-discard rule,
the seeded and recorded Monte Carlo draws, the payments, the overrun rule, the batches and the
restart are :mod:`marketsched.live.ees`'s; this module only gives it the broker's store, clock,
executor and lock.

Steps of a submission (``POST /api/ees/jobs``; :meth:`EESService.submit`), under the broker's
lock: the fields (value, delay cost per second *or* patience in seconds, the declared run time,
CPUs in the relaxed EES, the command), then :meth:`EESMarket.submit` (the prior's support, the
owner's balance, the stops due first, one engine batch with its decisions and their payments,
committed in one transaction), then the processes the decisions started; then the broker's
balance mirror is read back from the ledger for every owner a decision charged.

Decisions
---------
* **Patience**: a job may give its patience ``P`` (seconds it would wait at most) instead of a
  delay cost; its delay cost per second is then ``value / P`` (the simulator's valuation model,
  Mutz 2008, section 8.3: ``v = w P`` and ``d = w``). Giving both is refused.
* **The spot market is closed**: ``POST /api/jobs`` is refused (409) on an EES market, so no
  job is scheduled by two mechanisms and money moves only by EES payments.
* **Own tables** ``ees_jobs`` and ``ees_events`` (beside the market's ``ees_batches`` and
  ``ees_decisions``): the broker's restart recovery reads ``jobs`` and never sees an EES job.
  Ledger entries name the EES job (``job_id``) and say ``ees payment``.
* **Processes**: the local executor, under ``DATA/ees``, with the broker's per-job limits (the
  relaxed EES: the job's CPUs); in a multi-user market each job runs as its owner's account.
* **Restart** (after ``kill -9`` too): :class:`EESMarket`'s own (the recorded batches replayed
  and checked bit for bit, the stops and planned starts due while down carried out at their
  times, the processes re-attached).
"""

from __future__ import annotations

import math
from contextlib import contextmanager

from marketsched.live.attached import JobTables, Loop, command_line
from marketsched.live.ees import MECHANISMS, EESConfig, EESMarket
from marketsched.platform import validation
from marketsched.platform.ledger import MICRO, REVENUE, user_account
from marketsched.platform.validation import MarketError, show

__all__ = ["MECHANISMS", "EESService", "EESTables"]

STATES = ("queued", "planned", "running", "completed", "stopped", "discarded", "cancelled")
_COLUMNS = (("owner", "TEXT NOT NULL REFERENCES users(name)"), ("bid", "REAL NOT NULL"),
            ("procs", "INTEGER NOT NULL"), ("estimate", "REAL NOT NULL"), ("command", "TEXT NOT NULL"),
            ("submit_t", "REAL NOT NULL"), ("state", "TEXT NOT NULL"), ("first_start", "REAL"), ("end_t", "REAL"),
            ("attempts", "INTEGER NOT NULL"), ("exit_code", "INTEGER"), ("note", "TEXT NOT NULL"))


class EESTables(JobTables):
    """The store a served :class:`EESMarket` writes to: its jobs and events in its own tables
    ``ees_jobs`` and ``ees_events``, everything else (money, meta, its batches and decisions) in
    the broker's store (same connection, same transactions)."""

    def __init__(self, store):
        super().__init__(store, "ees", "EES job", _COLUMNS,
                         ("owner", "bid", "procs", "estimate", "command", "submit_t"),
                         {"state": "queued", "attempts": 0, "note": ""})


def delay_cost_of(value, delay_cost, patience):
    """The delay cost per second a submission gives: ``delay_cost``, or ``value / patience``
    (module docstring); exactly one of the two."""
    if (delay_cost is None) == (patience is None):
        raise MarketError("give either delay_cost (per second of waiting) or patience (seconds), not "
                          + ("both" if delay_cost is not None else "neither"))
    if delay_cost is not None:
        return delay_cost
    p = validation.number(patience, "patience")
    v = validation.number(value, "value")
    if not (p > 0 and math.isfinite(p)):
        raise MarketError(f"patience must be a positive number of seconds, got {show(patience)}")
    return v / p


class EESService(Loop):
    """An EES or relaxed-EES market on the broker's ``--slots`` CPUs (module docstring)."""

    def __init__(self, broker, mechanism: str, executor=None, value=(0.0, 100.0), delay_cost=(0.0, 1.0),
                 n_draws: int = 200, seed: int = 0):
        self.broker = broker
        self.name = mechanism
        if executor is None:
            from marketsched.platform.executor import LocalExecutor

            executor = LocalExecutor(broker.data / "ees", limits=broker.config.limits())
        self.executor = executor
        config = EESConfig(mechanism, broker.config.slots, tuple(value), tuple(delay_cost), n_draws, "cached", seed,
                           max_jobs_per_user=broker.config.max_jobs_per_user).check()
        with broker.lock:
            self.tables = EESTables(broker.store)
            self.market = EESMarket(self.tables, config, self._clock, executor, run_as=broker._run_as)
            self._mirror()

    def _clock(self) -> float:
        return self.broker._now()

    @contextmanager
    def _locked(self):
        """The broker's lock for one request or round; at its end the broker's balance mirror
        is read back from the ledger for every owner the round's decisions charged."""
        with self.broker.lock:
            try:
                yield
            finally:
                self._mirror()

    def _mirror(self) -> None:
        b = self.broker
        for name in self.market.charged_owners():
            if name in b.balance:
                b.balance[name] = self.tables.balance(user_account(name))

    # ------------------------------------------------------------------ requests
    def submit(self, user: str, value, runtime, command, delay_cost=None, patience=None, cpus=None) -> dict:
        """A job: value, delay cost per second or patience, declared run time, command, CPUs."""
        b = self.broker
        command = command_line(command, b.config.max_command_bytes)
        d = delay_cost_of(value, delay_cost, patience)
        with self._locked():
            if user not in b.balance:
                raise MarketError(f"unknown user {show(user)}", 404)
            b._run_as(user)  # 403 now, not at the launch, for an owner a multi-user market cannot run
            return self.market.submit(user, value, d, runtime, command, cpus)

    def cancel(self, user: str, admin: bool, job_id) -> dict:
        """The owner (or the administrator) withdraws a job that has not ended."""
        job_id = validation.whole(job_id, "job id")
        with self._locked():
            row = self.tables.job(job_id)
            owner = row["owner"] if row is not None and admin else user
            return self.market.cancel(owner, job_id)

    def job(self, user: str, admin: bool, job_id) -> dict:
        """One job (its owner's or the administrator's view) with its events and payments."""
        job_id = validation.whole(job_id, "job id")
        with self.broker.lock:
            row = self.tables.job(job_id)
            if row is None or not (admin or row["owner"] == user):
                raise MarketError(f"no EES job {job_id} of yours", 404)
            return {**self.market.view(job_id), "events": self.tables.events(job_id)}

    def status(self, user: str, admin: bool) -> dict:
        """The queue (head first) with the head's discard threshold, the running jobs, and the
        caller's jobs (the administrator: all; the newest 100) with each one's note (a discard's
        reason and numbers)."""
        with self._locked():
            self.market.tick()
            jobs = self.tables.jobs(None if admin else user, limit=100)
            return {**self.market.status(), "t": self.broker._t, "jobs": jobs}

    def jobs(self, user: str, admin: bool, states=None, limit: int | None = None, before: int | None = None
             ) -> list[dict]:
        """The caller's jobs (the administrator: all), oldest first, in the shape of the spot
        market's list (``market list``): ``bid`` is the value, ``accrued`` what the job's owner
        paid net at the decisions it was queued in, ``run_seconds`` its running time; ``note``
        says why a job was discarded or stopped."""
        bad = set(states or ()) - set(STATES)
        if bad:
            raise MarketError(f"unknown EES job state(s) {sorted(bad)}; states are {', '.join(STATES)}")
        with self._locked():
            t = self._clock()
            rows = self.tables.jobs(None if admin else user, limit, states, before)
            paid = self._paid([r["id"] for r in rows])
            for r in rows:
                start = r["first_start"]
                end = r["end_t"] if r["end_t"] is not None else t
                r["run_seconds"] = 0.0 if start is None else max(end - start, 0.0)
                r["accrued"] = paid.get(r["id"], 0) / MICRO
            return rows

    def _paid(self, ids: list[int]) -> dict[int, int]:
        """Each job's payments net of what it received, micro-units (the ledger's entries)."""
        if not ids:
            return {}
        rows = self.tables.store._rows(
            "SELECT job_id, SUM(CASE WHEN from_account = ? THEN -amount ELSE amount END) FROM entries "
            "WHERE kind = 'ees payment' AND job_id IN (" + ", ".join("?" * len(ids)) + ") GROUP BY job_id",
            (REVENUE, *ids))
        return {int(j): int(a) for j, a in rows}

    # ------------------------------------------------------------------ the loop (attached.Loop)
    def next_event(self) -> float:
        return self.market.next_event()

    def step(self) -> None:
        """One round: process exits, the stops at declared run times, the planned starts due."""
        with self._locked():
            self.market.tick()
