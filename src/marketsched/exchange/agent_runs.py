"""Contracts run by their provider's agent (provider kind ``agent``): the exchange's side.

A provider that joins with ``--kind agent`` (``exchange join``, or ``POST /api/join`` with
``{"kind": "agent"}``) keeps its machines: its agent (``marketsched exchange provider run``,
:mod:`.provider_agent`) runs each of its contracts on its own executor and reports the
outcome. The exchange never connects out and cannot observe the agent's machine, so it cannot
measure the job (Stößer 2009, section 2.3, leaves SLA monitoring to the market layer; here
it has only the agent's word). The **trust rule** (the exchange's; docs/exchange.md,
"Contracts run by agents"): a party's own report never moves money in its own favour, so an
agent's report can only deliver a result or move money against its provider.

Steps, through the same pull protocol as the asks (:mod:`.provider_protocol`):

1. When a contract's window begins the exchange *publishes* its run (:meth:`AgentBackend.start`,
   table ``ex_runs``): contract id, the job's command, its environment, the node's CPUs, the
   contracted CPU share and memory, and the **report deadline** = the window's end +
   :data:`REPORT_GRACE` seconds of exchange time.
2. The agent polls ``GET /api/provider/ask``; its ``runs`` count says how many runs wait for it;
   ``GET /api/provider/runs`` lists them with the seconds left in each window.
3. It starts the job (``POST /api/provider/runs/{contract}/started``: recorded, moves nothing),
   stops it at its window's end, and posts ``POST /api/provider/runs/{contract}/ended`` with how
   it ended (``exit`` and its status, or ``window``: still running at the window's end), its own
   measured CPU seconds, the SHA-256 of the job's whole output and the output itself up to
   :data:`OUTPUT_LIMIT` bytes (base64). One report per run, from the run's own provider, after
   its publication and before its deadline; anything else is refused, naming why.
4. The exchange settles each run once, at the report or at the deadline
   (:meth:`AgentBackend.ended`, :meth:`AgentBackend.fault`, through
   :meth:`.core.Exchange.finish`):

   * *delivered* (the user pays, the provider is paid): a report ``exit 0`` or ``window``
     taken by the deadline, its output matching its digest;
   * *failed* (the provider pays the penalty, the user pays nothing): no report by the
     deadline (the agent killed, partitioned, late), or a report of any other end (a non-zero
     exit status, a signal, a job it could not start): the agent cannot blame the user's job,
     since the exchange cannot check that claim.

The user reads the delivered output with ``GET /api/contracts/{id}/output``.

**Egg mode** (:mod:`.egg`, :mod:`.egg_run`): an Egg contract on an agent provider is run the
same way, its window from the exchange's step after the award to ``tau*``. Its run is published
in its own table, ``ex_egg_runs`` (an Egg contract's id is of ``ex_egg_contracts``, not of the
periodic contracts), and the routes above, in an exchange that runs Egg, name Egg contracts
(:func:`tables`). The verdict is the trust rule's, taken at the report or at the deadline
(``tau*`` + :data:`REPORT_GRACE`); Egg's escrow moves at ``tau*`` at the earliest
(:func:`.egg.settle_escrow`): paid to the provider for a delivered result, refunded otherwise,
and the provider's reliability records the outcome.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from marketsched.platform.http import INT, NUM, STR, Route
from marketsched.platform.validation import MAX_ID, MarketError, whole

from .orders import MAX_OUTPUT_BYTES as OUTPUT_LIMIT  # the output kept (its digest covers all of it)

if TYPE_CHECKING:
    from .store import ExchangeStore

REPORT_GRACE = 30.0  # seconds of exchange time after a window's end for the agent's report
ENDS = ("exit", "window", "signal", "not-started")  # how an agent says a job ended
RUN_COLUMNS = ("contract", "provider", "spec", "posted_t", "deadline_t", "started_t", "reported_t", "end",
               "code", "cpu_seconds", "digest", "output", "output_bytes")


class RunTables(NamedTuple):
    """Where an exchange keeps its agents' runs: the runs' table, the table of the contracts
    they run, that table's column of when a contract was made and how to say when it is due."""

    runs: str
    contracts: str
    made: str
    due: str


PERIODIC_RUNS = RunTables("ex_runs", "ex_contracts", "start_t", "its window begins at {t:.3f}")
EGG_RUNS = RunTables("ex_egg_runs", "ex_egg_contracts", "award_t",
                     "awarded at {t:.3f}, it starts at the exchange's next step")


def tables(mechanism: str) -> RunTables:
    """The run tables of an exchange clearing with ``mechanism``: an Egg exchange's contracts
    are its Egg contracts (it has no periodic ones)."""
    return EGG_RUNS if mechanism == "egg" else PERIODIC_RUNS


def delivered(end: str | None, code: int | None) -> bool:
    """The trust rule's verdict on a report: only an exit status 0 or a job still running at
    its window's end is a delivered result; any other end is the provider's failure."""
    return end == "window" or (end == "exit" and code == 0)


class AgentBackend:
    """The backend of an ``agent`` provider (the :class:`.providers.Backend` methods): it
    publishes runs and reads the agent's reports in the exchange's database; it runs nothing.
    :meth:`bind` gives it the exchange's store and clock (:meth:`.core.Exchange.backend`)."""

    grace = REPORT_GRACE  # the exchange does not stop an agent's job at its window's end

    def __init__(self, provider: str):
        self.provider = provider
        self._store: ExchangeStore | None = None
        self.clock: Callable[[], float] = lambda: 0.0
        self.live: set[int] = set()  # runs published and not yet handed to the exchange as ended
        self.tables = PERIODIC_RUNS

    def bind(self, store: ExchangeStore, clock: Callable[[], float]) -> None:
        self._store, self.clock = store, clock
        settings = store.settings()
        self.tables = tables(settings["mechanism"] if settings else "")

    @property
    def store(self) -> ExchangeStore:
        if self._store is None:
            raise RuntimeError(f"provider {self.provider!r}'s agent backend is used through its exchange (bind)")
        return self._store

    def start(self, contract_id: int, command: str, env: dict, cpus, user=None, contracted=None) -> None:
        """Step 1: publish the run (the agent runs the job as its own account: ``user`` is the
        exchange's mapping, of this machine's accounts, not the agent's)."""
        end_t = float(env["MARKETSCHED_WINDOW_END"])
        spec = {"command": command, "env": {k: str(v) for k, v in env.items()}, "cpus": list(cpus) if cpus else None,
                "share": contracted.share if contracted else 1.0, "mem": contracted.mem if contracted else None,
                "end_t": end_t}
        now = self.clock()
        with self.store.transaction():
            self.store.conn.execute(f"INSERT INTO {self.tables.runs} (contract, provider, spec, posted_t, deadline_t) "
                                    "VALUES (?, ?, ?, ?, ?)", (contract_id, self.provider, json.dumps(spec), now,
                                                              end_t + self.grace))
        self.live.add(contract_id)

    def _run(self, contract_id: int) -> dict | None:
        got = self.store.dicts(RUN_COLUMNS, f"SELECT {', '.join(RUN_COLUMNS)} FROM {self.tables.runs} "
                               "WHERE contract = ?", (contract_id,))
        return got[0] if got else None

    def ended(self) -> list[tuple[int, int | None]]:
        """Step 4: the runs with a report, or past their deadline without one."""
        if not self.live:
            return []
        now = self.clock()
        marks = ", ".join("?" * len(self.live))
        rows = self.store.rows(f"SELECT contract, code FROM {self.tables.runs} WHERE contract IN ({marks}) AND "
                               "(reported_t IS NOT NULL OR deadline_t <= ?)", (*self.live, now))
        for cid, _ in rows:
            self.live.discard(cid)
        return [(int(cid), code) for cid, code in rows]

    def fault(self, contract_id: int) -> str | None:
        """None when the run delivered its result by its deadline; else the provider's fault."""
        run = self._run(contract_id)
        if run is None:
            return "its agent was never given the run"
        if run["reported_t"] is None:
            return (f"its agent did not report the job's result by {run['deadline_t']:.3f} (the window's end + "
                    f"{self.grace:g} s)")
        if not delivered(run["end"], run["code"]):
            what = run["end"] if run["code"] is None else f"{run['end']} {run['code']}"
            return (f"its agent reported the job ended by '{what}', which the exchange cannot check: the agent "
                    "cannot blame the user's job")
        return None

    def usage(self, contract_id: int, contracted=None) -> dict | None:
        """The agent's own CPU seconds (recorded, never evidence); nothing measured here."""
        run = self._run(contract_id)
        return {"cpu_seconds": run["cpu_seconds"] if run else None, "peak_memory": None, "cpus": None,
                "memory": None}

    def running(self, contract_id: int) -> bool:
        return False  # never judged by the exchange's window-end rule: ended() hands every run over first

    def stop(self, contract_id: int) -> float:
        self.live.discard(contract_id)
        return 0.0

    def reattach(self, contract_id: int) -> bool | int | None:
        """After a restart of the exchange: the run stays with its agent (published, judged by
        its report or deadline); one never published goes back to pending (False)."""
        if self._run(contract_id) is None:
            return False
        self.live.add(contract_id)
        return True

    def delivered_note(self, contract_id: int, exited: str) -> str:
        """A delivered run's note: a job that exited begins with ``exited`` (the exchange's
        note of a job that ended by itself, :data:`.core.EXITED`: a request's later contract
        then runs nothing)."""
        run = self._run(contract_id) or {}
        how = exited if run.get("end") == "exit" else "served its whole window"
        return (f"{how}, as its provider's agent reported (output sha256 {str(run.get('digest'))[:12]}, "
                f"{run.get('output_bytes')} bytes)")

    def close(self) -> None:
        self.live.clear()


# ---------------------------------------------------------------------------- the API's side
def _provider(who) -> str:
    if who[0] != "provider":
        raise MarketError(f"only providers run contracts for the exchange; this token is {who[0]} {who[1]!r}'s", 403)
    return who[1]


def _tables(service) -> RunTables:
    return tables(service.exchange.settings["mechanism"])


def _own_run(service, provider: str, contract_id) -> dict:
    cid = whole(contract_id, "contract id", 1, MAX_ID)
    tab = _tables(service)
    rows = service.store.dicts(("provider", "state", "made"), f"SELECT provider, state, {tab.made} FROM "
                               f"{tab.contracts} WHERE id = ?", (cid,))
    if not rows or rows[0]["provider"] != provider:
        raise MarketError(f"no contract {cid} of yours", 404)
    run = service.store.dicts(RUN_COLUMNS, f"SELECT {', '.join(RUN_COLUMNS)} FROM {tab.runs} WHERE contract = ?",
                              (cid,))
    if not run:
        raise MarketError(f"contract {cid} is not due: the exchange has not published its run "
                          f"({tab.due.format(t=rows[0]['made'])}; it is {rows[0]['state']})", 409)
    return run[0]


def runs_waiting(service, provider: str) -> int:
    """How many published runs of ``provider`` its agent has not reported started or ended."""
    return int(service.store.rows(f"SELECT COUNT(*) FROM {_tables(service).runs} WHERE provider = ? AND "
                                  "started_t IS NULL AND reported_t IS NULL", (provider,))[0][0])


def list_runs(service, who) -> list[dict]:
    """``GET /api/provider/runs``: the caller's published runs not yet reported ended, each with
    the ``seconds_left`` in its window (negative once it has ended: a restarted agent places the
    window's end on its own clock, :meth:`.agent_jobs.RunKeeper.adopt`)."""
    provider = _provider(who)

    def read() -> list[dict]:
        now = service.exchange.clock()
        rows = service.store.dicts(("contract", "spec", "deadline_t", "started_t"),
                                   f"SELECT contract, spec, deadline_t, started_t FROM {_tables(service).runs} "
                                   "WHERE provider = ? AND reported_t IS NULL AND deadline_t > ? ORDER BY contract",
                                   (provider, now))
        out = []
        for r in rows:
            spec = json.loads(r["spec"])
            out.append({"contract": r["contract"], "command": spec["command"], "env": spec["env"],
                        "cpus": spec["cpus"], "share": spec["share"], "mem": spec["mem"],
                        "seconds_left": spec["end_t"] - now, "deadline": r["deadline_t"],
                        "started": r["started_t"] is not None})
        return out

    return service._locked(read)


def report_started(service, who, contract_id) -> dict:
    """``POST /api/provider/runs/{contract}/started``: recorded once; moves no money."""
    provider = _provider(who)

    def take() -> dict:
        with service.store.transaction():
            run = _own_run(service, provider, contract_id)
            if run["started_t"] is not None:
                raise MarketError(f"contract {run['contract']}: its start was reported already at "
                                  f"{run['started_t']:.3f}: one report each", 409)
            now = service.exchange.clock()
            service.store.conn.execute(f"UPDATE {_tables(service).runs} SET started_t = ? WHERE contract = ?",
                                       (now, run["contract"]))
            return {"contract": run["contract"], "started": now}

    return service._locked(take)


def check_report(body: dict) -> dict:
    """An ended report's fields, checked (ValueError naming the field): ``end`` one of
    :data:`ENDS`, ``code`` an integer or null, ``cpu_seconds`` >= 0, ``digest`` 64 hex digits,
    ``output`` base64 of at most :data:`OUTPUT_LIMIT` bytes, ``output_bytes`` the whole
    output's length; a complete output must match its digest."""
    end = body["end"]
    if end not in ENDS:
        raise MarketError(f"report field 'end' must be one of {', '.join(ENDS)}, got {end!r}")
    code = body.get("code")
    if code is not None:
        code = whole(code, "code", -255, 255)
    cpu = body.get("cpu_seconds")
    if cpu is not None and (isinstance(cpu, bool) or not isinstance(cpu, (int, float)) or not 0 <= cpu < 1e12):
        raise MarketError(f"report field 'cpu_seconds' must be a number of seconds >= 0, got {cpu!r}")
    digest = body["digest"]
    if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest):
        raise MarketError("report field 'digest' must be the output's SHA-256 in 64 lowercase hex digits")
    try:
        output = base64.b64decode(body["output"], validate=True) if isinstance(body["output"], str) else None
    except (binascii.Error, ValueError):
        output = None
    if output is None:
        raise MarketError("report field 'output' must be the job's output in base64")
    if len(output) > OUTPUT_LIMIT:
        raise MarketError(f"report field 'output' holds {len(output)} bytes, more than the {OUTPUT_LIMIT} the exchange "
                          "keeps: send the first ones (the digest covers the whole output)")
    size = whole(body["output_bytes"], "output_bytes", len(output), 2**62)
    if size == len(output) and hashlib.sha256(output).hexdigest() != digest:
        raise MarketError("report field 'digest' is not the SHA-256 of the complete output sent")
    return {"end": end, "code": code, "cpu_seconds": None if cpu is None else float(cpu), "digest": digest,
            "output": output, "output_bytes": size}


def report_ended(service, who, contract_id, body: dict) -> dict:
    """``POST /api/provider/runs/{contract}/ended``: the run's one report, before its deadline."""
    provider = _provider(who)
    rep = check_report(body)

    def take() -> dict:
        with service.store.transaction():
            run = _own_run(service, provider, contract_id)
            cid = run["contract"]
            if run["reported_t"] is not None:
                raise MarketError(f"contract {cid}: its end was reported already at {run['reported_t']:.3f}: one "
                                  "report per run (a replayed report is refused)", 409)
            now = service.exchange.clock()
            if now >= run["deadline_t"]:
                raise MarketError(f"contract {cid}: the report is late: its deadline was {run['deadline_t']:.3f} (the "
                                  f"window's end + {REPORT_GRACE:g} s), the exchange's time is {now:.3f}", 409)
            service.store.conn.execute(
                f"UPDATE {_tables(service).runs} SET reported_t = ?, end = ?, code = ?, cpu_seconds = ?, digest = ?, "
                "output = ?, output_bytes = ? WHERE contract = ?",
                (now, rep["end"], rep["code"], rep["cpu_seconds"], rep["digest"], rep["output"], rep["output_bytes"],
                 cid))
            return {"contract": cid, "received": now, "delivers": delivered(rep["end"], rep["code"])}

    return service._locked(take)


def contract_output(service, who, contract_id) -> dict:
    """``GET /api/contracts/{id}/output``: a run's reported output, to its user or provider."""
    cid = whole(contract_id, "contract id", 1, MAX_ID)

    def read() -> dict:
        tab = _tables(service)
        rows = service.store.dicts(("user", "provider", "state"), f"SELECT user, provider, state FROM {tab.contracts} "
                                   "WHERE id = ?", (cid,))
        if not rows or rows[0].get(who[0]) != who[1]:
            raise MarketError(f"no contract {cid} of yours", 404)
        run = service.store.dicts(RUN_COLUMNS, f"SELECT {', '.join(RUN_COLUMNS)} FROM {tab.runs} WHERE contract = ?",
                                  (cid,))
        if not run or run[0]["reported_t"] is None:
            raise MarketError(f"contract {cid} has no output: its provider's agent has not reported one "
                              f"(the contract is {rows[0]['state']})", 404)
        r = run[0]
        return {"contract": cid, "state": rows[0]["state"], "end": r["end"], "code": r["code"],
                "digest": r["digest"], "output_bytes": r["output_bytes"],
                "truncated": r["output_bytes"] > len(r["output"]),
                "output": base64.b64encode(r["output"]).decode()}

    return service._locked(read)


RUN_ROUTES = [
    Route("GET", "/api/provider/runs", lambda s, who, q, body: list_runs(s, who),
          "provider agent: the contracts its agent runs now (published, not reported ended)"),
    Route("POST", "/api/provider/runs/{contract_id}/started",
          lambda s, who, q, body, contract_id: report_started(s, who, contract_id),
          "provider agent: a run's job started (recorded; moves no money)", noun="a start report", body={}),
    Route("POST", "/api/provider/runs/{contract_id}/ended",
          lambda s, who, q, body, contract_id: report_ended(s, who, contract_id, body),
          "provider agent: a run's job ended (one report, before the window's end + the grace)",
          noun="an end report", required=("end", "digest", "output", "output_bytes"),
          body={"end": {**STR, "enum": list(ENDS)}, "code": INT, "cpu_seconds": NUM, "digest": STR,
                "output": {**STR, "description": "the output's first bytes, base64"}, "output_bytes": INT}),
    Route("GET", "/api/contracts/{contract_id}/output",
          lambda s, who, q, body, contract_id: contract_output(s, who, contract_id),
          "a contract run by its provider's agent: the output it reported (base64)"),
]
