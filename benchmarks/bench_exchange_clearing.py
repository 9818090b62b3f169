"""Benchmark of one exchange clearing per mechanism at 100, 500, 1,000 and 2,500 orders per side.

For each size a fresh exchange gets N nodes offered and N requests from a table 3.6 book of
Stößer (2009) (``generate_order_book``), then one clearing (:meth:`Exchange.clear`: snapshot,
book, the library's mechanism, commit). Prints the CPU seconds of the whole clearing and of the
mechanism alone (the period's recorded latency is wall time; the CPU figure is the fairer one on
a shared machine).

Critical values run in the compiled kernel when it is built; ``MARKETSCHED_ENGINE=python`` runs
the Python path (the figures before the kernel); ``PYTHONPATH=<old checkout>/src`` measures
another version (the mechanism column is then not split out). Run:
``python benchmarks/bench_exchange_clearing.py [--sizes 100,500,1000,2500] [--mechanisms ...]``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_exchange import offer_nodes

from marketsched.exchange.core import Exchange, create_exchange
from marketsched.exchange.store import ExchangeStore
from marketsched.mechanisms.clearing.orderbook import generate_order_book
from marketsched.platform.clock import FakeClock


def one(mechanism: str, n: int, tmp: Path, providers: int = 50) -> tuple[float, float, int]:
    """(CPU s of the clearing, CPU s of the mechanism, contracts) for one size."""
    store = ExchangeStore(tmp / f"{mechanism}-{n}.db", sync="normal")
    create_exchange(store, slot_seconds=60, period_seconds=60, mechanism=mechanism, k=0.5, seed=1)
    ex = Exchange(store, FakeClock(0.0))
    book = generate_order_book(n, n, np.random.default_rng([3, n]))
    offer_nodes(ex, book, providers)
    with store.transaction():
        for j in range(n):
            ex.submit_request(f"u{j % 100}", float(book.job_value[j]), int(book.job_cpu[j]), int(book.job_mem[j]),
                              int(book.job_release[j]) + 1, int(book.job_end[j]) + 1, "true")
    try:
        from marketsched.exchange import clearing
    except ImportError:  # a version before the snapshot clearing (PYTHONPATH=<old checkout>/src): no split
        c0 = time.process_time()
        ex.clear()
        return time.process_time() - c0, float("nan"), len(store.contracts())
    spent = []
    compute = clearing.compute

    def timed(*args, **kw):
        c0 = time.process_time()
        try:
            return compute(*args, **kw)
        finally:
            spent.append(time.process_time() - c0)

    clearing.compute = timed
    try:
        c0 = time.process_time()
        ex.clear()
        total = time.process_time() - c0
    finally:
        clearing.compute = compute
    contracts = len(store.contracts())
    store.close()
    return total, sum(spent), contracts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100,500,1000,2500")
    ap.add_argument("--mechanisms", default="critical-value,k-pricing,pay-as-bid")
    args = ap.parse_args()
    engine = os.environ.get("MARKETSCHED_ENGINE", "auto")
    print(f"one clearing, CPU seconds (MARKETSCHED_ENGINE={engine})")
    print(f"{'mechanism':16s} {'orders/side':>11s} {'clearing':>10s} {'mechanism':>10s} {'contracts':>10s}")
    with tempfile.TemporaryDirectory(prefix="bench-clearing-") as tmp:
        for mechanism in args.mechanisms.split(","):
            for n in (int(s) for s in args.sizes.split(",")):
                total, mech, contracts = one(mechanism, n, Path(tmp))
                print(f"{mechanism:16s} {n:11d} {total:10.2f} {mech:10.2f} {contracts:10d}", flush=True)


if __name__ == "__main__":
    main()
