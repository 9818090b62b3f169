"""The provider agent protocol: the exchange's side (Stößer 2009, section 4.4, fig. 4.4, with the
providers as their own processes, ``marketsched exchange provider run``, :mod:`.provider_agent`).

The exchange never connects to a provider: it *publishes* each provider's request of a
distributed clearing in its database, the API (``exchange serve``) hands it to the provider's
agent when the agent asks for it, and takes the agent's answer into the database; the clearing
reads the answers back. So the exchange (``exchange run``) and the API, separate processes,
meet in the database, as for every other order.

One clearing with agents (exchange setting ``answer_seconds`` > 0, :class:`AgentGathers`):

1. The clearing publishes one *ask* per provider with a node in the book (table ``ex_asks``):
   the request text of :mod:`.distributed` (the book without owners, alpha, the seeds of the
   provider's runs) and a **deadline**, ``answer_seconds`` of exchange time after publishing.
   A clearing computed again (a stale result, :mod:`.clearing`) closes its earlier asks and
   publishes new ones.
2. Each agent polls ``GET /api/provider/ask`` with its provider's token and gets its newest
   open ask, or ``{"ask": null}``.
3. It computes its runs (:func:`.distributed.answer`) and posts ``POST /api/provider/answer``
   ``{"ask": ID, "answer": TEXT}``. The API takes one answer per ask, from the ask's own
   provider (another provider's ask is 404, as one that does not exist), before its deadline
   and before the clearing collected it; otherwise 409 naming why (late, answered already,
   closed: an answer of an earlier period replayed). Taken means stored, not believed: the
   clearing checks it (:func:`.distributed.clear_distributed`: the request it names, the runs
   asked, feasibility).
4. The clearing waits until every provider asked has answered or the deadline has passed (it
   polls the database every ``POLL`` seconds of real time and reads the exchange's clock, so a
   test moves the deadline with a fake clock), then closes the asks and reads their answers in
   one transaction: an answer arrives before the close or is refused.
5. A provider with no answer is absent for the period: its runs are left out and so is its
   capacity (:mod:`.distributed`); its offers stay open for the next clearing, and its
   existing contracts run and settle by the rules of "Who is at fault" (docs/exchange.md), or,
   for a provider of the kind ``agent`` whose agent runs them, by the trust rule of
   :mod:`.agent_runs`.

The period record keeps the messages (table ``ex_period_messages``, :func:`record_messages`):
requests sent, answers received, bytes each way, what was dropped and why, the book nodes left
out, and, with agents, the answers themselves, from which ``exchange replay`` clears the period
again (:func:`recorded_gathers`). Asks keep no request text once closed (only their digest).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from marketsched.platform.http import INT, STR, Route
from marketsched.platform.validation import MAX_ID, MarketError, whole

from .agent_runs import runs_waiting
from .distributed import Gather, Messages, ask_each, ask_in_process, request_id
from .store import ExchangeStore

POLL = 0.05  # seconds of real time between the clearing's looks at the answers
ASK_COLUMNS = ("id", "period", "provider", "request_id", "posted_t", "deadline_t", "answered_t", "closed_t")


# ---------------------------------------------------------------------------- the exchange's side
def publish(store: ExchangeStore, period: int, requests: dict[str, str], t: float, deadline: float) -> dict[str, int]:
    """Step 1: one ask per provider of ``requests`` for ``period``, open until ``deadline``
    (exchange time); earlier open asks of the period are closed. Returns the asks' ids."""
    with store.transaction():
        store.conn.execute("UPDATE ex_asks SET closed_t = ?, request = '' WHERE period = ? AND closed_t IS NULL",
                           (t, period))
        ids = {}
        for p, text in requests.items():
            (ask,) = store.rows("INSERT INTO ex_asks (period, provider, request, request_id, posted_t, deadline_t) "
                                "VALUES (?, ?, ?, ?, ?, ?) RETURNING id", (period, p, text, request_id(text), t,
                                                                          deadline))
            ids[p] = int(ask[0])
        return ids


def answered(store: ExchangeStore, ids: dict[str, int]) -> int:
    """How many of the asks ``ids`` have an answer."""
    marks = ", ".join("?" * len(ids))
    return int(store.rows(f"SELECT COUNT(*) FROM ex_asks WHERE id IN ({marks}) AND answer IS NOT NULL",
                          tuple(ids.values()))[0][0])


def collect(store: ExchangeStore, ids: dict[str, int], t: float) -> dict[str, str]:
    """Step 4: close the asks ``ids`` and return their answers, in one transaction."""
    marks = ", ".join("?" * len(ids))
    with store.transaction():
        rows = store.rows(f"SELECT provider, answer FROM ex_asks WHERE id IN ({marks}) AND answer IS NOT NULL",
                          tuple(ids.values()))
        store.conn.execute(f"UPDATE ex_asks SET closed_t = ?, request = '', answer = NULL WHERE id IN ({marks})",
                           (t, *ids.values()))
    return dict(rows)


class AgentGathers:
    """The gathers of an exchange whose providers answer through their agents: for period p,
    a gather that publishes, waits and collects (steps 1 and 4 of the module docstring) on its
    own connection to the database at ``path`` (a clearing runs in a worker thread), with the
    deadline ``answer_seconds`` after publishing on ``clock``."""

    def __init__(self, path: Path, clock: Callable[[], float], answer_seconds: float, poll: float = POLL):
        self.path = Path(path)
        self.clock = clock
        self.answer_seconds = float(answer_seconds)
        self.poll = poll

    def __call__(self, period: int) -> Gather:
        def gather(requests: dict[str, str]) -> dict[str, str | Exception]:
            store = ExchangeStore(self.path)
            try:
                t = self.clock()
                ids = publish(store, period, requests, t, t + self.answer_seconds)
                while self.clock() < t + self.answer_seconds and answered(store, ids) < len(ids):
                    time.sleep(self.poll)
                got = collect(store, ids, self.clock())
            finally:
                store.close()
            return {p: got[p] if p in got else TimeoutError(
                f"no answer to ask {ids[p]} within its {self.answer_seconds:g} s") for p in requests}
        return gather


def record_messages(store: ExchangeStore, period: int, msgs: Messages, agents: bool) -> None:
    """The period record's messages (inside the clearing's commit); with ``agents``, the
    answers as received too (the replay's input)."""
    rec = msgs.record()
    store.conn.execute(
        "INSERT INTO ex_period_messages (period, calls, answers, bytes_sent, bytes_received, dropped, left_out, "
        "replies) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (period, rec["calls"], rec["answers"], rec["bytes_sent"], rec["bytes_received"], json.dumps(rec["dropped"]),
         json.dumps(rec["left_out"]), json.dumps(msgs.replies) if agents else None))


def period_messages(store: ExchangeStore, period: int) -> dict | None:
    """What period ``period`` exchanged with the providers (None: not a distributed clearing)."""
    rows = store.rows("SELECT calls, answers, bytes_sent, bytes_received, dropped, left_out, replies "
                      "FROM ex_period_messages WHERE period = ?", (period,))
    if not rows:
        return None
    calls, answers, sent, received, dropped, left_out, replies = rows[0]
    return {"calls": calls, "answers": answers, "bytes_sent": sent, "bytes_received": received,
            "dropped": json.loads(dropped), "left_out": json.loads(left_out),
            "replies": None if replies is None else json.loads(replies)}


def recorded_gathers(store: ExchangeStore) -> Callable[[int], Gather]:
    """The replay's gathers: a period cleared with agents gets the answers it recorded (a
    provider that did not answer, none); any other, in-process providers."""
    def for_period(period: int) -> Gather:
        rec = period_messages(store, period)
        if rec is None or rec["replies"] is None:
            return ask_each(ask_in_process)
        replies = rec["replies"]

        def gather(requests: dict[str, str]) -> dict[str, str | Exception]:
            return {p: replies[p] if p in replies else TimeoutError("no answer (as recorded)") for p in requests}
        return gather
    return for_period


# ---------------------------------------------------------------------------- the API's side
def _provider(who, what: str) -> str:
    if who[0] != "provider":
        raise MarketError(f"only providers {what}; this token is {who[0]} {who[1]!r}'s", 403)
    return who[1]


def current_ask(service, who) -> dict:
    """``GET /api/provider/ask``: the caller's newest open ask (step 2), or ``{"ask": null}``;
    with ``runs``, how many contract runs wait for the caller's agent, when some do (:mod:`.agent_runs`)."""
    provider = _provider(who, "answer the exchange's asks")
    rows, runs = service._locked(lambda: (service.store.rows(
        "SELECT id, period, deadline_t, request, answer FROM ex_asks WHERE provider = ? AND closed_t IS NULL "
        "ORDER BY id DESC LIMIT 1", (provider,)), runs_waiting(service, provider)))
    waiting = {"runs": runs} if runs else {}
    if not rows or rows[0][4] is not None:
        return {"ask": None, **waiting}
    ask, period, deadline, request, _ = rows[0]
    return {"ask": ask, "period": period, "deadline": deadline, "request": request, **waiting}


def post_answer(service, who, body: dict) -> dict:
    """``POST /api/provider/answer``: store the caller's answer to its open ask (step 3)."""
    provider = _provider(who, "answer the exchange's asks")
    ask = whole(body["ask"], "ask", 1, MAX_ID)
    text = body["answer"]
    if not isinstance(text, str):
        raise MarketError("answer field 'answer' must be the answer's JSON text (a string)")

    def take() -> dict:
        with service.store.transaction():
            rows = service.store.rows("SELECT provider, period, deadline_t, answered_t, closed_t FROM ex_asks "
                                      "WHERE id = ?", (ask,))
            if not rows or rows[0][0] != provider:
                raise MarketError(f"no ask {ask} of yours", 404)
            _, period, deadline, answered_t, closed_t = rows[0]
            if closed_t is not None:
                raise MarketError(f"ask {ask} (period {period}) is closed: the exchange collected its answers at "
                                  f"{closed_t:.3f}; this answer is late, or an earlier one replayed", 409)
            if answered_t is not None:
                raise MarketError(f"ask {ask} (period {period}) was answered already at {answered_t:.3f}: one "
                                  "answer per ask", 409)
            now = service.exchange.clock()
            if now >= deadline:
                raise MarketError(f"ask {ask} (period {period}) is late: its deadline was {deadline:.3f}, the "
                                  f"exchange's time is {now:.3f}", 409)
            service.store.conn.execute("UPDATE ex_asks SET answer = ?, answered_t = ? WHERE id = ?",
                                       (text, now, ask))
            return {"ask": ask, "period": period, "received": True}

    return service._locked(take)


PROVIDER_ROUTES = [
    Route("GET", "/api/provider/ask", lambda s, who, q, body: current_ask(s, who),
          "provider agent: the exchange's open ask of a distributed clearing, or {\"ask\": null}"),
    Route("POST", "/api/provider/answer", lambda s, who, q, body: post_answer(s, who, body),
          "provider agent: answer an ask (one answer, before its deadline)", noun="an answer",
          required=("ask", "answer"), body={"ask": INT, "answer": {**STR, "description": "the answer's JSON text"}}),
]
