"""DLGM and P-DLGM as a running market: nodes with their own WSPT queues, compensations as
ledger transfers between the jobs' owners.

The mechanism is the simulator's own policy object,
:class:`~marketsched.mechanisms.online.dlgm.DLGM` (Heydenreich, Müller & Uetz 2006, as Stößer
2009, sections 5.3 and 5.4, state it), driven by :class:`DLGMEngine`, the live engine with the
one column DLGM reads that a priority market never knows: each job's reported run time still to
do. The market's slots are DLGM's nodes (node ``n`` is slot ``n``).

Steps of a submission (weight ``w`` = bid per second of waiting, reported run time ``d``,
optionally a node):

1. the fields are checked (:mod:`marketsched.platform.validation`; a node that does not exist
   is refused with 400 naming it);
2. the policy's tentative feedback of every node for the job (:meth:`DLGM.quote`); the node is
   the job's myopic best response (largest ``-w e^(n) - p^(n)``, lowest node on ties: the
   registry default) or the one it names (recorded: event ``named`` before the decision's
   ``node``, so that a replay forces only the nodes the owners named and checks the policy's
   own choices);
3. the compensations are the policy's: ``w~_k * d`` to the owner of every job ``k`` the job
   overtakes on its node (the waiting jobs of a lower ratio and, under P-DLGM, the running job
   it preempts). Each transfer is rounded once to micro-units. The owner must hold their sum,
   or the job is refused (402) and nothing is recorded;
4. one engine batch (the policy decides, on the forced node so that the decision is the one
   priced), the transfers posted, then the engine's effects carried out (start, preempt,
   resume) by the executor, if one is given.

**Overrun rule** (a decision; the thesis's model runs every job exactly its reported time): a
job is *stopped at its reported run time*. At the moment a running job's reported time is used
up (:meth:`DLGMMarket.next_stop`, then :meth:`DLGMMarket.tick`) it is killed and
reported to the mechanism as completed (state ``stopped``), so its node is free at exactly the
time the mechanism announced and nobody behind it waits longer than their tentative completion
time. A job whose process ends earlier completes then (state ``completed``): its node frees
early, which only helps the jobs behind it; what was paid at arrival stands (DLGM fixes
payments at arrival from the reports). A recorded run whose jobs all ran their reported times
replays through the simulator to the same nodes, starts, preemptions and payments; a job that
ended early makes the replay differ from its end on (the simulator runs reported times).

**A waiting job whose process ended** (a decision; in the model a job's run happens on its node
when its turn comes). A start taken back at its own instant (the engine's ``unstart``: the job is
*held*, queued again with its process suspended) or a preemption may come after the job's
process has ended: a short command ends before the suspend takes effect, or between the start
and the taking back. When the market hears of that exit (:meth:`DLGMMarket.exited`, event
``exited``) the job keeps its place in its node's queue, and at its turn it starts and completes
at that same instant (state ``completed``): its process is not continued (there is none), nobody
waits for its reported run time, and the jobs behind it start at once. Why at its turn and not
at once: the mechanism's record stays the simulator's (the job's node, first start, preemptions
and payments are the replay's; only its end differs, as for any job that ends early), and the
waits it was compensated for at its displacement are waits in the record. Money: none moves;
what it paid and received stands (DLGM's payments are fixed at arrival from the reports). An
exit the market has not heard of by the job's turn is heard while the job runs: it completes
then, as a running job does.

**Cancellation rule** (a decision; the thesis and Heydenreich, Müller & Uetz 2006 have no
cancellation): :meth:`DLGMMarket.cancel` takes a *waiting* job (queued, or preempted and back in
its node's queue) out of the market; a running job is refused (409: it runs to its reported run
time, which bounds what it can take), as is a job that ended (409) or another user's (404).
Money: none moves. What the job paid at its arrival stays with the owners of the jobs it
overtook (a refund would take money from them on the canceller's say-so), and what it received
from the jobs that overtook it stays with its owner (it was displaced). The jobs behind it on
its node move up and complete earlier than their tentative times. The cancellation is recorded
(event ``cancelled`` at its time) and the replay (:func:`~marketsched.live.dlgm_service.replay_recorded`)
gives it to the simulator (:class:`~marketsched.mechanisms.online.dlgm.DLGM`'s ``cancel``), so a
run with cancellations replays to the same nodes, times and payments.

Money: the mechanism's payments are transfers between jobs (nodes get none), so each arrival
moves money from its owner to the owners it overtakes and the market keeps nothing.
"""

from __future__ import annotations

import math
import secrets
from typing import Any

from marketsched.engine.records import FinalState
from marketsched.mechanisms.online.dlgm import DLGM
from marketsched.platform import validation
from marketsched.platform.engine import LiveEngine
from marketsched.platform.ledger import DEPOSITS, user_account
from marketsched.platform.tokens import hash_token
from marketsched.platform.validation import MarketError

INF = math.inf
MIN_RUNTIME, MAX_RUNTIME = 1e-3, 1e9  # reported run time, seconds (a ratio divides by it)
MAX_COMMAND_BYTES = 65536  # a command line, UTF-8
PAYMENT_REQUIRED = 402


class DLGMEngine(LiveEngine):
    """The live engine with each job's reported run time still to do (``remaining``), kept as
    the simulator keeps it: set at arrival, and at a stop ``finish_at - now`` where
    ``finish_at = start + remaining`` (:class:`~marketsched.engine.simulator.Simulator`), so a
    preempted job's remaining time and ratio are the simulator's to the bit."""

    def __init__(self, policy, capacity: int, clock):
        self.remaining: list[float] = []
        self.finish_at: list[float] = []
        self.progressed: list[bool] = []  # the row has run for a positive time
        self.on_nodes: set[int] = set()  # running rows (at most one per node)
        super().__init__(policy, capacity, clock)

    def preempt(self, j: int) -> None:
        """Stop running row ``j``. A row that started at this very instant (by an earlier batch
        of the same clock time: each live submission, exit and stop is a batch of its own) has
        made no progress: as in the simulator, where the same events form one batch and the job
        is displaced before the batch's starts, it did not run and is not preempted (Stößer
        2009, section 5.4: a preemption interrupts positive progress; the effect ``unstart``:
        the market takes its process back)."""
        if self.run_start[j] == self.now and self.running[j]:
            self._stop(j)
            if not self.progressed[j]:
                self.first_start[j] = math.nan
            self._effect("unstart", j)
            return
        super().preempt(j)

    def batch(self, arrivals=(), completed=(), withdrawn=(), withdrawn_state: int = int(FinalState.KILLED),
              rebids=(), capacity: int | None = None) -> range:
        """:meth:`LiveEngine.batch`; an arrival's ``key`` is its reported run time. DLGM's nodes
        are fixed (each keeps its own queue), so a change of capacity is refused."""
        if capacity is not None and capacity != self.capacity:
            raise ValueError(f"DLGM's nodes are fixed at {self.capacity}: a capacity change to {capacity} is not supported")
        for a in arrivals:
            self.remaining.append(float(a[1]))
            self.finish_at.append(INF)
            self.progressed.append(False)
        try:
            return super().batch(arrivals, completed, withdrawn, withdrawn_state, rebids)
        except Exception:
            del self.remaining[self.n_jobs:]  # the rows the engine did not keep
            del self.finish_at[self.n_jobs:]
            del self.progressed[self.n_jobs:]
            raise

    def _started(self, j: int) -> None:
        self.finish_at[j] = self.now + self.remaining[j]
        self.on_nodes.add(j)

    def _stopped(self, j: int) -> None:
        self.on_nodes.discard(j)
        if self.now > self.run_start[j]:
            self.progressed[j] = True
        if self.finish_at[j] != INF:
            self.remaining[j] = self.finish_at[j] - self.now
        self.finish_at[j] = INF

    def finish(self, j: int) -> None:
        super().finish(j)
        self.remaining[j] = 0.0

    def overrun(self, t: float) -> list[int]:
        """Running rows whose reported run time is used up at ``t`` (the overrun rule)."""
        return sorted(j for j in self.on_nodes if self.finish_at[j] <= t)

    def next_end(self) -> float:
        """When the first running row's reported run time is used up (``inf``: none runs)."""
        return min((self.finish_at[j] for j in self.on_nodes), default=INF)


class DLGMMarket:
    """A DLGM (``preemptive=False``) or P-DLGM market on ``nodes`` slots, its money in ``store``
    (a :class:`~marketsched.platform.ledger.Store`, or an object with the methods used here: the
    served market's :class:`~marketsched.live.dlgm_service.DLGMTables`).

    ``clock`` returns market seconds; ``executor`` (optional) carries out the decisions on real
    processes: ``launch(key, command, env=...)``, ``stop(key)``, ``cont(key)``, ``kill(key)``.
    """

    def __init__(self, store: Any, nodes: int, preemptive: bool = False, clock=None, executor=None):
        validation.whole(nodes, "nodes")
        self.store = store
        self.preemptive = bool(preemptive)
        self.mechanism = DLGM([], [], preemptive=self.preemptive)
        self.clock = clock
        self._at: float | None = None  # the time of the stop being processed (see tick)
        self.engine = DLGMEngine(self.mechanism, nodes, self._tick)
        self.executor = executor
        self.nodes = int(nodes)
        self.row_job: list[int] = []  # engine row -> job id
        self.job_row: dict[int, int] = {}
        self.owner: list[str] = []  # engine row -> owner
        self.state: dict[int, str] = {}  # job id -> queued, running, preempted, completed, stopped
        self.commands: dict[int, str] = {}
        # jobs whose start was taken back at its own instant (``unstart``): queued again, their
        # process suspended, continued when they start (a job's command never runs twice)
        self.held: set[int] = set()
        # waiting jobs (held or preempted) whose process has ended: they complete at their turn
        self.ended: set[int] = set()

    # ------------------------------------------------------------------ users and money
    def add_user(self, name: str, deposit: float = 0.0) -> str:
        """A new user with ``deposit`` on their account; returns their token."""
        t = self._tick()
        token = secrets.token_urlsafe(32)
        with self.store.transaction():
            self.store.add_user(name, hash_token(token), False, t)
            micros = validation.amount(deposit, "deposit", allow_zero=True)
            if micros:
                self.store.post(t, "deposit", DEPOSITS, user_account(name), micros, memo="deposit")
        return token

    def balance(self, name: str) -> int:
        return self.store.balance(user_account(name))

    # ------------------------------------------------------------------ the bid language
    def _fields(self, weight, runtime, node=None) -> tuple[float, float, int | None]:
        w = validation.bid(weight)
        d = validation.number(runtime, "runtime")
        if not MIN_RUNTIME <= d <= MAX_RUNTIME:
            raise MarketError(f"runtime (the reported run time) must be a number of seconds from {MIN_RUNTIME:g} "
                              f"to {MAX_RUNTIME:g}, got {d!r}")
        if node is not None:
            n = validation.whole(node, "node", lo=0)
            if not 0 <= n < self.nodes:
                raise MarketError(f"node {n} does not exist: this market's nodes are 0 to {self.nodes - 1}")
            node = n
        return w, d, node

    def quote(self, weight, runtime) -> list[dict]:
        """Every node's tentative completion time, payment and utility ``-w e^ - p^`` for a job
        of reported ``(weight, runtime)`` submitted now (step 2 of DLGM), best node first."""
        w, d, _ = self._fields(weight, runtime)
        self.tick()
        t = self._tick()
        e, p, _ = self.mechanism.quote(w, d, t)
        rows = [{"node": n, "completion": float(e[n]), "payment": float(p[n]),
                 "utility": float(-w * e[n] - p[n])} for n in range(self.nodes)]
        return sorted(rows, key=lambda r: (-r["utility"], r["node"]))

    # ------------------------------------------------------------------ jobs
    def submit(self, user: str, weight, runtime, command: str, node=None) -> dict:
        """Accept a job and decide at once (see the module's steps)."""
        w, d, forced = self._fields(weight, runtime, node)
        if not isinstance(command, str) or not command.strip() or "\x00" in command:
            raise MarketError("command must be a non-empty string without NUL characters: the command line to run")
        size = len(validation.utf8(command, "command"))
        if size > MAX_COMMAND_BYTES:
            raise MarketError(f"command is {size} bytes long, more than the {MAX_COMMAND_BYTES} this market accepts", 413)
        try:
            self.balance(user)
        except KeyError:
            raise MarketError(f"unknown user {validation.show(user)}", 404) from None
        self.tick()  # jobs whose reported time is up leave first
        t = self._tick()
        e, p, cost = self.mechanism.quote(w, d, t)
        named = forced is not None
        if forced is None:
            forced = int(cost.argmin())  # the policy's own choice: its first best node
        row = self.engine.n_jobs
        transfers = self._compensations(w, d, forced, t)
        need = sum(m for _, m in transfers)
        have = self.balance(user)
        if need > have:
            raise MarketError(f"the compensations on node {forced} come to {need / 1e6:.6f} but {user} holds "
                              f"{have / 1e6:.6f}", PAYMENT_REQUIRED)
        with self.store.transaction():
            job_id = self.store.insert_job(user, w, 1, d, command, t)
            self.mechanism.force_node[row] = forced
            self.engine.batch(arrivals=[(w, d, 0.0, 1)])
            self.row_job.append(job_id)
            self.job_row[job_id] = row
            self.owner.append(user)
            self.state[job_id] = "queued"
            self.commands[job_id] = command
            for k, micros in transfers:
                self.store.post(t, "compensation", user_account(user), user_account(self.owner[k]), micros,
                                job_id=job_id, memo=f"overtakes job {self.row_job[k]} on node {forced}")
            if named:  # the owner's choice, which a replay must be told (the policy's own is checked)
                self.store.add_event(job_id, t, "named", str(forced))
            self.store.add_event(job_id, t, "node", str(forced))
            self._apply()
        return {"id": job_id, "node": forced, "completion": float(e[forced]), "payment": float(p[forced]),
                "transfers": [(self.row_job[k], m) for k, m in transfers]}

    def _compensations(self, w: float, d: float, n: int, t: float) -> list[tuple[int, int]]:
        """The policy's transfers for a newcomer (ratio ``w/d``) on node ``n`` at ``t``:
        ``v~_k * d`` micro-units to each job ``k`` it overtakes there (step 3 of the module's
        steps): the waiting jobs of a lower ratio and, under P-DLGM, the running job whose
        ratio on its remaining time is lower."""
        mech = self.mechanism
        rho = w / d
        out = [(k, mech.v[k] * d) for _, k in mech.queue[n] if mech.ratio[k] < rho]
        k = mech.run_job[n]
        if self.preemptive and k >= 0:
            rem = mech.run_fin[n] - t
            if not mech.v[k] / rem >= rho:
                out.append((k, mech.v[k] * d))
        out.sort()
        return [(k, validation.to_micro(x)) for k, x in out if validation.to_micro(x) > 0]

    def tick(self) -> list[int]:
        """Stop the jobs whose reported run time is used up by now (the overrun rule); returns
        their ids. Each stop is a batch of its own *at the time the job's reported run time ran
        out*, in time order (a job that starts at one stop may be stopped by a later one), so
        the node frees at exactly the announced time however late the caller looks: the
        market's record is the mechanism's schedule, and the process is killed when this runs
        (a served market's loop, a submission, a restart after the market was down)."""
        now = float(self.clock())
        out: list[int] = []
        while (t := self.engine.next_end()) <= now:
            self._at = max(t, self.engine.now)
            try:
                rows = self.engine.overrun(self._at)
                with self.store.transaction():
                    self.engine.batch(completed=rows)
                    for j in rows:
                        self._end(self.row_job[j], "stopped")
                    self._apply()
            finally:
                self._at = None
            out += [self.row_job[j] for j in rows]
        return out

    def cancel(self, user: str, job_id, admin: bool = False) -> str:
        """Cancel waiting job ``job_id`` of ``user`` (the administrator: anyone's), by the
        cancellation rule of the module. Steps: the stops due first (:meth:`tick`: a job whose
        turn came is running by now); the checks (404 not the caller's, 409 running or ended);
        one engine batch withdrawing its row; the event; a preempted or held job's suspended
        process is killed (one whose process ended has none). Returns the job's state before the cancellation."""
        job_id = validation.whole(job_id, "job id", lo=1)
        self.tick()
        row = self.job_row.get(job_id)
        if row is None or not (admin or self.owner[row] == user):
            raise MarketError(f"no DLGM job {job_id} of yours", 404)
        was = self.state[job_id]
        if was == "running":
            raise MarketError(f"DLGM job {job_id} is running on node {self.mechanism.node_of[row]}: a running job "
                              f"runs to its reported run time (at {self.engine.finish_at[row]:g}) and cannot be "
                              "cancelled; only a waiting job can", 409)
        if was not in ("queued", "preempted"):
            raise MarketError(f"DLGM job {job_id} already ended ({was}): there is nothing to cancel", 409)
        with self.store.transaction():
            self.engine.batch(withdrawn=[row])
            self._end(job_id, "cancelled")
            if (was == "preempted" or job_id in self.held) and job_id not in self.ended \
                    and self.executor is not None:
                self.executor.kill(job_id)  # only a preempted or held job has a process
            self.held.discard(job_id)
            self.ended.discard(job_id)
            self._apply()
        return was

    def exited(self, job_id: int, detail: str = "") -> None:
        """The process of ``job_id`` ended before its reported run time. Steps: the stops due
        first (:meth:`tick`: a job whose reported run time ran out before now is stopped at that
        time); then a running job completes now; a waiting job with a process (held or
        preempted) keeps its place and completes at its turn (the module's rule for a waiting
        job whose process ended; event ``exited`` now, with ``detail``, e.g. its exit code); any
        other job (ended, or queued without a process) is left as it is."""
        self.tick()
        state = self.state.get(job_id)
        if state == "running":
            j = self.job_row[job_id]
            with self.store.transaction():
                self.engine.batch(completed=[j])
                self._end(job_id, "completed")
                self._apply()
        elif (state == "preempted" or job_id in self.held) and job_id not in self.ended:
            with self.store.transaction():
                self.ended.add(job_id)
                self.store.add_event(job_id, self._tick(), "exited", detail)

    def _end(self, job_id: int, state: str) -> None:
        self.state[job_id] = state
        self.store.update_job(job_id, state=state)
        self.store.add_event(job_id, self.engine.now, state)
        if self.executor is not None and state == "stopped":
            self.executor.kill(job_id)

    def _apply(self) -> None:
        """Carry out the engine's effects; a job that starts whose process has ended (the
        module's rule for a waiting job whose process ended) completes at once, in a batch of
        its own at the same instant, and the effects of that batch follow."""
        done = self._effects()
        while done:
            self.engine.batch(completed=done)
            for j in done:
                self.ended.discard(self.row_job[j])
                self._end(self.row_job[j], "completed")
            done = self._effects()

    def _effects(self) -> list[int]:
        """The engine's pending effects carried out; returns the rows started whose process had
        ended (to be completed, see :meth:`_apply`)."""
        done = []
        for kind, row, t in self.engine.drain():
            job_id = self.row_job[row]
            if kind == "start":
                resumed = self.state[job_id] == "preempted"
                held = job_id in self.held
                self.held.discard(job_id)
                self.state[job_id] = "running"
                self.store.add_event(job_id, t, "resume" if resumed else "start")
                self.store.update_job(job_id, state="running")
                if job_id in self.ended:  # nothing to continue: it completes at this instant
                    done.append(row)
                elif self.executor is not None:
                    if resumed or held:
                        self.executor.cont(job_id)
                    else:
                        self.executor.launch(job_id, self.commands[job_id],
                                             env={"MARKETSCHED_JOB_ID": str(job_id)})
            elif kind == "unstart" and not self.engine.progressed[row]:  # never ran: back in the queue
                self.state[job_id] = "queued"
                self.store.add_event(job_id, t, "unstart")
                self.store.update_job(job_id, state="queued")
                self.held.add(job_id)
                if self.executor is not None:  # suspended, not killed: its command never runs twice
                    self.executor.stop(job_id)
            elif kind in ("preempt", "unstart"):
                self.state[job_id] = "preempted"
                self.store.add_event(job_id, t, "preempt")
                self.store.update_job(job_id, state="preempted")
                if self.executor is not None:
                    self.executor.stop(job_id)
        return sorted(j for j in done if self.state[self.row_job[j]] == "running")

    def _tick(self) -> float:
        return self._at if self._at is not None else float(self.clock())

    def next_stop(self) -> float:
        """When the next running job's reported run time is used up (``inf``: none runs)."""
        return self.engine.next_end()
