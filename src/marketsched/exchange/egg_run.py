"""Running Egg contracts: start, watch and judge their jobs, then settle their escrow at ``tau*``.

One :func:`step` per exchange tick (:meth:`marketsched.exchange.core.Exchange.tick` in Egg mode),
on the exchange's provider backends (:mod:`.providers`) and by its fault table (docs/exchange.md,
"Who is at fault"; :mod:`.egg` for Egg's reading of it):

1. each running contract whose job ended is judged: *failed* if the provider's side ended it
   (:meth:`Backend.fault`) or it was given less than contracted as measured
   (:meth:`Backend.usage`), else *delivered*; one still running at ``tau*`` is stopped then:
   *failed* if the provider had not started it (read for every contract due before any is
   stopped, :func:`_record_stops`), or gave less than contracted; else *delivered*. A
   Slurm job that ended before ``tau*`` whose end Slurm's accounting has not settled yet is
   judged by that end once it has (:meth:`.providers.SlurmBackend.awaiting`), even after ``tau*``;
2. each pending contract: *lapsed* once ``tau*`` has passed unstarted (the exchange was down) or
   if the exchange cannot run it as its user's account; *failed* if the provider had no node with
   room, its node left the exchange (or the provider left) or it could not start it; else started,
   contained to its CPU units and memory;
3. the escrow of every judged contract whose ``tau*`` has come is paid or refunded and the
   provider's reliability recorded (:func:`.egg.settle_escrow`).

A contract of a provider of kind ``agent`` is run by the provider's own agent process
(:mod:`.agent_runs`): step 2 publishes its run, and step 1 judges it by the agent's report or,
without one, at its report deadline (``tau*`` + the backend's ``grace``), never at ``tau*``
alone, by the trust rule (delivered only for a report of exit 0 or of a job still running at
``tau*``, taken by the deadline). Its escrow then moves as any Egg contract's, at ``tau*`` at the
earliest.
"""

from __future__ import annotations

from .egg import OPEN, EggMarket, contracts, settle_escrow
from .providers import Contracted, awaiting
from .store import STOPPED_RAN, STOPPED_UNSTARTED, stop_recorded


def _final(store, c: dict, state: str, now: float, note: str, code=None, used: dict | None = None) -> None:
    """Record contract ``c``'s verdict once (money moves only at ``tau*``, :func:`.egg.settle_escrow`)."""
    if used and used.get("peak_memory") is not None:
        note = f"{note}; peak memory {used['peak_memory'] / 2**20:.1f} MiB"
    with store.transaction():
        store.conn.execute(
            f"UPDATE ex_egg_contracts SET state = ?, ended_t = ?, exit_code = ?, cpu_seconds = ?, note = ? "
            f"WHERE id = ? AND state IN ({', '.join('?' * len(OPEN))})",
            (state, now, code, (used or {}).get("cpu_seconds"), note, c["id"], *OPEN))


def _record_stops(exchange, due: list[dict], now: float) -> None:
    """Record, for every running contract in ``due`` (``tau*`` has come), whether its job had
    started, before any of them is stopped: the stop of one frees its CPUs, on which the
    provider (e.g. Slurm's scheduler) may start another's job that was waiting, which then had
    not started by ``tau*``. The records also let an exchange that dies in a stop be judged by
    them at its restart, never by its own cancel (as :meth:`Exchange.job_ended` judges a spot
    contract)."""
    todo = [c for c in due if not stop_recorded(c)]
    ran = {c["id"]: exchange.backend(c["provider"]).running(c["id"]) for c in todo}
    with exchange.store.transaction():
        for c in todo:
            exchange.store.conn.execute("UPDATE ex_egg_contracts SET ended_t = ?, note = ? WHERE id = ?",
                                        (now, STOPPED_RAN if ran[c["id"]] else STOPPED_UNSTARTED, c["id"]))


def _judge(exchange, c: dict, node: dict, now: float, ended: bool, code=None) -> None:
    """Judge contract ``c``: its job ended (``ended``, exit status ``code``) or ``tau*`` came
    with it running (stopped now, judged by the record :func:`_record_stops` made before)."""
    backend = exchange.backend(c["provider"])
    store = exchange.store
    used = backend.usage(c["id"], Contracted.of(c, node))
    exited = ended and not stop_recorded(c)  # else the end is the exchange's own stop at tau*
    if exited:
        why = backend.fault(c["id"])
        if why is not None:
            what = "the provider failed" if getattr(backend, "grace", 0.0) else "the provider ended the job"
            return _final(store, c, "failed", now, f"{what}: {why}", code, used)
    else:
        ran = c["note"] == STOPPED_RAN  # recorded before the stop (_record_stops)
        if ended:
            backend.fault(c["id"])  # not asked: what the backend holds of the exchange's cancel is dropped
        else:
            backend.stop(c["id"])
        if not ran:
            return _final(store, c, "failed", now, "the provider had not started the job by tau*", code, used)
    if used and used.get("shortfall"):
        return _final(store, c, "failed", now, f"contracted resources not delivered: {used['shortfall']}", code, used)
    note = "the job exited by itself" if exited else "ran until tau*"
    if exited and hasattr(backend, "delivered_note"):  # an agent's report (.agent_runs)
        note = backend.delivered_note(c["id"], note)
    _final(store, c, "delivered", now, note, code, used)


def step(exchange, eggm: EggMarket) -> None:
    """One tick of Egg mode on ``exchange`` (see the module docstring)."""
    store = exchange.store
    ended: dict[int, int | None] = {}
    for backend in list(exchange._backends.values()):
        ended.update(backend.ended())
    now = exchange.clock()
    nodes = store.nodes()
    due = []
    for c in contracts(store, ("running",)):
        if c["id"] in ended:
            _judge(exchange, c, nodes[c["node_id"]], now, True, ended[c["id"]])
        else:
            backend = exchange.backend(c["provider"])  # an agent's: judged by its report, a Slurm end by its accounting
            if now >= c["tau"] + getattr(backend, "grace", 0.0) and not awaiting(backend, c["id"]):
                due.append(c)
    if due:
        _record_stops(exchange, due, now)
        recorded = {c["id"]: c for c in contracts(store, ("running",))}
        for c in due:
            _judge(exchange, recorded[c["id"]], nodes[c["node_id"]], now, False)
    for c in contracts(store, ("pending",)):
        if now >= c["tau"]:
            _final(store, c, "lapsed", now, "tau* passed before the exchange started the job")
        elif c["node_id"] is None:
            _final(store, c, "failed", now, f"the provider could not start the job: {c['note']}")
        elif nodes[c["node_id"]]["left_t"] is not None:  # the provider's side: it took the node away
            _final(store, c, "failed", now, "the provider could not start the job: its node left the exchange")
        else:
            start(exchange, c, nodes[c["node_id"]], now)
    with store.transaction():
        settle_escrow(eggm, exchange.clock())


def start(exchange, c: dict, node: dict, now: float) -> None:
    """Start contract ``c``'s job on ``node`` now, as its user's account (:meth:`Exchange.run_as`)."""
    store = exchange.store
    try:
        user = exchange.run_as(c["user"])
    except ValueError as exc:
        return _final(store, c, "lapsed", now, f"the exchange could not run the job: {exc}")
    with store.transaction():
        store.conn.execute("UPDATE ex_egg_contracts SET state = 'starting', started_t = ? WHERE id = ?", (now, c["id"]))
    env = {"MARKETSCHED_CONTRACT": c["id"], "MARKETSCHED_PROVIDER": c["provider"], "MARKETSCHED_NODE": node["name"],
           "MARKETSCHED_WINDOW_END": c["tau"]}
    try:
        exchange.backend(c["provider"]).start(c["id"], c["command"], env, node["cpus"], user=user,
                                              contracted=Contracted.of(c, node))
    except OSError as exc:
        return _final(store, c, "failed", now, f"the provider could not start the job: {exc}")
    with store.transaction():
        store.conn.execute("UPDATE ex_egg_contracts SET state = 'running' WHERE id = ? AND state = 'starting'",
                           (c["id"],))


def recover(exchange) -> None:
    """After a (re)start: re-attach the Egg contracts that were starting or running
    (:meth:`Exchange.recover`'s rule: one whose command never ran goes back to pending)."""
    store = exchange.store
    now = exchange.clock()
    nodes = store.nodes()
    for c in contracts(store, ("starting", "running")):
        got = exchange.backend(c["provider"]).reattach(c["id"])
        if got is True:
            with store.transaction():
                store.conn.execute("UPDATE ex_egg_contracts SET state = 'running' WHERE id = ?", (c["id"],))
        elif got is False and c["state"] == "starting":
            with store.transaction():
                store.conn.execute("UPDATE ex_egg_contracts SET state = 'pending', started_t = NULL WHERE id = ?",
                                   (c["id"],))
        else:
            _judge(exchange, c, nodes[c["node_id"]], now, True, None if got is False else got)
