"""A provider's agent as its own process (``marketsched exchange provider run``): it answers the
exchange's asks of the distributed randomized clearing (Stößer 2009, section 4.4, fig. 4.4,
step 3) over the exchange's API with its provider's token, and, for a provider of kind
``agent``, runs its contracts on its own machine (:mod:`.agent_jobs`). The protocol and the
exchange's side are in :mod:`.provider_protocol` and :mod:`.agent_runs`.

The agent's loop (:func:`run_agent`):

1. ``GET /api/provider/ask`` every ``poll`` seconds (the agent pulls: the exchange never
   connects out).
2. For an ask it has not answered yet: compute the answer from the request text alone
   (:func:`.distributed.answer`: the randomized heuristic for each of its runs) and post it,
   ``POST /api/provider/answer``.
3. When the ask's answer says contract runs wait for it (``runs``), or jobs of its run, it
   hands over to :meth:`.agent_jobs.RunKeeper.step` (made at the first run: an agent that
   only answers asks starts no executor; made at once when its folder holds runs from before
   a restart, which it re-adopts if they are its own: :meth:`.agent_jobs.RunKeeper.recover`).
4. A refusal of the answer (409: late, or the clearing collected already) is printed and the
   loop goes on; an unreachable or busy exchange is printed and tried again at the next poll; a
   wrong token (401) or a token that is not a provider's ends the agent with an error.

``MARKETSCHED_TEST_AGENT_GATE`` is a test hook: when it names a file, the agent, after fetching
an ask and before answering it, writes the ask's id to ``<file>.fetched`` and waits until the
file exists, so that a test can kill it between the two, in event order.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from marketsched.platform.client import Client, ClientError

GATE_ENV = "MARKETSCHED_TEST_AGENT_GATE"


@dataclass
class AgentStats:
    """What an agent did: HTTP requests (polls and answers), asks answered, answers refused."""

    polls: int = 0
    answered: int = 0
    refused: int = 0
    errors: int = 0


def run_agent(client: Client, poll: float, until: Callable[[], bool], log: Callable[[str], None] = print,
              work: Path | None = None, provider: str | None = None) -> AgentStats:
    """Answer the exchange's asks over ``client`` (a provider's token, of ``provider``) until
    ``until()``, and run the provider's contracts under ``work`` (default:
    ``./marketsched-agent``; see the module docstring)."""
    stats = AgentStats()
    done: set[int] = set()
    work = work or Path.cwd() / "marketsched-agent"
    keeper = None
    from .agent_jobs import RECORDS, RunKeeper

    if (work / RECORDS).is_dir() or (work / "runs").is_dir():  # it ran jobs here before: re-adopted at the first step
        keeper = RunKeeper(client, work, log, provider=provider)
    try:
        while not until():
            keeper, again = _step(client, stats, done, keeper, work, log)
            if not again:  # after an answer, another ask may be waiting
                time.sleep(poll)
    finally:
        if keeper:
            keeper.close()
    return stats


def _step(client: Client, stats: AgentStats, done: set[int], keeper, work: Path, log):
    """One poll (the module docstring's steps): the run keeper (None before the first run) and
    whether to poll again at once."""
    ask = None
    try:
        stats.polls += 1
        got = client.get("/api/provider/ask")
        ask = got.get("ask") if isinstance(got, dict) else None
        waiting = int(got.get("runs") or 0) if isinstance(got, dict) else 0
        if waiting or keeper:
            if keeper is None:
                from .agent_jobs import RunKeeper  # only an agent provider's agent runs jobs

                keeper = RunKeeper(client, work, log)
            keeper.step(waiting)
        if isinstance(ask, int) and ask not in done:
            from .provider_answer import answer  # only the distributed mode's agents need the mechanism

            _gate(ask)
            reply = answer(got["request"])
            stats.polls += 1
            client.post("/api/provider/answer", {"ask": ask, "answer": reply})
            done.add(ask)
            stats.answered += 1
            log(f"answered ask {ask} (period {got['period']})")
            return keeper, True
    except ClientError as exc:
        if exc.status in (401, 403):
            raise
        if exc.status == 409 and isinstance(ask, int):
            stats.refused += 1
            done.add(ask)  # an ask whose answer was refused is not answered again
        else:
            stats.errors += 1
        log(f"provider agent: {exc.message}")
    return keeper, False


def _gate(ask: int) -> None:
    gate = os.environ.get(GATE_ENV)
    if not gate:
        return
    path = Path(gate)
    Path(f"{gate}.fetched").write_text(f"{ask}\n")
    while not path.exists():
        time.sleep(0.01)
