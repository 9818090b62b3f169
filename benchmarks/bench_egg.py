"""Egg (Kang & Parkes 2007) benchmark: 100,000 bids against 100 providers with 48-slot price tables.

Prints two figures:

1. **auctioneer**: equations 3-5 for 100,000 bids of one slot against a fixed book
   (100 providers x 8 run-time x 4 memory buckets x 48 one-hour slots), chunked;
2. **market**: the whole infrastructure over 10 simulated days (100,000 bids arriving as a
   Poisson stream): every hour the clock rolls the tables, settlements due are paid or
   refunded (random completion, reliability recorded), all 100 providers install new
   load-aware tables (checked for admissibility in one vectorised call), and the hour's
   bids are cleared against them and put in escrow.

Target (issue 8): under 10 s on 2 cores. Both wall and CPU (process) time are printed: on a
shared machine the wall time includes other processes' share of the cores. Run::

    python benchmarks/bench_egg.py [--bids 100000] [--providers 100] [--slots 48]
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np

from marketsched.mechanisms.online.egg import (
    BidBatch,
    EstimatorStore,
    LinearEstimator,
    Market,
    PriceBook,
    ReliabilityLedger,
    clear,
)

HOUR = 3600.0


def build(rng, K: int, H: int, delta_h: float):
    rt_edges = np.array([0, 0.25, 0.5, 1, 2, 4, 8, 16, 24.0]) * HOUR  # 8 run-time buckets
    mem_edges = np.array([0, 1, 2, 4, 8.0])  # 4 memory buckets (GB)
    rate = rng.uniform(0.8, 1.6, K)  # currency per CPU-hour
    base = rate[:, None, None] * (rt_edges[1:] / HOUR)[None, :, None] * (1 + 0.1 * mem_edges[1:])[None, None, :]
    prices = np.broadcast_to(base[..., None], (K, 8, 4, H)).copy()
    book = PriceBook(K, [rt_edges, mem_edges], HOUR, delta_h * HOUR, H, 0.0, prices)
    models = [LinearEstimator([60.0, 0.1], [[rng.uniform(0.5, 1.5), 0.0], [0.0, rng.uniform(0.8, 1.2)]])
              for _ in range(K)]
    est = EstimatorStore(models, delta_h * HOUR, runtime_dim=0)
    return Market(book, est, ReliabilityLedger(K, alpha=4.0, beta=1.0)), base, rate


def bids_for(rng, n: int, t0: float, t1: float, delta_h: float) -> BidBatch:
    arrival = np.sort(rng.uniform(t0, t1, n))
    size = rng.exponential(1.5 * HOUR, n)  # requested run time (s)
    mem = rng.exponential(1.5, n)
    value = rng.uniform(0.5, 4.0, n) * (size / HOUR + 0.2)
    patience = rng.uniform(1.0, delta_h, n) * HOUR
    return BidBatch.linear(arrival, np.column_stack([size, mem]), value, value * rng.uniform(0.1, 1.0, n),
                           arrival + patience, min_reliability=np.where(rng.random(n) < 0.2, 0.7, 0.0))


def bench_auctioneer(rng, n: int, K: int, H: int, delta_h: float) -> dict:
    market, _, _ = build(rng, K, H, delta_h)
    bids = bids_for(rng, n, 0.0, HOUR - 1.0, delta_h)
    t, c = time.perf_counter(), time.process_time()
    Q = market.estimators.estimates(bids.description)
    r = market.estimators.runtimes(Q)
    el = market.eligibility(bids)
    out = clear(bids, market.book, Q, el, r)
    dt, cpu = time.perf_counter() - t, time.process_time() - c
    return {"seconds": dt, "cpu": cpu, "bids_per_s": n / dt, "scheduled": float(out.scheduled.mean())}


def bench_market(rng, n: int, K: int, H: int, delta_h: float, days: float = 10.0, kappa: float = 2.0) -> dict:
    market, base, rate = build(rng, K, H, delta_h)
    capacity = rng.integers(8, 64, K).astype(float) * HOUR  # CPU-seconds per slot
    bids = bids_for(rng, n, 0.0, days * 24 * HOUR, delta_h)
    success_p = rng.uniform(0.85, 0.999, K)
    slot_of = np.floor(bids.arrival / HOUR).astype(np.int64)
    bounds = np.searchsorted(slot_of, np.arange(int(days * 24) + 1))
    load = np.zeros((K, H))  # committed estimated work per provider and column
    rejected = 0
    scheduled = 0
    t_start, c_start = time.perf_counter(), time.process_time()
    for s in range(int(days * 24)):
        now = s * HOUR
        market.advance(now)
        shift = market.book.base - getattr(market, "_bench_base", market.book.base)
        if shift:
            load = np.concatenate([load[:, shift:], np.zeros((K, shift))], axis=1)
        market._bench_base = market.book.base
        due = market.due()
        if due.size:
            market.settle(due, rng.random(due.size) < success_p[market.escrow.provider[due]])
        # load-aware tables: base price x (1 + kappa * utilisation of the column), projected
        util = np.minimum(load / capacity[:, None], 2.0)
        wish = base[..., None] * (1.0 + kappa * util)[:, None, None, :]
        locked = market.book.locked_columns(now)
        cur = market.book.prices
        wish[..., locked] = np.maximum(wish[..., locked], cur[..., locked])
        np.maximum.accumulate(wish, axis=1, out=wish)
        np.maximum.accumulate(wish, axis=2, out=wish)
        rejected += len(market.book.update_many(np.arange(K), wish, now))
        batch = bids.take(slice(bounds[s], bounds[s + 1]))
        if len(batch):
            out, _ = market.submit(batch, np.arange(bounds[s], bounds[s + 1]), window=True)
            w = out.scheduled
            scheduled += int(w.sum())
            cols = out.slot[w] - market.book.base
            np.add.at(load, (out.provider[w], np.clip(cols, 0, H - 1)), out.runtime[w])
    market.advance(days * 24 * HOUR + 2 * delta_h * HOUR)
    due = market.due()
    market.settle(due, rng.random(due.size) < success_p[market.escrow.provider[due]])
    dt, cpu = time.perf_counter() - t_start, time.process_time() - c_start
    market.escrow.check()
    esc = market.escrow
    return {"seconds": dt, "cpu": cpu, "bids_per_s": n / dt, "scheduled": scheduled / n, "table_updates": market.book.updates,
            "rejected_updates": rejected, "paid": esc.paid, "refunded": esc.refunded, "held": esc.held,
            "reliability_min": float(market.ledger.reliability().min())}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bids", type=int, default=100_000)
    ap.add_argument("--providers", type=int, default=100)
    ap.add_argument("--slots", type=int, default=48)
    ap.add_argument("--delta-hours", type=float, default=24.0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    cpu0 = time.process_time()
    a = bench_auctioneer(rng, args.bids, args.providers, args.slots, args.delta_hours)
    print(f"auctioneer: {args.bids:,} bids x {args.providers} providers x {args.slots} slots "
          f"(8x4 buckets): {a['seconds']:.2f} s wall, {a['cpu']:.2f} s CPU, {a['bids_per_s']:,.0f} bids/s, "
          f"{a['scheduled']:.1%} scheduled")
    m = bench_market(rng, args.bids, args.providers, args.slots, args.delta_hours)
    print(f"market, 10 days: {args.bids:,} bids, {m['table_updates']:,} table updates "
          f"({m['rejected_updates']} rejected): {m['seconds']:.2f} s wall, {m['cpu']:.2f} s CPU, "
          f"{m['bids_per_s']:,.0f} bids/s, "
          f"{m['scheduled']:.1%} scheduled; escrow paid {m['paid']:,.0f}, refunded {m['refunded']:,.0f}, "
          f"held {m['held']:.0f}; lowest reliability {m['reliability_min']:.3f}")
    print(f"CPU time {time.process_time() - cpu0:.2f} s; peak RSS "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
