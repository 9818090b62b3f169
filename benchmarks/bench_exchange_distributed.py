"""Messages and CPU time of one clearing by the distributed randomized mechanism (Stößer 2009,
section 4.4, fig. 4.4), distributed versus central, at 10, 50 and 200 providers.

The providers are answered **in this process**, one after another (:func:`ask_in_process`): no
provider agent runs as its own process yet, so the figures are the computation and the message
sizes, not network or process overheads. Each provider offers one node; the book is a table 3.6
book of Stößer (2009) (``generate_order_book``) with twice as many jobs as nodes (the
competitive setting of table 4.7), so a clearing has |J| + |N| randomized runs.

For each size it prints:

* central: CPU seconds of :func:`distributed_randomized` (all runs batched in one process);
* distributed: calls and bytes sent / received (JSON text of the requests and answers), the CPU
  seconds the exchange spends (requests, checks, deterministic run, combining, pricing), the sum
  and the largest of the providers' CPU seconds, and ``exchange + largest provider``: the CPU
  time on the critical path if the providers answered in parallel (an estimate; nothing runs in
  parallel here);
* whether the two outcomes are equal (allocation and payments, exactly).

Run: ``python benchmarks/bench_exchange_distributed.py [--providers 10,50,200] [--alpha 10] [--repeat 1]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from marketsched.exchange.distributed import ask_in_process, clear_distributed
from marketsched.mechanisms.clearing.orderbook import generate_order_book
from marketsched.mechanisms.clearing.randomized import distributed_randomized


def one(providers: int, alpha: float, seed: int) -> dict:
    book = generate_order_book(providers, 2 * providers, np.random.default_rng([5, providers, seed]))
    owner = [f"p{n:03d}" for n in range(book.n_nodes)]
    c0 = time.process_time()
    central = distributed_randomized(book, alpha, np.random.default_rng([seed, 1]))
    central_cpu = time.process_time() - c0
    spent: list[float] = []

    def ask(provider: str, request: str) -> str:
        t0 = time.process_time()
        try:
            return ask_in_process(provider, request)
        finally:
            spent.append(time.process_time() - t0)

    c0 = time.process_time()
    out, msgs = clear_distributed(book, owner, alpha, np.random.default_rng([seed, 1]), ask)
    total = time.process_time() - c0
    same = (np.array_equal(out.allocation.assign, central.allocation.assign)
            and np.array_equal(out.payments.job, central.payments.job)
            and np.array_equal(out.payments.node, central.payments.node))
    return {"jobs": book.n_jobs, "nodes": book.n_nodes, "runs": book.n_jobs + book.n_nodes,
            "central": central_cpu, "calls": msgs.calls, "sent": msgs.bytes_sent, "received": msgs.bytes_received,
            "exchange": total - sum(spent), "providers": sum(spent), "largest": max(spent), "same": same,
            "randomized": out.randomized}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--providers", default="10,50,200")
    ap.add_argument("--alpha", type=float, default=10.0)
    ap.add_argument("--repeat", type=int, default=1, help="books per size (seeds 0..repeat-1); medians printed")
    args = ap.parse_args()
    print("providers jobs runs | central CPU s | calls  sent kB  recv kB | exchange CPU s  providers CPU s  "
          "largest  exch+largest | equal  randomized")
    for p in (int(x) for x in args.providers.split(",")):
        rows = [one(p, args.alpha, s) for s in range(args.repeat)]

        def med(key: str, rows: list[dict] = rows) -> float:
            return float(np.median([r[key] for r in rows]))

        print(f"{p:9d} {rows[0]['jobs']:4d} {rows[0]['runs']:4d} | {med('central'):13.3f} | {med('calls'):5.0f} "
              f"{med('sent') / 1e3:8.1f} {med('received') / 1e3:8.1f} | {med('exchange'):14.3f} "
              f"{med('providers'):16.3f} {med('largest'):8.4f} {med('exchange') + med('largest'):13.3f} | "
              f"{all(r['same'] for r in rows)!s:5}  {sum(r['randomized'] for r in rows)}/{len(rows)}")


if __name__ == "__main__":
    main()
