"""The provider's side of the distributed randomized clearing (Stößer 2009, section 4.4, fig. 4.4,
step 3): its answer to the exchange's request, computed from the request text alone.

Kept apart from :mod:`.distributed` (the exchange's side) so that a provider's agent
(``exchange provider run``, :mod:`.provider_agent`) imports only what answering needs:
NumPy and the library's local step, not the exchange's book, the exact clearing or SciPy.
Steps of :func:`answer`: read the request (the book's rows, alpha, the seeds of the runs
asked); run the randomized heuristic for each run
(:func:`~marketsched.mechanisms.clearing.distributed.local_step`); write each run's allocated
jobs with their nodes per slot, naming the request by :func:`request_id`.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np

from marketsched.mechanisms.clearing.distributed import local_step
from marketsched.mechanisms.clearing.orderbook import OrderBook


def request_id(request: str) -> str:
    """The name an answer gives the request it answers: the request text's SHA-256 (hex, first
    32 digits). The request holds its period's seeds, so no two periods' requests share it."""
    return hashlib.sha256(request.encode()).hexdigest()[:32]


def answer(request: str) -> str:
    """The provider's side (fig. 4.4, step 3): the randomized heuristic for each run asked, from
    the request text alone. Answer: ``{"request": request_id, "runs": [{"run": r, "jobs":
    [[j, node, ...], ...]}]}``, one row per allocated job: its index and its book node in each
    slot of its window."""
    msg = json.loads(request)
    book = OrderBook.from_rows(msg["book"]["jobs"], msg["book"]["nodes"])
    seeds = {int(r["run"]): np.random.SeedSequence(r["entropy"], spawn_key=tuple(r["spawn_key"]))
             for r in msg["runs"]}
    out = []
    for run, assign in local_step(book, float(msg["alpha"]), seeds).items():
        rows = [[j, *assign[j, book.job_release[j]:book.job_end[j] + 1].tolist()]
                for j in np.flatnonzero((assign >= 0).any(axis=1)).tolist()]
        out.append({"run": run, "jobs": rows})
    return json.dumps({"request": request_id(request), "runs": out})
