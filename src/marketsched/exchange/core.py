"""The exchange: participants, periodic clearing, contracts, execution, SLA monitoring, billing.

It plays the trading, contract management and SLA enforcement and billing components of
Stößer's resource market layer (Stößer 2009, section 2.3, fig. 2.2). All state is in its
database (:class:`~marketsched.exchange.store.ExchangeStore`): an exchange killed at any point
and started again on the same file loses no committed order or contract, and re-attaches the
jobs still running (:meth:`Exchange.recover`).

Time comes from an injected ``clock`` (seconds of exchange time; tests move a fake clock by
hand). Slot ``s`` is ``[s * slot_seconds, (s + 1) * slot_seconds)``.

Each call of :meth:`Exchange.tick`:

1. **Clearing**, once ``period_seconds`` have passed since the last one
   (:meth:`Exchange.clear`): requests whose first slot has passed expire, offers whose last
   slot has passed expire, the open book from the next slot on is cleared with the library
   (:mod:`.book`), every match becomes a contract and its request is filled. The book is read
   from a snapshot, the mechanism runs outside any transaction and the result is committed in
   one short transaction (:mod:`.clearing`); ``exchange run`` computes it in a worker thread
   while the next steps go on, and commits it at a later tick.
2. **Execution**: a pending contract on a local node whose CPUs are lost moves to free
   capacity of the same provider, if there is some (:meth:`Exchange.move_lost`); a pending
   contract whose window has begun is started on its provider's backend, contained to what it bought (:mod:`.providers`: a cgroup with the node's CPUs, the
   contract's share of them, its memory, a process limit; Slurm: ``--cpus-per-task``, ``--mem``).
3. **SLA monitoring and billing** (:meth:`Exchange.settle`), one transaction per contract,
   exactly once, by the rules of docs/exchange.md, "Who is at fault" (the evidence:
   :mod:`.providers`):

   * *delivered*: the job ran from inside its window and either ended by itself, whatever its
     exit status and however it ended (``exit 200``, ``kill -9 $$``, out of its contracted
     memory: what the user's command does is the user's outcome), or was still running when
     its window ended (the exchange stops it then); and it was given the contracted resources
     as measured (its cgroup's limits; Slurm's accounting). The user pays the contract's user
     price to the exchange, the exchange pays the provider its provider price.
   * *failed* (the provider's fault; only what its side controls): the provider could not
     start the job, had still not started it when its window ended (a Slurm job left
     pending), its side ended the job (Slurm: a failed node, a preemption, a cancel by someone
     other than the job's account and the exchange), or the job was given less than the
     contract as measured. The provider pays the contract's penalty to the user; no price is
     paid.
   * *lapsed*: the window passed before the exchange started the job (the exchange was down),
     or the exchange could not run it as its user's Unix account (below): nobody pays. A crash
     of the exchange between a job's launch and its go leaves nothing running and the
     contract pending again (:meth:`Exchange.recover`): it starts inside its window or lapses.

**Whose account a job runs as.** In single-user mode (``exchange run --single-user``, the
default when not root) every contract job runs as the exchange's own account. An exchange that
runs as root otherwise runs each contract job as the Unix account its user is mapped to
(``marketsched exchange unix DATA USER ACCOUNT``, the exchange's counterpart of the live
market's ``user add --unix``), through the live market's executor (job folder owned by that
account, mode 0700); a user with no account, or one mapped to root, gets no job run (the
contract lapses, with a note saying why). A job never runs as root unless the operator asked
for single-user mode as root.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from marketsched.platform.executor import RunAs

from . import capacity, distributed
from .book import ClearingBook
from .clearing import STALE_RETRIES, Gathers, Worker, clear_now, commit, snapshot
from .orders import (
    MAX_NODES_PER_PROVIDER,
    MAX_PRICE,
    PROVIDER_KINDS,
    check_answer_seconds,
    check_mechanism,
    check_name,
    check_node,
    check_offer,
    check_party_cpus,
    check_request,
)
from .provider_protocol import AgentGathers
from .providers import Backend, Contracted, awaiting
from .store import (
    CLEARING,
    FINAL_CONTRACT_STATES,
    MICRO,
    OPEN_CONTRACT_STATES,
    STOPPED_RAN,
    STOPPED_UNSTARTED,
    ExchangeStore,
    commitment,
    provider_account,
    stop_recorded,
    to_micro,
    user_account,
)

if TYPE_CHECKING:
    from .egg import EggMarket


def create_exchange(store: ExchangeStore, *, slot_seconds: float, period_seconds: float, mechanism: str,
                    k: float = 0.5, alpha: float = 10.0, penalty: float = 1.0, seed: int = 0,
                    epoch: float = 0.0, deposits: bool = False, egg: dict | None = None,
                    answer_seconds: float = 0.0) -> None:
    """Set an exchange's settings once, in a new database; ValueError naming a bad one.
    ``deposits``: a user's request must be covered by its deposited balance (else users trade
    on credit). ``egg``: Egg mode's settings (:func:`.egg.default_settings`; the default ones
    when the mechanism is ``egg`` and this is None). ``answer_seconds``: the distributed mode's
    providers answer through their agents over the API within this many seconds
    (:mod:`.provider_protocol`; 0: they are answered in the exchange's process)."""
    for name, value in (("slot_seconds", slot_seconds), ("period_seconds", period_seconds)):
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise ValueError(f"exchange setting {name!r} must be a number of seconds > 0, got {value!r}")
    check_mechanism(mechanism, k)
    if not (isinstance(alpha, (int, float)) and math.isfinite(alpha) and alpha >= 1):
        raise ValueError(f"exchange setting 'alpha' must be a number >= 1 (Stößer 2009, eq. 4.1), got {alpha!r}")
    if not (isinstance(penalty, (int, float)) and math.isfinite(penalty) and penalty >= 0):
        raise ValueError(f"exchange setting 'penalty' must be a number >= 0 (times the contract's price), "
                         f"got {penalty!r}")
    check_answer_seconds(answer_seconds, mechanism)
    if mechanism == "egg":
        from .egg import default_settings, save_settings

        with store.transaction():
            save_settings(store, egg if egg is not None else default_settings())
            deposits = True  # Egg collects the price at the award (Kang & Parkes 2007, step 1d)
    elif egg is not None:
        raise ValueError(f"Egg settings are for the mechanism 'egg', not {mechanism!r}")
    store.init_settings(slot_seconds=float(slot_seconds), period_seconds=float(period_seconds), mechanism=mechanism,
                        k=float(k), alpha=float(alpha), penalty=float(penalty), seed=int(seed), epoch=float(epoch),
                        deposits=int(bool(deposits)), answer_seconds=float(answer_seconds))


class Exchange:
    """The exchange on ``store`` at the time ``clock()``; ``backends`` makes the backend of a
    provider (a row of the providers table) when one of its contracts must run (None: an
    exchange that only takes orders and clears, e.g. the command line or a replay).

    ``background``: :meth:`tick` computes a due clearing in a worker thread and commits it at a
    later tick, so that contract windows keep being enforced while the mechanism runs
    (``marketsched exchange run``); otherwise a tick clears before it returns (the mechanism
    still runs outside any write transaction, :mod:`.clearing`)."""

    def __init__(self, store: ExchangeStore, clock: Callable[[], float],
                 backends: Callable[[dict], Backend] | None = None, background: bool = False):
        settings = store.settings()
        if settings is None:
            raise ValueError(f"the exchange at {store.path} is not set up (marketsched exchange init)")
        self.store = store
        self.clock = clock
        self.settings = settings
        self._factory = backends
        self._backends: dict[str, Backend] = {}
        self.background = background
        self._clearing: Worker | None = None  # the clearing being computed (background)
        self._stale = 0  # stale background results in a row
        # the distributed mode's providers answer through their agents (None: in this process)
        self.gathers = AgentGathers(store.path, clock, settings["answer_seconds"]) \
            if settings["mechanism"] == distributed.MECHANISM and settings["answer_seconds"] > 0 else None
        self._egg: EggMarket | None = None  # Egg mode's market (:mod:`.egg`), made when first used

    @property
    def egg(self) -> EggMarket:
        """Egg mode's market (:class:`.egg.EggMarket`); ValueError if the exchange clears periodically."""
        if self._egg is None:
            if self.settings["mechanism"] != "egg":
                raise ValueError(f"this exchange clears with {self.settings['mechanism']!r}, not Egg")
            from .egg import EggMarket

            self._egg = EggMarket(self.store, self.settings)
        return self._egg

    def _periodic(self, what: str) -> None:
        if self.settings["mechanism"] == "egg":
            raise ValueError(f"this exchange runs Egg (Kang & Parkes 2007): {what} are not taken; users bid "
                             "(POST /api/egg/bids) and providers post price tables (POST /api/egg/prices)")

    # ------------------------------------------------------------------ time
    def slot(self, t: float | None = None) -> int:
        """The slot holding time ``t`` (default: now)."""
        return math.floor((self.clock() if t is None else t) / self.settings["slot_seconds"])

    def slot_start(self, slot: int) -> float:
        return slot * self.settings["slot_seconds"]

    # ------------------------------------------------------------------ participants and orders
    def join(self, provider: str, kind: str = "local", partition: str | None = None, by_party: bool = False,
             checked: bool = False) -> None:
        """A provider joins: ``local`` (nodes on this machine's CPUs) or ``slurm`` (contracts
        run in Slurm partition ``partition``; None: Slurm's default). ``by_party``: the provider
        joins by itself (the HTTP API); ``checked``: the operator's command line. Either way a
        Slurm provider's partition must be one Slurm knows, and neither it nor any of its nodes
        may be sold by another provider (:func:`.capacity.check_partition_free`). The library
        called with neither (simulations, tests of the mechanisms) is not bound."""
        check_name("provider", "name", provider)
        if kind not in PROVIDER_KINDS:
            raise ValueError(f"provider field 'kind' must be one of {', '.join(PROVIDER_KINDS)}, got {kind!r}")
        if partition is not None:
            if kind != "slurm":
                raise ValueError("provider field 'partition' is for slurm providers only")
            check_name("provider", "partition", partition)
        bound = (by_party or checked) and kind == "slurm"
        parts = capacity.slurm_partitions() if bound else {}
        if bound:
            capacity.canonical_partition(partition, parts)  # one Slurm knows
        with self.store.transaction():
            if bound:
                busy = {c["provider"] for c in self.store.contracts(OPEN_CONTRACT_STATES)}
                capacity.check_partition_free(provider, partition, self.store.providers(), parts, busy)
            self.store.add_provider(provider, kind, self.clock(), partition)

    def add_node(self, provider: str, name: str, cpu: int, mem: int, cpus: list[int] | None = None,
                 by_party: bool = False, checked: bool = False) -> int:
        """Add a node to ``provider`` (at most ``MAX_NODES_PER_PROVIDER`` nodes that have not left).
        ``by_party``: the provider registers it itself (the HTTP API), not the operator; then a
        local provider's node names the CPUs of this machine backing it, none of them backing
        another provider's node, and a Slurm provider's names none (Slurm places its jobs).
        ``checked``: the operator's command line; the node is bound by the CPU-unit rules
        (:func:`.capacity.check_operator_node`: a local node at most one unit per CPU it names,
        none named: this machine's CPUs now; a Slurm provider's nodes at most its partition's
        CPUs), but may share CPUs or a partition with another provider's."""
        node = check_node(provider, name, cpu, mem, cpus)
        joined = self.store.provider(provider)
        parts = capacity.slurm_partitions() if (by_party or checked) and joined and joined["kind"] == "slurm" else {}
        here = capacity.cpus_here() if checked and not by_party and joined and joined["kind"] == "local" else set()
        with self.store.transaction():
            p = self.store.provider(provider)
            if checked and not by_party and p is not None:
                node = capacity.check_operator_node(p, node, self.store.nodes().values(), here, lambda: parts)
            if by_party and p is not None:
                busy = {c["node_id"] for c in self.store.contracts(OPEN_CONTRACT_STATES)}
                nodes = self.store.nodes().values()
                check_party_cpus(p, node.get("cpus"), nodes, busy)
                if p["kind"] == "local" or (p["kind"] == "agent" and node.get("cpus")):
                    capacity.check_local_units(node["cpu"], node["cpus"])
                elif p["kind"] == "slurm":
                    sold = sum(n["cpu"] for n in nodes if n["provider"] == provider and n["left_t"] is None)
                    part = capacity.canonical_partition(p["partition"], parts)
                    capacity.check_slurm_units(provider, node["cpu"], part, sold)
                ever = self.store.rows("SELECT COUNT(*) FROM ex_nodes WHERE provider = ?", (provider,))[0][0]
                if ever >= 4 * MAX_NODES_PER_PROVIDER:  # joining and leaving must not grow the table without end
                    raise ValueError(f"node field 'name': provider {provider!r} has registered {ever} nodes (those "
                                     f"that left included), the most a provider may ({4 * MAX_NODES_PER_PROVIDER})")
            active = self.store.rows("SELECT COUNT(*) FROM ex_nodes WHERE provider = ? AND left_t IS NULL",
                                     (provider,))[0][0]
            if active >= MAX_NODES_PER_PROVIDER:
                raise ValueError(f"node field 'name': provider {provider!r} has {active} nodes, the most one "
                                 f"provider may have ({MAX_NODES_PER_PROVIDER})")
            return self.store.add_node(node)

    def leave(self, provider: str, node: str | None = None) -> list[int]:
        """Node ``node`` of ``provider`` leaves the exchange (None: the provider leaves with all
        its nodes): its open offers are cancelled, the contracts it made stand (their jobs run,
        or the provider pays their penalties). Returns the cancelled offers' ids. In Egg mode the
        provider's table is withdrawn (:func:`.egg.withdraw`), or, when one node leaves, cut to
        what its remaining nodes can hold (:func:`.egg.cut_to_nodes`)."""
        check_name("provider", "name", provider)
        if node is not None:
            check_name("node", "name", node)
        if self.settings["mechanism"] == "egg":  # Egg: the table is withdrawn, or cut to the nodes left (.egg)
            from .egg import cut_to_nodes, withdraw

            try:
                with self.store.transaction():
                    cancelled = self.store.leave(provider, node, self.clock())
                    if node is None:
                        withdraw(self.egg, provider, self.clock())
                    else:
                        cut_to_nodes(self.egg, provider, node, self.clock())
                return cancelled
            except BaseException:
                self.egg.drop()
                raise
        return self.store.leave(provider, node, self.clock())

    def submit_request(self, user: str, value: float, cpu: int, mem: int, first_slot: int, last_slot: int,
                       command: str) -> int:
        """A user's request (Stößer 2009, section 3.4.1); returns its order id."""
        self._periodic("requests")
        order = check_request(user, value, cpu, mem, first_slot, last_slot, command, after_slot=self.slot())
        with self.store.transaction():
            self.check_runnable(user)
            if self.settings["deposits"]:
                need = commitment(order["value"], order["cpu"], order["first_slot"], order["last_slot"])
                money = self.store.available(user)
                if need > money["available"]:
                    raise ValueError(
                        f"request field 'value': the request may cost up to {need / MICRO:.6f} (value x CPU x slots), "
                        f"more than the {money['available'] / MICRO:.6f} {user!r} has available (deposited balance "
                        f"{money['balance'] / MICRO:.6f} less {money['committed'] / MICRO:.6f} committed to open "
                        "requests and unsettled contracts): deposit more or bid less")
            return self.store.insert_order("request", order, self.clock())

    def deposit(self, user: str, amount: float) -> None:
        """``amount`` currency units reach user ``user``'s account (the operator's deposit)."""
        check_name("deposit", "user", user)
        if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not (
                math.isfinite(amount) and 0 < amount <= MAX_PRICE) or to_micro(amount) < 1:
            raise ValueError(f"deposit field 'amount' must be a finite number from 0.000001 to {MAX_PRICE:g}, "
                             f"got {amount!r}")
        self.store.deposit(user, to_micro(amount), self.clock())

    def submit_offer(self, provider: str, node: str, reserve: float, first_slot: int, last_slot: int) -> int:
        """A provider's offer of one of its nodes over ``[first_slot, last_slot]``; refused if
        an open offer of the same node overlaps it."""
        self._periodic("offers")
        order = check_offer(provider, node, reserve, first_slot, last_slot, after_slot=self.slot())
        with self.store.transaction():
            node_id = self.store.node_id(provider, node)
            spec = self.store.nodes(node_id)[node_id]
            for o in self.store.orders("offer", "open", node_id=node_id):
                if o["first_slot"] <= order["last_slot"] and order["first_slot"] <= o["last_slot"]:
                    raise ValueError(f"offer fields 'first_slot'/'last_slot': node {node!r} of {provider!r} already "
                                     f"has open offer {o['id']} for slots {o['first_slot']}-{o['last_slot']}")
            order.update(node_id=node_id, cpu=spec["cpu"], mem=spec["mem"])
            return self.store.insert_order("offer", order, self.clock())

    def cancel(self, owner: str, order_id: int) -> None:
        """Withdraw an open order of ``owner`` (a user's request or a provider's offer); the
        contracts it already made stand."""
        with self.store.transaction():
            order = self.store.order(order_id)
            if order is None or order["owner"] != owner:
                raise ValueError(f"cancel field 'order': {owner!r} has no order {order_id}")
            if order["state"] != "open":
                raise ValueError(f"cancel field 'order': order {order_id} is {order['state']}, not open")
            self.store.close_order(order_id, "cancelled", self.clock())

    # ------------------------------------------------------------------ clearing
    def due(self) -> bool:
        rows = self.store.rows("SELECT MAX(t) FROM ex_periods")
        last = rows[0][0]
        return last is None or self.clock() >= last + self.settings["period_seconds"]

    def clear(self) -> int:
        """Clear the open book now (see the module docstring); returns the period number."""
        return clear_period(self.store, self.settings, self.clock(), self.slot() + 1, gathers=self.gathers)

    def clearing(self) -> bool:
        """Whether a background clearing is being computed."""
        return self._clearing is not None

    def step_clearing(self) -> int | None:
        """The clearing part of :meth:`tick`; the period number when one committed. In
        background mode: commit a computed clearing (a stale one is started again from a new
        snapshot; after ``STALE_RETRIES`` in a row, the clearing is made inside the write
        transaction), or start one in a worker thread when a period is due."""
        if not self.background:
            return self.clear() if self.due() else None
        job = self._clearing
        if job is not None:
            if not job.done():
                return None
            self._clearing = None
            period = commit(self.store, job.snap, job.result(), self.settings)
            if period is not None:
                self._stale = 0
                return period
            self._stale += 1
            if self._stale > STALE_RETRIES:
                self._stale = 0
                return clear_now(self.store, self.settings, self.clock(), self.slot() + 1, stale_retries=0,
                                 gathers=self.gathers)
        elif not self.due():
            return None
        self._clearing = Worker(snapshot(self.store, self.clock(), self.slot() + 1), self.settings, self.gathers)
        return None

    # ------------------------------------------------------------------ execution
    def backend(self, provider: str) -> Backend:
        if provider not in self._backends:
            if self._factory is None:
                raise RuntimeError("this exchange has no backends: it cannot run contracts")
            row = next(p for p in self.store.providers() if p["name"] == provider)
            backend = self._backends[provider] = self._factory(row)
            if hasattr(backend, "bind"):  # an agent provider's (:mod:`.agent_runs`) reads the exchange's database
                backend.bind(self.store, self.clock)
        return self._backends[provider]

    def recover(self) -> None:
        """After a (re)start: re-attach every contract that was starting or running. One whose
        command never ran (the exchange died before its go: :meth:`Backend.reattach` False) goes
        back to pending, so it is started inside its window or lapses unbilled: a crash of the
        exchange never makes its provider pay (docs/exchange.md, "Who is at fault")."""
        if self.settings["mechanism"] == "egg":
            from .egg_run import recover

            return recover(self)
        now = self.clock()
        for c in self.store.contracts(("starting", "running")):
            got = self.backend(c["provider"]).reattach(c["id"])
            if got is True:
                with self.store.transaction():
                    self.store.update_contract(c["id"], state="running")
            elif got is False and c["state"] == "starting":  # nothing of it ever ran
                with self.store.transaction():
                    self.store.update_contract(c["id"], state="pending", started_t=None)
            else:  # it ran ("running" is recorded after the go) and has ended
                self.job_ended(c, None if got is False else got, now)

    def tick(self) -> None:
        """One step: clear if a period is due (in background mode: start or commit a clearing,
        :meth:`step_clearing`), then start, monitor and settle contracts. Egg mode has no
        clearing: its step runs its contracts and settles their escrow (:mod:`.egg_run`)."""
        if self.settings["mechanism"] == "egg":
            from .egg_run import step

            return step(self, self.egg)
        self.step_clearing()
        self.execute()

    def execute(self) -> None:
        """Settle the running contracts whose job ended or whose window is over, then start
        the pending ones that are due (in that order, so that a request's next contract never
        starts beside its previous one: :meth:`start`)."""
        ended: dict[int, int | None] = {}
        for backend in list(self._backends.values()):
            ended.update(backend.ended())
        now = self.clock()
        nodes = None
        due = []
        for c in self.store.contracts(("running",)):
            if c["id"] in ended:
                self.job_ended(c, ended[c["id"]], now)
            elif now >= c["end_t"] + getattr(self.backend(c["provider"]), "grace", 0.0) and \
                    not awaiting(self.backend(c["provider"]), c["id"]):  # a Slurm end judged by its accounting
                due.append(c)  # an agent's run is judged by its report (.agent_runs)
        # whether each job had started, read for all before any stop: a stop frees CPUs on which
        # the provider (e.g. Slurm's scheduler) may start another's waiting job at once; and
        # recorded first, so a crash in a stop keeps the verdict's fact
        ran = {c["id"]: c["note"] == STOPPED_RAN if stop_recorded(c) else self.backend(c["provider"]).running(c["id"])
               for c in due}
        with self.store.transaction():
            for c in due:
                if not stop_recorded(c):  # by an exchange that died before its verdict: that fact holds
                    self.store.update_contract(c["id"], ended_t=now,
                                               note=STOPPED_RAN if ran[c["id"]] else STOPPED_UNSTARTED)
        for c in due:
            backend = self.backend(c["provider"])
            nodes = nodes or self.store.nodes()
            used = backend.usage(c["id"], Contracted.of(c, nodes[c["node_id"]]))
            backend.stop(c["id"])
            self.window_over(c["id"], ran[c["id"]], used, now)
        now = self.clock()
        pending = self.store.contracts(("pending",))
        lost: dict[int, str] = {}
        if pending:  # contracts on lost capacity move first, if they can (move_lost)
            moves = self.store.move_count()
            lost = self.move_lost(pending, now)
            if self.store.move_count() != moves:
                pending = self.store.contracts(("pending",))
                nodes = None
        for c in pending:
            if now >= c["end_t"]:
                self.settle(c["id"], "lapsed", now, note="the window passed before the exchange started the job")
            elif now >= c["start_t"]:
                if c["id"] in lost:
                    self.settle(c["id"], "failed", now, note=f"the provider could not start the job: {lost[c['id']]}")
                    continue
                nodes = nodes or self.store.nodes()
                self.start(c, nodes[c["node_id"]], now)

    def move_lost(self, pending: list[dict], now: float) -> dict[int, str]:
        """Move the contracts not yet started (``pending``) off capacity that is lost: a local
        node whose CPUs are not all here any more (:func:`.capacity.cpus_here`). Returns, for
        each contract that stays on lost capacity, why (it fails, at its provider's cost, when
        its window begins, unless the CPUs come back or room appears first).

        The rule (the exchange's; Stößer 2009 does not treat lost capacity after the clearing):

        1. A pending contract on a local node that names CPUs, one or more of them not here,
           is at risk. Contracts of Slurm providers are not moved (Slurm places their jobs in
           the partition; what it ends is read from its accounting).
        2. It moves to the provider's first node, in id order, that has not left, has all its
           CPUs here, and has the contract's CPU units and memory free in every slot of the
           contract's window (its registered capacity less every contract on it, in any
           state, as the clearing counts sold capacity). The provider sold the capacity and
           still has it: the contract keeps its prices and penalty, and nobody pays more.
        3. The move is recorded (``ex_moves``, with the last clearing before it), so that a
           clearing computed meanwhile is stale and the replay moves it at the same point.
        4. A contract with nowhere to go stays; if its CPUs are still lost when its window
           begins, it fails: the provider pays the penalty (docs/exchange.md, "Who is at fault").
        """
        kinds = {p["name"]: p["kind"] for p in self.store.providers()}
        nodes = self.store.nodes()
        here: set[int] | None = None
        out: dict[int, str] = {}
        for c in pending:
            node = nodes[c["node_id"]]
            if kinds.get(c["provider"]) != "local" or not node["cpus"] or now >= c["end_t"]:
                continue
            if here is None:
                here = capacity.cpus_here()
            gone = sorted(set(node["cpus"]) - here)
            if not gone:
                continue
            why = f"the node's CPU(s) {gone} are not here (offline or out of the exchange's CPU set)"
            target = self._room_for(c, nodes, here)
            if target is None:
                out[c["id"]] = f"{why}, and no other node of the provider has its CPU and memory free in its window"
                continue
            with self.store.transaction():
                if self.store.contract(c["id"])["state"] != "pending":
                    continue
                self.store.move_contract(c["id"], target["id"], now,
                                         f"{why}: moved from node {node['name']} to node {target['name']}")
            nodes = self.store.nodes()
        return out

    def _room_for(self, c: dict, nodes: dict[int, dict], here: set[int]) -> dict | None:
        """The provider's first node (id order) other than ``c``'s that has not left, has all
        its CPUs here, and has ``c``'s CPU units and memory free in each slot of ``c``'s window."""
        first, last = c["first_slot"], c["last_slot"]
        for node_id in sorted(nodes):
            n = nodes[node_id]
            if (n["provider"] != c["provider"] or node_id == c["node_id"] or n["left_t"] is not None
                    or not set(n["cpus"] or ()) <= here):
                continue
            cpu = [n["cpu"]] * (last - first + 1)
            mem = [n["mem"]] * (last - first + 1)
            for o_cpu, o_mem, lo, hi in self.store.rows(
                    "SELECT cpu, mem, first_slot, last_slot FROM ex_contracts WHERE node_id = ? AND last_slot >= ? "
                    "AND first_slot <= ?", (node_id, first, last)):
                for s in range(max(lo, first), min(hi, last) + 1):
                    cpu[s - first] -= o_cpu
                    mem[s - first] -= o_mem
            if min(cpu) >= c["cpu"] and min(mem) >= c["mem"]:
                return n
        return None

    def start(self, c: dict, node: dict, now: float) -> None:
        """Start contract ``c``'s job on ``node`` now, as its user's account (:meth:`run_as`).

        **One request, one job** (the exchange's rule; Stößer 2009 lets a job's slots lie on
        different nodes, section 3.4.1, and says nothing of moving a process): a request the
        clearing split over several contracts (consecutive windows, each on its own node) is
        one job. Its command starts with its first contract. A later contract starts it again
        only if the job has not ended by itself: if it did, in an earlier contract, the later
        one is settled delivered without running anything (the provider held the capacity; the
        job chose to end, as within one contract). A job still running when its contract's
        window ends is stopped (that contract is delivered) and restarted from the beginning on
        the next contract's node: the exchange does not move processes between nodes.
        ``MARKETSCHED_REQUEST`` names the request, so a job can keep its own progress (in its
        user's home) and resume from it."""
        earlier = self.store.rows(
            "SELECT id FROM ex_contracts WHERE request_id = ? AND first_slot < ? AND state = 'delivered' "
            "AND (note LIKE ? OR note LIKE ?) ORDER BY first_slot DESC LIMIT 1",
            (c["request_id"], c["first_slot"], EXITED + "%", DONE_BEFORE + "%"))
        if earlier:
            self.settle(c["id"], "delivered", now, note=f"{DONE_BEFORE} (in contract {earlier[0][0]}): "
                                                        "nothing left to run")
            return
        with self.store.transaction():
            self.store.update_contract(c["id"], state="starting", started_t=now)
        env = {"MARKETSCHED_CONTRACT": c["id"], "MARKETSCHED_REQUEST": c["request_id"],
               "MARKETSCHED_PROVIDER": c["provider"],
               "MARKETSCHED_NODE": node["name"], "MARKETSCHED_FIRST_SLOT": c["first_slot"],
               "MARKETSCHED_LAST_SLOT": c["last_slot"], "MARKETSCHED_WINDOW_END": c["end_t"]}
        try:
            try:  # no account, or a provider this exchange does not run: the exchange's doing, no penalty
                user = self.run_as(c["user"])
                backend = self.backend(c["provider"])
            except ValueError as exc:
                self.settle(c["id"], "lapsed", now, note=f"the exchange could not run the job: {exc}")
                return
            backend.start(c["id"], self._command(c), env, node["cpus"], user=user, contracted=Contracted.of(c, node))
        except OSError as exc:
            self.settle(c["id"], "failed", now, note=f"the provider could not start the job: {exc}")
            return
        with self.store.transaction():
            self.store.update_contract(c["id"], state="running")

    # Whose account contract jobs run as: True = the exchange's own (``exchange run
    # --single-user``: one person, a demo); False = each user's mapped Unix account (needs
    # root); None = single-user unless the exchange runs as root.
    single_user: bool | None = None

    def run_as(self, user: str) -> RunAs | None:
        """The Unix account ``user``'s contract jobs run as: None (the exchange's own account)
        in single-user mode (:attr:`single_user`; by default when not root); else the account
        the user is mapped to (``marketsched exchange unix``), and ValueError naming the
        problem if there is none or it is root. A job never runs as root unless the operator
        asked for single-user mode as root."""
        single = self.single_user if self.single_user is not None else os.geteuid() != 0
        if single:
            return None
        accounts = self.store.unix_accounts()
        if user not in accounts:
            raise ValueError(f"user {user!r} has no Unix account, and this exchange runs every user's jobs as the "
                             f"user's account (marketsched exchange unix DATA {user} ACCOUNT; or run the exchange "
                             "with --single-user to run every job as its own account)")
        return RunAs.lookup(accounts[user])

    def check_runnable(self, user: str) -> None:
        """Refuse a request of ``user`` (ValueError naming the fix) when its contract job could
        never run: the exchange runs multi-user (as ``exchange run`` last started,
        :meth:`ExchangeStore.run_mode`) and ``user`` has no Unix account. Before any run the
        mode is unknown and the request is taken (a multi-user run then lapses its contract,
        and warns at its start). Steps: read the recorded mode; if multi-user, look the user up
        in the mapping."""
        if self.store.run_mode() != "multi-user" or user in self.store.unix_accounts():
            return
        raise ValueError(f"request field 'user': user {user!r} has no Unix account, and this exchange runs each "
                         "contract job as its user's account (multi-user mode), so the request could never run: the "
                         f"operator maps one with `marketsched exchange unix DATA {user} ACCOUNT`")

    def _command(self, c: dict) -> str:
        return self.store.rows("SELECT command FROM ex_orders WHERE id = ?", (c["request_id"],))[0][0]

    def window_over(self, contract_id: int, ran: bool, used: dict | None, now: float) -> None:
        """The verdict at a contract's window's end (its job stopped by the exchange): failed if
        its provider had not started the job (``ran`` False), or had not given it what was
        contracted (``used``'s shortfall); else delivered."""
        if not ran:
            self.settle(contract_id, "failed", now, note="the provider had not started the job by its window's end")
        elif used and used.get("shortfall"):
            self.settle(contract_id, "failed", now, used=used,
                        note=f"contracted resources not delivered: {used['shortfall']}")
        else:
            self.settle(contract_id, "delivered", now, used=used, note="served its whole window")

    def job_ended(self, c: dict, code: int | None, now: float) -> None:
        """Contract ``c``'s job ended with exit status ``code``: by the exchange's own stop at its
        window's end if that stop was recorded (``ended_t`` set, the note saying whether the
        job had started: the exchange died between the stop and the verdict), judged then by
        :meth:`window_over`, never as the provider's cancel; else before its window's end,
        judged by :meth:`finish`."""
        if not stop_recorded(c):
            return self.finish(c, code, now)
        backend = self.backend(c["provider"])
        used = backend.usage(c["id"], Contracted.of(c, self.store.nodes(c["node_id"])[c["node_id"]]))
        backend.fault(c["id"])  # what the backend knows of the end (the exchange's cancel): not asked
        self.window_over(c["id"], c["note"] == STOPPED_RAN, used, now)

    def finish(self, c: dict, code: int | None, now: float) -> None:
        """A contract's job ended before its window did, with exit status ``code`` (None:
        unknown): the SLA's verdict by the rules of docs/exchange.md, "Who is at fault". Only
        what the provider's side controls, as its backend tells it (:meth:`Backend.fault`) or as
        measured (:meth:`Backend.usage`), makes it fail; whatever the command did (any exit
        status, any signal it sent itself, running out of its contracted memory) is the
        user's, and the provider is paid."""
        backend = self.backend(c["provider"])
        nodes = self.store.nodes(c["node_id"])
        used = backend.usage(c["id"], Contracted.of(c, nodes[c["node_id"]]))
        why = backend.fault(c["id"])
        if why is not None:
            what = "the provider failed" if getattr(backend, "grace", 0.0) else "the provider ended the job"
            self.settle(c["id"], "failed", now, code=code, used=used, note=f"{what}: {why}")
        elif used and used.get("shortfall"):
            self.settle(c["id"], "failed", now, code=code, used=used,
                        note=f"contracted resources not delivered: {used['shortfall']}")
        else:
            note = backend.delivered_note(c["id"], EXITED) if hasattr(backend, "delivered_note") else EXITED
            self.settle(c["id"], "delivered", now, code=code, used=used, note=note)

    def settle(self, contract_id: int, state: str, now: float, code: int | None = None,
               cpu_seconds: float | None = None, note: str = "", used: dict | None = None) -> bool:
        """Record the contract's outcome and bill it, once (False if it was settled already).
        ``used``: the job's measured usage (:meth:`Backend.usage`): its CPU seconds are
        recorded, its peak memory appended to the note."""
        if used:
            if cpu_seconds is None:
                cpu_seconds = used.get("cpu_seconds")
            if used.get("peak_memory") is not None:
                note = f"{note}; peak memory {used['peak_memory'] / 2**20:.1f} MiB"
        with self.store.transaction():
            c = self.store.contract(contract_id)
            if c["state"] in FINAL_CONTRACT_STATES:
                return False
            self.store.update_contract(contract_id, state=state, ended_t=now, exit_code=code,
                                       cpu_seconds=cpu_seconds, note=note)
            user, provider = user_account(c["user"]), provider_account(c["provider"])
            if state == "delivered":
                self.store.post(now, "user-price", user, CLEARING, c["user_price"], contract_id, "contract price")
                self.store.post(now, "provider-price", CLEARING, provider, c["provider_price"], contract_id,
                                "contract price")
            elif state == "failed":
                self.store.post(now, "penalty", provider, user, c["penalty"], contract_id, "SLA penalty")
        return True

    def open_contracts(self) -> list[dict]:
        return self.store.contracts(OPEN_CONTRACT_STATES)

    def close(self) -> None:
        for backend in self._backends.values():
            backend.close()
        self._backends.clear()


EXITED = "the job exited by itself"  # a contract's note when its job ended before its window did
DONE_BEFORE = "the request's job had ended by itself"  # a later contract of that request (Exchange.start)


def clear_period(store: ExchangeStore, settings: dict, t: float, base_slot: int,
                 last_order: int | None = None, mechanism: str | None = None,
                 caps: dict[int, int] | None = None, gathers: Gathers | None = None) -> int:
    """One clearing at time ``t`` of the orders up to id ``last_order`` (default: all
    committed) from slot ``base_slot`` on; returns the period number. The book is read from a
    snapshot, the mechanism runs outside any transaction, and the result is committed in one
    short transaction (:mod:`.clearing`: a stale result is recomputed). ``mechanism``: the one
    to use (a replay's recorded one; default: the exchange's, with the fallback of the exact
    clearing, :mod:`.book`); ``caps``: the capacity the nodes could sell (a replay's recorded
    one; default: checked now, :mod:`.capacity`); ``gathers``: how the distributed mode reaches
    the providers (:mod:`.provider_protocol`; default: in this process)."""
    return clear_now(store, settings, t, base_slot, last_order, mechanism, caps=caps, gathers=gathers)


def recorded_book(store: ExchangeStore, period: int) -> ClearingBook:
    """The book period ``period`` cleared, as recorded."""
    rows = store.rows("SELECT book FROM ex_periods WHERE id = ?", (period,))
    if not rows:
        raise KeyError(f"no clearing period {period}")
    return ClearingBook.from_json(rows[0][0])
