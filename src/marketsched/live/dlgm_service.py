"""DLGM and P-DLGM served by ``market serve --mechanism dlgm|pdlgm``: the
:class:`~marketsched.live.dlgm.DLGMMarket` (the simulator's own DLGM policy object, Heydenreich,
Müller & Uetz 2006 as Stößer 2009, sections 5.3 and 5.4, state it) attached to a
:class:`~marketsched.live.broker.Broker`, whose users, ledger, lock, API server and web page it
shares, as the day-ahead auction does (:mod:`marketsched.live.dayahead`).

Steps of a submission (``POST /api/dlgm/jobs``; :meth:`DLGMService.submit`), under the broker's
lock: the owner's limits (active jobs, a Unix account in a multi-user market), then
:meth:`DLGMMarket.submit` (the fields checked, the stops due first, the node: the myopic best
response or the one named, the compensations from the owner to the owners of the jobs it
overtakes, one engine batch), committed in one transaction; then the broker's balance mirror is
read back from the ledger and the processes are started, frozen, thawed or killed.

Decisions
---------
* **Nodes** are the market's ``--slots`` (node ``n`` is slot ``n``; the local executor runs a
  node's job as a process with the per-job CPU limit), or on Slurm (``--executor slurm``) the
  partition's nodes, one DLGM node per Slurm node (:mod:`marketsched.live.dlgm_slurm`: ``sbatch
  -w NODE`` at a start, ``scontrol suspend``/``resume`` at a preemption); ``--slots`` must then
  equal their number.
* **The spot market is closed**: ``POST /api/jobs`` is refused (409) on a DLGM market, so no job
  is scheduled by two mechanisms and the money moves only by compensations (DLGM's payments are
  transfers between jobs; the provider gets nothing).
* **Own tables** ``dlgm_jobs`` and ``dlgm_events`` (schema version ``dlgm_schema_version`` in
  ``meta``, upgraded as the ledger's is): the broker's restart recovery reads ``jobs`` and never
  sees a DLGM job. Ledger entries name the DLGM job (``job_id``) and say ``compensation``.
* **Overrun rule** (:mod:`marketsched.live.dlgm`): a job still running at its reported run time
  is stopped then; the record is the mechanism's schedule (the stop at exactly the reported
  time), the kill follows within the loop's latency. So a served run whose jobs all ran their
  reported times replays through the simulator to the same nodes, times and payments.
* **Effects after the commit**: a process is started, frozen, thawed or killed only once the
  decision asking for it is committed (:class:`_AfterCommit`), as the broker does: a crash in
  between leaves a decision the restarted market carries out, never a process the database
  does not know.
* **Restart** (after ``kill -9`` too): the mechanism is rebuilt by replaying the recorded
  submissions (time, weight, run time, node) and early exits, in commit order, through a fresh
  DLGM market on a scripted clock (the policy is deterministic: the same queues, ratios and
  remaining times to the bit), without money (it is in the ledger). Then each job the replay says
  runs or is preempted is re-attached to its process (thawed or frozen as its state says), or
  started if it never was; one whose process ended while the market was down completes now
  (with the exit code its wrapper wrote), one whose process vanished without one completes now
  too (note ``process gone``); a waiting job (preempted, or held by a start taken back at its
  own instant) whose process ended with an exit code completes at its turn (event ``exited``:
  :mod:`marketsched.live.dlgm`'s rule for a waiting job whose process ended; one heard of before
  the crash is in the record and replayed so); a preempted job whose process vanished without
  one starts again from the beginning when it resumes (event ``relaunch``), for the reported
  time it has left; processes of ended jobs are killed. Market time goes on while the
  market is down (the broker's wall clock): the stops due meanwhile happen at their times.
"""

from __future__ import annotations

import json
from collections import Counter
from contextlib import contextmanager, nullcontext
from typing import Any

from marketsched.live.attached import JobTables, Loop, command_line
from marketsched.live.dlgm import DLGMMarket
from marketsched.platform import validation
from marketsched.platform.clock import FakeClock
from marketsched.platform.ledger import MAX_BALANCE, MICRO, upgrade_schema, user_account
from marketsched.platform.validation import MarketError, show

MECHANISMS = ("dlgm", "pdlgm")
ACTIVE = ("queued", "running", "preempted")
ENDED = ("completed", "stopped", "cancelled")  # stopped: at its reported run time (the overrun rule)
STATES = ACTIVE + ENDED
SCHEMA_VERSION = 1

_COLUMNS = (("owner", "TEXT NOT NULL REFERENCES users(name)"), ("weight", "REAL NOT NULL"),
            ("runtime", "REAL NOT NULL"), ("node", "INTEGER"), ("command", "TEXT NOT NULL"),
            ("submit_t", "REAL NOT NULL"), ("state", "TEXT NOT NULL"), ("note", "TEXT NOT NULL"))


class _AfterCommit:
    """The executor as the DLGM market sees it: each effect is queued and carried out by
    :meth:`DLGMService._flush` once the transaction that decided it has committed."""

    def __init__(self):
        self.queue: list[tuple] = []

    def launch(self, key, command, env=None):
        self.queue.append(("launch", key, command, env))

    def stop(self, key):
        self.queue.append(("stop", key))

    def cont(self, key):
        self.queue.append(("cont", key))

    def kill(self, key):
        self.queue.append(("kill", key))


class DLGMTables(JobTables):
    """The store a served :class:`DLGMMarket` writes to: its jobs and events in its own tables
    ``dlgm_jobs`` and ``dlgm_events``, its money in the broker's ledger (same connection, same
    transactions)."""

    def __init__(self, store, pending: _AfterCommit | None = None):
        self.pending = pending
        super().__init__(store, "dlgm", "DLGM job", _COLUMNS,
                         ("owner", "weight", None, "runtime", "command", "submit_t"), {"state": "queued", "note": ""})
        with store.transaction():
            upgrade_schema(store, "the DLGM market's tables", int(store.get_meta("dlgm_schema_version", 0)),
                           SCHEMA_VERSION, {1: lambda s: None}, lambda v: store.set_meta("dlgm_schema_version", v))

    @contextmanager
    def transaction(self):
        """The ledger's transaction (nested ones join the outer one); the effects queued in it
        are dropped if it fails."""
        mark = len(self.pending.queue) if self.pending is not None else 0
        try:
            with self.store.transaction():
                yield
        except BaseException:
            if self.pending is not None:
                del self.pending.queue[mark:]
            raise

    def add_event(self, job_id: int, t: float, kind: str, detail: str = "") -> None:
        """A job's event; the ``node`` event (the submission's decision) also sets its node."""
        super().add_event(job_id, t, kind, detail)
        if kind == "node":
            self.update_job(job_id, node=int(detail))


class _Replaying:
    """The store of the replay at a restart: the recorded job ids, no writes, no money checks."""

    def __init__(self, ids):
        self.ids = iter(ids)

    def transaction(self):
        return nullcontext()

    def insert_job(self, *args) -> int:
        return next(self.ids)

    def balance(self, account: str) -> int:
        return MAX_BALANCE

    def post(self, *args, **kw) -> None:
        pass

    def update_job(self, *args, **kw) -> None:
        pass

    def add_event(self, *args, **kw) -> None:
        pass


class DLGMService(Loop):
    """A DLGM (``preemptive=False``) or P-DLGM market on the broker's slots (module docstring)."""

    def __init__(self, broker, preemptive: bool, executor=None):
        self.broker = broker
        self.preemptive = bool(preemptive)
        self.name = "pdlgm" if self.preemptive else "dlgm"
        self.nodes = broker.config.slots
        if executor is None:
            from marketsched.platform.executor import LocalExecutor

            executor = LocalExecutor(broker.data / "dlgm", limits=broker.config.limits())
        hosts = getattr(executor, "nodes", None)  # Slurm: the Slurm node of each DLGM node
        if hosts is not None and len(hosts) != self.nodes:
            raise ValueError(f"a DLGM market on Slurm has one node per Slurm node: the partition has {len(hosts)} "
                             f"({', '.join(hosts)}), so serve it with --slots {len(hosts)}, not {self.nodes}")
        if hosts is not None:
            executor.place = self._node_of
        self.hosts: list[str] | None = hosts
        self.executor = executor
        self.pending = _AfterCommit()
        self._depth = 0  # nesting of _locked
        with broker.lock:
            self.tables = DLGMTables(broker.store, self.pending)
            was = broker.store.get_meta("dlgm")
            now = json.dumps({"mechanism": self.name, "nodes": self.nodes})
            if was is not None and json.loads(was) != json.loads(now):
                raise ValueError(f"this market's database holds a {json.loads(was)['mechanism']} market on "
                                 f"{json.loads(was)['nodes']} node(s): serve it as such (its queues are recorded)")
            broker.store.set_meta("dlgm", now)
            self.market = DLGMMarket(self.tables, self.nodes, self.preemptive, clock=self._clock)
            self._recover()

    def _node_of(self, job_id: int) -> int:
        """The DLGM node the market chose for ``job_id`` (the Slurm executor's ``place``)."""
        return int(self.market.mechanism.node_of[self.market.job_row[job_id]])

    def _clock(self) -> float:
        """Market time, as the broker keeps it: moved to the wall clock once at the start of
        each request or round (:meth:`_locked`), so every event of one operation has one time."""
        return self.broker._t

    # ------------------------------------------------------------------ transactions and effects
    @contextmanager
    def _locked(self):
        """The broker's lock for one request or round of the loop; the effects its committed
        transactions decided are carried out at its end (a failed transaction drops its own:
        :meth:`DLGMTables.transaction`)."""
        with self.broker.lock:
            self._depth += 1
            try:
                if self._depth == 1:
                    self.broker._now()
                yield
            finally:
                self._depth -= 1
                if self._depth == 0:
                    self._flush()

    def _flush(self) -> None:
        ex, m = self.executor, self.market
        while self.pending.queue:
            kind, key, *rest = self.pending.queue.pop(0)
            if kind == "launch":
                row = m.job_row[key]
                if m.state.get(key) != "running" or m.engine.finish_at[row] <= self._clock():
                    continue  # its reported time ran out meanwhile (the market was down): the stop follows
                try:
                    ex.launch(key, rest[0], env=rest[1], user=self.broker._run_as(m.owner[row]))
                except (OSError, MarketError) as exc:
                    with self._locked(), self.tables.transaction():
                        self.tables.add_event(key, self.broker._t, "launch failed", str(exc))
                        m.exited(key)
            elif kind == "stop":
                ex.stop(key)
            elif kind == "cont":
                if not ex.cont(key) and key not in ex.procs and key not in getattr(ex, "launched", ()):
                    # a preempted job whose process vanished while the market was down: it starts
                    # again from the beginning, for the reported time it has left
                    self.tables.add_event(key, self.broker._t, "relaunch", "its process was gone")
                    self.pending.queue.insert(0, ("launch", key, m.commands[key], {"MARKETSCHED_JOB_ID": str(key)}))
            elif kind == "kill":
                ex.kill(key)
                ex.forget(key)
            else:  # "forget": the job's end is committed, its state file goes
                ex.forget(key)

    # ------------------------------------------------------------------ requests
    def submit(self, user: str, weight, runtime, command, node=None) -> dict:
        """A job: weight (bid per second of waiting), reported run time, command, optional node."""
        b = self.broker
        command = command_line(command, b.config.max_command_bytes)
        with self._locked():
            if user not in b.balance:
                raise MarketError(f"unknown user {show(user)}", 404)
            active = Counter(self.market.owner[self.market.job_row[j]] for j, s in self.market.state.items()
                             if s in ACTIVE)[user]
            if active >= b.config.max_jobs_per_user:
                raise MarketError(f"{user} has {active} active DLGM jobs, the most this market allows one user "
                                  f"({b.config.max_jobs_per_user})", 429)
            b._run_as(user)  # 403 now, not at the launch, for an owner a multi-user market cannot run
            out = self.market.submit(user, weight, runtime, command, node)
            for name in {user, *(self.market.owner[self.market.job_row[k]] for k, _ in out["transfers"])}:
                b.balance[name] = self.tables.balance(user_account(name))
        return {**self.job(user, True, out["id"]), "completion": out["completion"], "payment": out["payment"],
                "transfers": [{"job": k, "amount": m / MICRO} for k, m in out["transfers"]]}

    def cancel(self, user: str, admin: bool, job_id) -> dict:
        """Cancel a waiting job (:meth:`DLGMMarket.cancel`: its rule; no money moves); returns the
        job with ``was`` (its state before) and ``charged`` 0 (what the cancellation cost)."""
        with self._locked(), self.tables.transaction():
            was = self.market.cancel(user, job_id, admin)
        return {**self.job(user, admin, job_id), "was": was, "charged": 0.0}

    def jobs(self, user: str, admin: bool, states=None, limit: int | None = None, before: int | None = None) -> list[dict]:
        """The caller's jobs (the administrator: all), oldest first, as the broker's ``jobs``
        gives them (``states``: a list to keep; ``limit``: the newest N; ``before``: only ids
        below it)."""
        bad = set(states or ()) - set(STATES)
        if bad:
            raise MarketError(f"unknown DLGM job state(s) {sorted(bad)}; states are {', '.join(STATES)}")
        with self._locked():
            self.market.tick()
            return [self._view(r) for r in self.tables.jobs(None if admin else user, limit or None, states, before)]

    def quote(self, weight, runtime) -> dict:
        """Every node's tentative completion time, payment and utility ``-w e - p``, best first."""
        with self._locked():
            return {"mechanism": self.name, "t": self.broker._t, "nodes": self.market.quote(weight, runtime)}

    def job(self, user: str, admin: bool, job_id) -> dict:
        job_id = validation.whole(job_id, "job id")
        with self.broker.lock:
            row = self.tables.job(job_id)
            if row is None or not (admin or row["owner"] == user):
                raise MarketError(f"no DLGM job {job_id} of yours", 404)
            v = self._view(row)
            v["events"] = self.tables.events(job_id)
            return v

    def _view(self, r: dict) -> dict:
        m = self.market
        row = m.job_row.get(r["id"])
        if row is not None:
            e = m.engine
            r["first_start"] = None if e.first_start[row] != e.first_start[row] else e.first_start[row]
            r["end_t"] = None if e.end_time[row] != e.end_time[row] else e.end_time[row]
            r["payment"] = e.payment[row]
            r["preemptions"] = e.preemptions[row]
        return r

    def status(self, user: str, admin: bool) -> dict:
        """Each node's running job and queue (WSPT order, the policy's heap order), and the
        caller's jobs (the administrator: all)."""
        with self._locked():
            self.market.tick()
            m, mech = self.market, self.market.mechanism
            nodes = []
            for n in range(self.nodes):
                k = mech.run_job[n]
                running = None
                if k >= 0:
                    running = {"id": m.row_job[k], "owner": m.owner[k], "weight": mech.v[k],
                               "ends": float(mech.run_fin[n])}
                queue = [{"id": m.row_job[j], "owner": m.owner[j], "weight": mech.v[j], "ratio": -r}
                         for r, j in sorted(mech.queue[n])]
                nodes.append({"node": n, "running": running, "queue": queue,
                              **({"host": self.hosts[n]} if self.hosts is not None else {})})
            jobs = [self._view(r) for r in self.tables.jobs(None if admin else user)]
            return {"mechanism": self.name, "t": self.broker._t, "nodes": nodes, "jobs": jobs[-100:]}

    # ------------------------------------------------------------------ the loop (attached.Loop)
    def next_event(self) -> float:
        return self.market.next_stop()

    def step(self) -> None:
        """One round: process exits (early ends), then the stops due (in time order). The exits
        of waiting jobs (held or preempted: their process ended while suspended) are heard
        first, so that a running job's end in the same scan, which may give such a job its
        turn, finds it known to have ended (it completes then, and is not continued)."""
        with self._locked():
            m = self.market
            exits = self.executor.exits()
            for key, code in sorted(exits, key=lambda e: m.state.get(e[0]) == "running"):
                with self.tables.transaction():
                    if m.state.get(key) == "running" or key in m.held or m.state.get(key) == "preempted":
                        m.exited(key, f"exit code {code}")
                        self.tables.update_job(key, note=f"exit code {code}")
                    self.pending.queue.append(("forget", key))
            m.tick()

    # ------------------------------------------------------------------ restart
    def _recover(self) -> None:
        """Rebuild the mechanism by replay, then reconcile the processes (module docstring)."""
        jobs = self.tables.jobs()
        if jobs:
            by_id = {j["id"]: j for j in jobs}
            ops = self.tables.events(kinds=("node", "completed", "cancelled", "exited"))
            clock = FakeClock(0.0)
            m = DLGMMarket(_Replaying([e["job_id"] for e in ops if e["kind"] == "node"]), self.nodes,
                           self.preemptive, clock=clock)
            for e in ops:
                clock.set(max(clock.t, e["t"]))
                if e["kind"] == "node":
                    j = by_id[e["job_id"]]
                    m.submit(j["owner"], j["weight"], j["runtime"], j["command"], node=int(e["detail"]))
                elif e["kind"] == "cancelled":
                    m.cancel("", e["job_id"], admin=True)
                else:  # an early end: of a running job, or of a waiting one's process (it ends at its turn)
                    m.exited(e["job_id"], e["detail"])
            m.store, m.clock = self.tables, self._clock
            m.commands = {j["id"]: j["command"] for j in jobs}
            self.market = m
        m = self.market
        m.executor = self.pending
        ex = self.executor
        keep = []
        with self._locked(), self.tables.transaction():
            t = self.broker._t
            for job_id in sorted(k for k, s in m.state.items()
                                 if (s in ("running", "preempted") or k in m.held) and k not in m.ended):
                proc = ex.adopt(job_id)
                if proc is not None:
                    keep.append(job_id)
                    self.tables.add_event(job_id, t, "reattach", f"pid {proc.pid}")
                    self.pending.queue.append(("cont" if m.state[job_id] == "running" else "stop", job_id))
                elif ex.recorded(job_id) is None and m.state[job_id] == "running":
                    self.pending.queue.append(("launch", job_id, m.commands[job_id],
                                               {"MARKETSCHED_JOB_ID": str(job_id)}))
                    keep.append(job_id)
                elif m.state[job_id] == "running" or ex.exit_code(job_id) is not None:
                    # ended while the market was down: a running job completes now, a waiting
                    # one at its turn; a waiting job's process gone without an exit code
                    # vanished (it starts again at its turn: ``relaunch``)
                    code = ex.exit_code(job_id)
                    note = "process gone without an exit code" if code is None else \
                        f"exit code {code}; ended while the market was down"
                    m.exited(job_id, note)
                    self.tables.update_job(job_id, note=note)
                    self.pending.queue.append(("forget", job_id))
            ex.reap(keep)
            m.tick()


def replay_recorded(store) -> dict:
    """A served DLGM run's record replayed through the simulator (:func:`run_dlgm` on the
    recorded submissions: times, weights, reported run times, and the nodes their owners named,
    events ``named``, as ``force_node``; every other job's node is the simulator's own myopic
    best response, so the policy's choices are checked), compared with what the market
    recorded. Returns ``{"jobs": [ids], "live": {...}, "simulated": {...}, "differ": [...]}``
    where each side holds per-job lists ``node``, ``first_start`` (live: the first start not
    taken back at its own instant by an ``unstart``, which made no progress), ``end``, ``preemptions``,
    and ``paid`` (micro-units each owner's account lost, per owner: the ledger's compensations
    against the simulator's payments rounded to micro-units); ``differ`` lists
    ``(job, field, live, simulated, why)`` for each job whose process ended before its reported
    run time (state ``completed``): the simulator runs reported times, so its end (and what
    follows on its node) differs, and the replay says so rather than hide it. Cancellations
    (events ``cancelled``) are given to the simulator at their times (the policy's ``cancel``);
    one the simulator finds not waiting is listed too (it cannot happen when no process ended
    early)."""
    from marketsched.mechanisms.online.dlgm import run_dlgm
    from marketsched.workloads.workload import Workload

    meta = json.loads(store.get_meta("dlgm"))
    tables = DLGMTables(store)
    jobs = tables.jobs()
    ids = [j["id"] for j in jobs]
    wl = Workload.from_columns(submit_time=[j["submit_t"] for j in jobs], runtime=[j["runtime"] for j in jobs],
                               procs=None, capacity=meta["nodes"], sort=False)
    row = {j: i for i, j in enumerate(ids)}
    cancels, submitted, named = {}, 0, {}  # a cancellation comes after the submissions recorded before it
    for e in tables.events(kinds=("node", "cancelled", "named")):
        if e["kind"] == "node":
            submitted += 1
        elif e["kind"] == "named":
            named[row[e["job_id"]]] = int(e["detail"])
        else:
            cancels[row[e["job_id"]]] = (e["t"], submitted)
    rec, pol = run_dlgm(wl, [j["weight"] for j in jobs], meta["mechanism"] == "pdlgm", cancel=cancels,
                        force_node=named)
    owners = sorted({j["owner"] for j in jobs})
    sim_paid = dict.fromkeys(owners, 0)
    for j, p in zip(jobs, rec.payment.tolist()):
        sim_paid[j["owner"]] += round(p * MICRO)
    live_paid = dict.fromkeys(owners, 0)
    for e in store.entries():
        if e["kind"] == "compensation":
            live_paid[e["from_account"][5:]] = live_paid.get(e["from_account"][5:], 0) + e["amount"]
            live_paid[e["to_account"][5:]] = live_paid.get(e["to_account"][5:], 0) - e["amount"]
    events = tables.events()

    def first(j, kinds):
        return next((e["t"] for e in events if e["job_id"] == j and e["kind"] in kinds), None)

    def first_start(j):
        """The first start not taken back at its own instant (an ``unstart``: no progress, no start)."""
        t = None
        for e in events:
            if e["job_id"] == j and e["kind"] == "start" and t is None:
                t = e["t"]
            elif e["job_id"] == j and e["kind"] == "unstart":
                t = None
        return t

    live: dict[str, Any] = {"node": [j["node"] for j in jobs], "first_start": [first_start(j) for j in ids],
            "end": [first(j, ("stopped", "completed", "cancelled")) for j in ids],
            "preemptions": [sum(e["job_id"] == j and e["kind"] == "preempt" for e in events) for j in ids],
            "paid": live_paid}
    simulated: dict[str, Any] = {"node": pol.node.tolist(), "first_start": [None if x != x else x for x in rec.first_start.tolist()], "end": rec.end_time.tolist(),
                 "preemptions": rec.preemptions.tolist(), "paid": sim_paid}
    differ = [(j["id"], "end", live["end"][i], simulated["end"][i], "its process ended before its reported run time")
              for i, j in enumerate(jobs) if j["state"] == "completed" and live["end"][i] != simulated["end"][i]]
    differ += [(ids[i], "cancel", cancels[i][0], None, "the simulator found it not waiting at its cancellation")
               for i in pol.cancel_skipped]
    return {"jobs": ids, "live": live, "simulated": simulated, "differ": differ}
