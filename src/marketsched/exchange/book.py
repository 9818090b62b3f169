"""One clearing: open orders to an :class:`OrderBook`, the library's mechanism, and back to contracts.

The exchange does not re-implement any mechanism: it builds the book of Stößer (2009,
section 3.4.1) from its open orders and calls :mod:`marketsched.mechanisms.clearing`
(:func:`greedy_allocation` with :func:`critical_value_pricing` or :func:`k_pricing`;
:func:`randomized_allocation` with :func:`pay_as_bid`).

Decisions the thesis leaves to the exchange:

* **Slots.** The book's slot 0 is the first slot after the clearing (``base_slot``): only
  future slots are traded. A request whose first slot has passed has expired; an offer is cut
  to its slots from ``base_slot`` on.
* **Offers stay open** until their window has passed. A node's capacity already sold by earlier
  contracts (in any state: a failed or lapsed contract's slots are not resold) is taken out by
  giving the book one node per run of slots with the same residual capacity. Jobs may move
  between nodes from slot to slot in the thesis's model, so these pieces behave exactly as one
  node whose capacity varies over time. Pieces with no CPU left are left out. A node's
  capacity is first lowered to what can be sold now (``caps``, :mod:`.capacity`: a Slurm
  partition's CPUs that are up, a local node's CPUs still here), so a clearing never sells
  more than exists; the book records why (``why``).
* **Contracts.** An allocated job becomes one contract per run of consecutive slots on one
  node (usually one contract; more when the mechanism moved the job between nodes).
* **Exact clearing.** ``exact`` allocates with the welfare-maximising MIP (:func:`solve_exact`,
  eqs. 3.1-3.6, proven optimum: ``mip_rel_gap=0``) and prices by k-pricing, which is
  budget-balanced on any allocation. It is meant for small books: a book of more than
  ``EXACT_MAX_ORDERS`` orders (requests plus book nodes), or one the solver does not prove
  optimal within ``EXACT_SECONDS``, is cleared by GREEDEX with k-pricing instead. The
  period records the mechanism that cleared it, and the replay uses that one.
* **Money.** A job pays the library's payment ``pay.job[j]`` rounded to a micro-unit, and a
  node receives the sum of its pieces' ``pay.node`` rounded to a micro-unit; each is split
  over its contracts in proportion to CPU slots by the largest-remainder method, so the sums
  are exact. The exchange's clearing account keeps the rounding residue.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from marketsched.mechanisms.clearing.exact import solve_exact
from marketsched.mechanisms.clearing.greedex import (
    Allocation,
    Payments,
    critical_value_pricing,
    greedy_allocation,
    k_pricing,
)
from marketsched.mechanisms.clearing.orderbook import OrderBook
from marketsched.mechanisms.clearing.randomized import pay_as_bid, randomized_allocation

from .store import to_micro


def book_rows(b: OrderBook) -> tuple[list, list]:
    """The book's job rows ``(v_j, c_j, m_j, r_j, e_j)`` and node rows ``(v_n, C_n, M_n, R_n, E_n)``."""
    jobs = np.column_stack([b.job_value, b.job_cpu, b.job_mem, b.job_release, b.job_end]).tolist()
    nodes = np.column_stack([b.node_reserve, b.node_cpu, b.node_mem, b.node_start, b.node_end]).tolist()
    return jobs, nodes


@dataclass(frozen=True)
class ClearingBook:
    """The order book of one period and what its rows stand for."""

    book: OrderBook
    base_slot: int
    request_ids: list[int]  # book job j -> request order id
    piece_offer: list[int]  # book node -> offer order id
    piece_node: list[int]  # book node -> exchange node id
    caps: dict[int, int] = field(default_factory=dict)  # node id -> CPU units it could sell (checked now)
    why: dict[int, str] = field(default_factory=dict)  # node id -> why it sold below its registered units

    def to_json(self) -> str:
        jobs, nodes = book_rows(self.book)
        return json.dumps({"jobs": jobs, "nodes": nodes, "base_slot": self.base_slot, "request_ids": self.request_ids,
                           "piece_offer": self.piece_offer, "piece_node": self.piece_node,
                           "caps": {str(k): v for k, v in self.caps.items()},
                           "why": {str(k): v for k, v in self.why.items()}})

    @classmethod
    def from_json(cls, text: str) -> ClearingBook:
        d = json.loads(text)
        return cls(OrderBook.from_rows(d["jobs"], d["nodes"]), d["base_slot"], d["request_ids"], d["piece_offer"],
                   d["piece_node"], {int(k): v for k, v in d.get("caps", {}).items()},
                   {int(k): v for k, v in d.get("why", {}).items()})


def build_book(requests: list[dict], offers: list[dict], nodes: dict[int, dict], sold: list[dict],
               base_slot: int, caps: dict[int, int] | None = None, why: dict[int, str] | None = None
               ) -> ClearingBook:
    """The book of the open ``requests`` and ``offers`` (rows of the orders table, in id
    order) with slots from ``base_slot`` on; ``sold``: contracts already made (capacity taken);
    ``caps``: CPU units a node can sell now, below its registered capacity (a Slurm node down,
    a local node's CPU gone), and ``why`` (recorded with the book)."""
    caps = caps or {}
    jobs = [(r["value"], r["cpu"], r["mem"], r["first_slot"] - base_slot, r["last_slot"] - base_slot)
            for r in requests]
    by_node: dict[int, list[dict]] = {}
    for c in sold:
        by_node.setdefault(c["node_id"], []).append(c)
    rows, piece_offer, piece_node = [], [], []
    for o in offers:
        node = nodes[o["node_id"]]
        first, last = max(o["first_slot"], base_slot), o["last_slot"]
        if last < first:
            continue
        span = last - first + 1
        cpu = np.full(span, min(node["cpu"], caps.get(o["node_id"], node["cpu"])), dtype=np.int64)
        mem = np.full(span, node["mem"], dtype=np.int64)
        for c in by_node.get(o["node_id"], []):
            lo, hi = max(c["first_slot"], first), min(c["last_slot"], last)
            if lo <= hi:
                cpu[lo - first:hi - first + 1] -= c["cpu"]
                mem[lo - first:hi - first + 1] -= c["mem"]
        start = 0
        for i in range(1, span + 1):
            if i == span or cpu[i] != cpu[start] or mem[i] != mem[start]:
                if cpu[start] > 0:
                    rows.append((o["value"], int(cpu[start]), int(mem[start]), first + start - base_slot,
                                 first + i - 1 - base_slot))
                    piece_offer.append(o["id"])
                    piece_node.append(o["node_id"])
                start = i
    return ClearingBook(OrderBook.from_rows(jobs, rows), base_slot, [r["id"] for r in requests], piece_offer,
                        piece_node, dict(caps), dict(why or {}))


EXACT_MAX_ORDERS = 60
EXACT_SECONDS = 30.0


def run_mechanism(book: OrderBook, mechanism: str, k: float, alpha: float,
                  rng: np.random.Generator | None) -> tuple[Allocation, Payments] | None:
    """The library's clearing of ``book``: allocation and payments (``exact``: None when the
    solver did not prove an optimum within ``EXACT_SECONDS``)."""
    if mechanism == "exact":
        res = solve_exact(book, time_limit=EXACT_SECONDS, mip_rel_gap=0.0)
        return (res.allocation, k_pricing(book, res.allocation, k)) if res.status == "optimal" else None
    if mechanism == "pay-as-bid":
        if rng is None:
            raise ValueError("the randomized mechanism needs its period's random numbers")
        alloc = randomized_allocation(book, alpha, rng)
        return alloc, pay_as_bid(book, alloc)
    alloc = greedy_allocation(book)
    if mechanism == "critical-value":
        return alloc, critical_value_pricing(book, alloc)
    if mechanism == "k-pricing":
        return alloc, k_pricing(book, alloc, k)
    raise ValueError(f"unknown mechanism {mechanism!r}")


def period_rng(seed: int, period: int) -> np.random.Generator:
    """The random numbers of period ``period`` (only the randomized mechanism draws any)."""
    return np.random.default_rng([seed, period])


def split(total: int, weights: list[int]) -> list[int]:
    """``total`` micro-units split in proportion to positive integer ``weights`` by the
    largest-remainder method (ties to the earlier share); the parts add up to ``total``."""
    w_sum = sum(weights)
    parts = [total * w // w_sum for w in weights]
    rest = [total * w % w_sum for w in weights]
    for i in sorted(range(len(weights)), key=lambda i: (-rest[i], i))[:total - sum(parts)]:
        parts[i] += 1
    return parts


def contracts_of(cb: ClearingBook, alloc: Allocation, pay: Payments) -> list[dict]:
    """The contracts of a clearing: request, offer, node, absolute slots, prices in micro-units."""
    b = cb.book
    legs: list[dict] = []
    for j in np.flatnonzero(alloc.allocated).tolist():
        r = int(b.job_release[j])
        row = [cb.piece_node[p] for p in alloc.job_nodes(j).tolist()]
        pieces = alloc.job_nodes(j).tolist()
        start = 0
        for i in range(1, len(row) + 1):
            if i == len(row) or row[i] != row[start]:
                legs.append({"job": j, "request_id": cb.request_ids[j], "offer_id": cb.piece_offer[pieces[start]],
                             "node_id": row[start], "cpu": int(b.job_cpu[j]), "mem": int(b.job_mem[j]),
                             "first_slot": cb.base_slot + r + start, "last_slot": cb.base_slot + r + i - 1})
                start = i
    weight = [leg["cpu"] * (leg["last_slot"] - leg["first_slot"] + 1) for leg in legs]
    by_job: dict[int, list[int]] = {}
    by_node: dict[int, list[int]] = {}
    for i, leg in enumerate(legs):
        by_job.setdefault(leg["job"], []).append(i)
        by_node.setdefault(leg["node_id"], []).append(i)
    node_total: dict[int, float] = {}
    for p, n in enumerate(cb.piece_node):
        node_total[n] = node_total.get(n, 0.0) + float(pay.node[p])
    for j, idx in by_job.items():
        # A payment never exceeds the bid (value x CPU x slots, as the deposit check reserves it):
        # the library's float sum of per-slot prices can pass it by a micro-unit, which is cut.
        bid = to_micro(float(b.job_value[j]) * int(b.job_cpu[j]) * (int(b.job_end[j]) - int(b.job_release[j]) + 1))
        for i, part in zip(idx, split(min(to_micro(pay.job[j]), bid), [weight[i] for i in idx])):
            legs[i]["user_price"] = part
    for n, idx in by_node.items():
        for i, part in zip(idx, split(to_micro(node_total[n]), [weight[i] for i in idx])):
            legs[i]["provider_price"] = part
    for leg in legs:
        del leg["job"]
    return legs
