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
4. Each provider answers (:func:`answer`, computed from the request text alone) with the
   allocation of each of its runs.
5. The exchange keeps the runs it asked that provider for whose allocation is feasible on the
   book (:func:`~marketsched.mechanisms.clearing.distributed.check_run`), drops the others
   (recorded in :class:`Messages`; so are the runs of a provider whose ``ask`` raised
   ``OSError`` or ``TimeoutError``), runs the deterministic greedy itself, and enforces the best
   by its own welfare computation (:func:`~marketsched.mechanisms.clearing.distributed.combine_and_price`).

Requests and answers are JSON text, so that a provider agent over the exchange's API can answer
them; the providers are answered in this process for now (:func:`ask_in_process`). With honest
providers the result is the library's :func:`distributed_randomized` on the same book and
random numbers, and a replay (:mod:`.replay`) reproduces it from the record.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from marketsched.mechanisms.clearing.distributed import check_run, combine_and_price, local_step, run_seeds
from marketsched.mechanisms.clearing.orderbook import OrderBook
from marketsched.mechanisms.clearing.randomized import DistributedOutcome

from .book import book_rows

MECHANISM = "randomized-distributed"

Ask = Callable[[str, str], str]  # (provider, request text) -> answer text


@dataclass
class Messages:
    """What one distributed clearing exchanged with the providers."""

    calls: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    dropped: list[str] = field(default_factory=list)  # why each answer not used was dropped


def book_text(book: OrderBook) -> str:
    """The broadcast book: the jobs' and nodes' rows (Stößer 2009, section 3.4.1), no owners."""
    jobs, nodes = book_rows(book)
    return json.dumps({"jobs": jobs, "nodes": nodes})


def request_text(book_json: str, alpha: float, seeds: dict[int, np.random.SeedSequence]) -> str:
    """A provider's request: the broadcast book, alpha and the seeds of its runs."""
    runs = [{"run": r, "entropy": s.entropy, "spawn_key": list(s.spawn_key)} for r, s in sorted(seeds.items())]
    return f'{{"book": {book_json}, "alpha": {json.dumps(float(alpha))}, "runs": {json.dumps(runs)}}}'


def answer(request: str) -> str:
    """The provider's side (fig. 4.4, step 3): the randomized heuristic for each run asked, from
    the request text alone. Answer: ``{"runs": [{"run": r, "jobs": [[j, node, ...], ...]}]}``,
    one row per allocated job: its index and its book node in each slot of its window."""
    msg = json.loads(request)
    book = OrderBook.from_rows(msg["book"]["jobs"], msg["book"]["nodes"])
    seeds = {int(r["run"]): np.random.SeedSequence(r["entropy"], spawn_key=tuple(r["spawn_key"]))
             for r in msg["runs"]}
    out = []
    for run, assign in local_step(book, float(msg["alpha"]), seeds).items():
        rows = [[j, *assign[j, book.job_release[j]:book.job_end[j] + 1].tolist()]
                for j in np.flatnonzero((assign >= 0).any(axis=1)).tolist()]
        out.append({"run": run, "jobs": rows})
    return json.dumps({"runs": out})


def ask_in_process(provider: str, request: str) -> str:
    """A provider answered in the exchange's process (no agent process yet)."""
    return answer(request)


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
                      ask: Ask = ask_in_process) -> tuple[DistributedOutcome, Messages]:
    """One distributed clearing of ``book`` (``node_owner[n]``: the provider of book node n);
    the enforced outcome and the messages (steps 1-5 of the module docstring)."""
    if len(node_owner) != book.n_nodes:
        raise ValueError(f"node_owner names {len(node_owner)} providers for the book's {book.n_nodes} nodes")
    if not node_owner:
        raise ValueError("a distributed clearing needs at least one node in the book")
    n_runs = book.n_jobs + book.n_nodes
    seeds = run_seeds(rng, n_runs)
    shared = book_text(book)
    msgs = Messages()
    got: dict[int, np.ndarray] = {}
    for provider, runs in assign_runs(book, node_owner).items():
        request = request_text(shared, alpha, {r: seeds[r] for r in runs})
        msgs.calls += 1
        msgs.bytes_sent += len(request.encode())
        try:
            reply = ask(provider, request)
        except (OSError, TimeoutError) as exc:  # an agent unreachable or too late: its runs are left out
            msgs.dropped.append(f"provider {provider!r} did not answer: {exc}")
            continue
        msgs.bytes_received += len(reply.encode())
        got.update(_accept(book, provider, set(runs), reply, msgs))
    return combine_and_price(book, got, n_runs), msgs


def _accept(book: OrderBook, provider: str, asked: set[int], reply: str, msgs: Messages) -> dict[int, np.ndarray]:
    """The runs of ``reply`` that were asked of ``provider`` and are feasible; the rest dropped."""
    try:
        answered = json.loads(reply)["runs"]
        if not isinstance(answered, list):
            raise ValueError("'runs' is not a list")
    except (ValueError, KeyError, TypeError) as exc:
        msgs.dropped.append(f"provider {provider!r} answered no readable runs: {exc}")
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

