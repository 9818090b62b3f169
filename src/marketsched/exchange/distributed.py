"""The distributed randomized clearing (``--mechanism randomized-distributed``): each provider
computes its part, the exchange combines and prices (Stößer 2009, section 4.4, fig. 4.4;
the library's steps are :mod:`marketsched.mechanisms.clearing.distributed`).

One clearing:

1. The exchange builds the period's book (:func:`.book.build_book`) and the seeds of its
   |J| + |N| randomized runs from the period's random numbers (:func:`.book.period_rng`).
2. It gives each run to a provider: book node n's run to the provider offering it; the jobs'
   runs, whose users have no agent at the exchange, to the providers in turn (job j's run to
   the ``j mod P``-th provider by name, P the providers with a node in the book).
3. It sends each provider one request (:func:`request_text`): the book without owners or order
   ids (the thesis's anonymized broadcast), alpha, and the seeds of that provider's runs only.
4. Each provider answers (:func:`.provider_answer.answer`, computed from the request text
   alone) with the allocation of each of its runs.
5. The exchange keeps the runs it asked that provider for whose allocation is feasible on the
   book (:func:`~marketsched.mechanisms.clearing.distributed.check_run`), drops the others
   (recorded in :class:`Messages`; so are the runs of a provider whose ``ask`` raised
   ``OSError`` or ``TimeoutError``), runs the deterministic greedy itself, and enforces the best
   by its own welfare computation (:func:`~marketsched.mechanisms.clearing.distributed.combine_and_price`).

Requests and answers are JSON text. An answer names the request it answers (``"request"``:
:func:`request_id`, a digest of the request's text, which holds the period's seeds), so an
answer to an earlier request, replayed, is dropped and named. Who carries them is a *gather*
(:data:`Gather`): by default the providers are answered in this process, one after another
(:func:`ask_each` of :func:`ask_in_process`); with provider agents the exchange publishes the
requests over its API and collects the answers until a deadline (:mod:`.provider_protocol`).

**A provider that did not answer** (no answer by the deadline, an unreachable agent) is taken as
absent for this period, the exchange's decision (the thesis assumes every participant answers):
its runs are left out, and so are its book nodes: its capacity is not sold this period (its
offers stay open for the next). A returned run that places a job on such a node is dropped
(named); the others are compared on the book without those nodes. A provider that answered
something unusable (unreadable, runs not asked of it, infeasible) was there: only its runs are
dropped, its capacity stays in the book.

With honest providers that all answer, the result is the library's
:func:`distributed_randomized` on the same book and random numbers, and a replay
(:mod:`.replay`) reproduces it from the record.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from marketsched.mechanisms.clearing.distributed import check_run, combine_and_price, run_seeds
from marketsched.mechanisms.clearing.orderbook import OrderBook
from marketsched.mechanisms.clearing.randomized import DistributedOutcome

from .book import ClearingBook, book_rows
from .provider_answer import answer, request_id  # the provider's side (step 4), light for its agent

MECHANISM = "randomized-distributed"

Ask = Callable[[str, str], str]  # (provider, request text) -> answer text
# {provider: request text} -> {provider: answer text, or the OSError / TimeoutError saying why
# there is none, or NotAsked}; a provider left out did not answer
Gather = Callable[[dict[str, str]], dict[str, "str | Exception"]]


class NotAsked(Exception):
    """A gather's mark for a provider the exchange did not ask (so it is not absent): its runs
    are left out, its capacity stays in the book."""


@dataclass
class Messages:
    """What one distributed clearing exchanged with the providers."""

    calls: int = 0  # requests sent (one per provider with a node in the book)
    answers: int = 0  # answers received
    bytes_sent: int = 0
    bytes_received: int = 0
    dropped: list[str] = field(default_factory=list)  # why each answer not used was dropped
    replies: dict[str, str] = field(default_factory=dict)  # provider -> its answer text, as received
    left_out: list[int] = field(default_factory=list)  # book nodes of providers that did not answer

    def record(self) -> dict:
        """What the period record keeps of the messages (:mod:`.provider_protocol`)."""
        return {"calls": self.calls, "answers": self.answers, "bytes_sent": self.bytes_sent,
                "bytes_received": self.bytes_received, "dropped": list(self.dropped), "left_out": list(self.left_out)}


def book_text(book: OrderBook) -> str:
    """The broadcast book: the jobs' and nodes' rows (Stößer 2009, section 3.4.1), no owners."""
    jobs, nodes = book_rows(book)
    return json.dumps({"jobs": jobs, "nodes": nodes})


def request_text(book_json: str, alpha: float, seeds: dict[int, np.random.SeedSequence]) -> str:
    """A provider's request: the broadcast book, alpha and the seeds of its runs."""
    runs = [{"run": r, "entropy": s.entropy, "spawn_key": list(s.spawn_key)} for r, s in sorted(seeds.items())]
    return f'{{"book": {book_json}, "alpha": {json.dumps(float(alpha))}, "runs": {json.dumps(runs)}}}'


def ask_in_process(provider: str, request: str) -> str:
    """A provider answered in the exchange's process (no agent process)."""
    return answer(request)


def ask_each(ask: Ask) -> Gather:
    """The gather that calls ``ask`` for each provider in turn; an ``OSError`` or
    ``TimeoutError`` it raises is that provider's missing answer."""
    def gather(requests: dict[str, str]) -> dict[str, str | Exception]:
        out: dict[str, str | Exception] = {}
        for provider, request in requests.items():
            try:
                out[provider] = ask(provider, request)
            except (OSError, TimeoutError) as exc:
                out[provider] = exc
        return out
    return gather


def decode_run(book: OrderBook, rows) -> np.ndarray:
    """An answered run's rows as a (|J|, T) allocation; ``ValueError`` if they are malformed."""
    assign = np.full((book.n_jobs, book.horizon), -1, dtype=np.int64)
    if not isinstance(rows, list):
        raise ValueError("its 'jobs' is not a list")
    for row in rows:
        if not (isinstance(row, list) and row and all(isinstance(x, int) and not isinstance(x, bool) for x in row)):
            raise ValueError(f"row {row!r} is not a list of whole numbers")
        j = row[0]
        if not 0 <= j < book.n_jobs:
            raise ValueError(f"row {row!r} names job {j}, outside 0..{book.n_jobs - 1}")
        r, e = int(book.job_release[j]), int(book.job_end[j])
        if len(row) - 1 != e - r + 1:
            raise ValueError(f"row {row!r} gives {len(row) - 1} nodes for job {j}'s {e - r + 1} slots")
        assign[j, r:e + 1] = row[1:]
    return assign


def assign_runs(book: OrderBook, node_owner: list[str]) -> dict[str, list[int]]:
    """Which runs each provider computes (step 2 of the module docstring)."""
    names = sorted(set(node_owner))
    runs: dict[str, list[int]] = {p: [] for p in names}
    for j in range(book.n_jobs):
        runs[names[j % len(names)]].append(j)
    for n, owner in enumerate(node_owner):
        runs[owner].append(book.n_jobs + n)
    return {p: sorted(r) for p, r in runs.items()}


def clear_distributed(book: OrderBook, node_owner: list[str], alpha: float, rng: np.random.Generator,
                      ask: Ask = ask_in_process, gather: Gather | None = None
                      ) -> tuple[DistributedOutcome, Messages]:
    """One distributed clearing of ``book`` (``node_owner[n]``: the provider of book node n);
    the enforced outcome and the messages (steps 1-5 of the module docstring). The requests
    go out through ``gather`` (default: ``ask`` for each provider in turn). When a provider did
    not answer, the outcome is on the book without its nodes (``Messages.left_out``, in
    increasing order; :func:`without_nodes`)."""
    if len(node_owner) != book.n_nodes:
        raise ValueError(f"node_owner names {len(node_owner)} providers for the book's {book.n_nodes} nodes")
    if not node_owner:
        raise ValueError("a distributed clearing needs at least one node in the book")
    n_runs = book.n_jobs + book.n_nodes
    seeds = run_seeds(rng, n_runs)
    shared = book_text(book)
    msgs = Messages()
    runs_of = assign_runs(book, node_owner)
    requests = {p: request_text(shared, alpha, {r: seeds[r] for r in runs}) for p, runs in runs_of.items()}
    msgs.calls = len(requests)
    msgs.bytes_sent = sum(len(r.encode()) for r in requests.values())
    replies = (gather or ask_each(ask))(requests)
    got: dict[int, np.ndarray] = {}
    silent = set()
    for provider, runs in runs_of.items():
        reply = replies.get(provider)
        if isinstance(reply, NotAsked):
            msgs.dropped.append(f"provider {provider!r} was not asked: {reply}")
            continue
        if not isinstance(reply, str):  # an agent unreachable or too late: absent this period
            msgs.dropped.append(f"provider {provider!r} did not answer: {reply or 'no answer'}")
            silent.add(provider)
            continue
        msgs.answers += 1
        msgs.replies[provider] = reply
        msgs.bytes_received += len(reply.encode())
        got.update(_accept(book, provider, set(runs), request_id(requests[provider]), reply, msgs))
    if not silent:
        return combine_and_price(book, got, n_runs), msgs
    msgs.left_out = [n for n, owner in enumerate(node_owner) if owner in silent]
    sub = without_nodes(book, msgs.left_out)
    new_index = np.full(book.n_nodes + 1, -1, dtype=np.int64)  # old node -> new (index -1 -> -1)
    kept = [n for n in range(book.n_nodes) if n not in set(msgs.left_out)]
    new_index[kept] = np.arange(len(kept))
    on_sub: dict[int, np.ndarray] = {}
    for run, assign in sorted(got.items()):
        if np.isin(assign, msgs.left_out).any():
            msgs.dropped.append(f"run {run} places a job on a node of a provider that did not answer "
                                f"({', '.join(sorted(silent))}): not sold this period")
            continue
        on_sub[run] = new_index[assign][:, :sub.horizon]
    return combine_and_price(sub, on_sub, n_runs), msgs


def without_nodes(book: OrderBook, nodes: list[int]) -> OrderBook:
    """``book`` without the book nodes ``nodes`` (the jobs, and the other nodes in order, kept)."""
    jobs, rows = book_rows(book)
    gone = set(nodes)
    return OrderBook.from_rows(jobs, [r for n, r in enumerate(rows) if n not in gone])


def clearing_book_without(cb: ClearingBook, nodes: list[int]) -> ClearingBook:
    """The exchange's book ``cb`` without the book nodes ``nodes`` (those of providers that did
    not answer): the book a clearing that left them out cleared, and records."""
    if not nodes:
        return cb
    gone = set(nodes)
    keep = [n for n in range(cb.book.n_nodes) if n not in gone]
    return ClearingBook(without_nodes(cb.book, nodes), cb.base_slot, cb.request_ids,
                        [cb.piece_offer[n] for n in keep], [cb.piece_node[n] for n in keep], cb.caps, cb.why)


def _accept(book: OrderBook, provider: str, asked: set[int], request: str, reply: str, msgs: Messages
            ) -> dict[int, np.ndarray]:
    """The runs of ``reply`` that were asked of ``provider`` in the request ``request`` (its
    :func:`request_id`) and are feasible; the rest dropped."""
    try:
        msg = json.loads(reply)
        answered = msg["runs"]
        if not isinstance(answered, list):
            raise ValueError("'runs' is not a list")
        named = msg.get("request")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        msgs.dropped.append(f"provider {provider!r} answered no readable runs: {exc!r}")
        return {}
    if named != request:
        msgs.dropped.append(f"provider {provider!r} answered another request ({named!r}, not this period's "
                            f"{request!r}): an earlier answer replayed, or none named")
        return {}
    out: dict[int, np.ndarray] = {}
    for item in answered:
        run = item.get("run") if isinstance(item, dict) else None
        if not isinstance(run, int) or run not in asked or run in out:
            msgs.dropped.append(f"provider {provider!r} answered run {run!r}, which it was not asked for (or twice)")
            continue
        try:
            out[run] = check_run(book, run, decode_run(book, item.get("jobs")))
        except ValueError as exc:
            msgs.dropped.append(f"provider {provider!r}: {exc}")
    return out

