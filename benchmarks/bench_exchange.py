"""Benchmark of the live grid exchange: clearing latency per period at 2,500 orders per side.

Each period: 2,500 new requests and (in the first period) 2,500 node offers drawn from table
3.6 of Stößer (2009) (``generate_order_book``), submitted through the exchange (validation and
database included, in one transaction per batch), then one clearing (:meth:`Exchange.clear`:
reading the open book, building it with the capacity already sold, the library's mechanism,
writing the contracts in one short transaction). Offers stay open, so later periods clear
against residual capacity. Prints, per mechanism and period: orders in the book, contracts,
wall and CPU seconds of the whole clearing and of the mechanism alone.

Run: ``python benchmarks/bench_exchange.py [--periods 3] [--orders 2500]``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from marketsched.exchange.core import Exchange, create_exchange
from marketsched.exchange.store import ExchangeStore
from marketsched.mechanisms.clearing.orderbook import generate_order_book
from marketsched.platform.clock import FakeClock


def offer_nodes(ex: Exchange, book, providers: int, extra_slots: int = 0) -> None:
    """Providers p0.. join; node n of ``book`` is offered by provider n mod ``providers`` from
    slot 1 on (its window ``extra_slots`` longer), in one transaction."""
    with ex.store.transaction():
        for p in range(providers):
            ex.join(f"p{p}")
        for n in range(book.n_nodes):
            p = f"p{n % providers}"
            ex.add_node(p, f"n{n}", int(book.node_cpu[n]), int(book.node_mem[n]))
            ex.submit_offer(p, f"n{n}", float(book.node_reserve[n]), int(book.node_start[n]) + 1,
                            int(book.node_end[n]) + 1 + extra_slots)


def run(mechanism: str, orders: int, periods: int, providers: int, tmp: Path) -> None:
    store = ExchangeStore(tmp / f"{mechanism}.db")
    create_exchange(store, slot_seconds=60, period_seconds=60, mechanism=mechanism, k=0.5, seed=1)
    clock = FakeClock(0.0)
    ex = Exchange(store, clock)
    first = generate_order_book(orders, orders, np.random.default_rng([3, 0]))
    t0 = time.perf_counter()
    offer_nodes(ex, first, providers, 4 * periods)
    print(f"{mechanism}: {orders} nodes joined and offered in {time.perf_counter() - t0:.2f} s wall")
    for period in range(1, periods + 1):
        book = first if period == 1 else generate_order_book(orders, orders, np.random.default_rng([3, period]))
        base = ex.slot() + 1
        t0 = time.perf_counter()
        with store.transaction():
            for j in range(orders):
                ex.submit_request(f"u{j % 100}", float(book.job_value[j]), int(book.job_cpu[j]), int(book.job_mem[j]),
                                  int(book.job_release[j]) + base, int(book.job_end[j]) + base, "true")
        submit = time.perf_counter() - t0
        n_before = len(store.contracts())
        c0, t0 = time.process_time(), time.perf_counter()
        pid = ex.clear()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        row = store.periods()[pid - 1]
        print(f"  period {pid}: book {row['requests']} requests x {row['offers']} offers, "
              f"{len(store.contracts()) - n_before} contracts; clearing {wall * 1e3:.0f} ms wall / "
              f"{cpu * 1e3:.0f} ms CPU, of which the mechanism {row['latency'] * 1e3:.0f} ms wall; "
              f"{orders} requests submitted in {submit * 1e3:.0f} ms")
        clock.advance(60)
    store.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--orders", type=int, default=2500, help="orders per side per period")
    ap.add_argument("--periods", type=int, default=3)
    ap.add_argument("--providers", type=int, default=50)
    ap.add_argument("--mechanisms", default="critical-value,k-pricing,pay-as-bid")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-exchange-") as tmp:
        for mechanism in args.mechanisms.split(","):
            run(mechanism, args.orders, args.periods, args.providers, Path(tmp))


if __name__ == "__main__":
    main()
