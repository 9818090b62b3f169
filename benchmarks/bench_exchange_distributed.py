"""Messages and CPU time of one clearing by the distributed randomized mechanism (Stößer 2009,
section 4.4, fig. 4.4), distributed versus central, at 10, 50 and 200 providers; with
``--agents``, also with each provider's agent as its own process over the exchange's API.

By default the providers are answered **in this process**, one after another
(:func:`ask_in_process`), so the figures are the computation and the message sizes, not network
or process overheads. Each provider offers one node; the book is a table 3.6
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

With ``--agents [SIZES]`` (default sizes 10 and 50; ``--agents 10,50,200``) each size is also cleared by a real exchange: the
same book entered as orders (one provider per node, one user per job), the API served in this
process on 127.0.0.1, one ``marketsched exchange provider run`` process per provider (polling
every ``--poll`` seconds), ``answer_seconds`` far above the clearing's time, so the clearing ends
when the last agent has answered. It prints, for that clearing: wall seconds from publishing to
commit, this process's CPU seconds (the exchange and the API), the agents' CPU seconds (sum and
largest, from /proc), the protocol's messages as the period record keeps them (asks published,
answers received, bytes each way), the agents' HTTP requests from their start to their stop
(their idle polls included), the largest agent's resident memory before the clearing (idle)
and at its peak (``VmHWM``, after answering), and whether the contracts equal the central
mechanism's on the recorded book. The machine's load average is printed first.

Run: ``python benchmarks/bench_exchange_distributed.py [--providers 10,50,200] [--alpha 10] [--repeat 1]
[--agents [10,50,200]] [--poll 0.05]``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from marketsched.exchange.api import ExchangeServer, ExchangeService, issue_token
from marketsched.exchange.book import ClearingBook, contracts_of, period_rng
from marketsched.exchange.core import Exchange, create_exchange
from marketsched.exchange.distributed import MECHANISM, ask_in_process, clear_distributed
from marketsched.exchange.provider_protocol import period_messages
from marketsched.exchange.store import ExchangeStore
from marketsched.mechanisms.clearing.orderbook import generate_order_book
from marketsched.mechanisms.clearing.randomized import distributed_randomized
from marketsched.platform.clock import FakeClock


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


TERMS = ("request_id", "offer_id", "node_id", "cpu", "mem", "first_slot", "last_slot", "user_price",
         "provider_price")


def _cpu_of(pid: int) -> float:
    """A process's user + system CPU seconds (/proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mib(pid: int, field: str = "VmRSS") -> float:
    """A process's resident memory now (``VmRSS``) or at its peak (``VmHWM``), MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def with_agents(providers: int, alpha: float, seed: int, poll: float) -> dict:
    """One clearing of the size's book by an exchange whose providers answer through agent
    processes (see the module docstring)."""
    book = generate_order_book(providers, 2 * providers, np.random.default_rng([5, providers, seed]))
    with tempfile.TemporaryDirectory(prefix="bench-agents-") as tmp:
        data = Path(tmp) / "ex"
        store = ExchangeStore(data, sync="normal")
        create_exchange(store, slot_seconds=60.0, period_seconds=60.0, mechanism=MECHANISM, alpha=alpha, seed=seed,
                        answer_seconds=3600.0)
        clock = FakeClock()  # the deadline never passes: the clearing ends with the last answer
        ex = Exchange(store, clock)
        base = ex.slot() + 1
        names = [f"p{n:03d}" for n in range(book.n_nodes)]
        for n, name in enumerate(names):
            ex.join(name)
            ex.add_node(name, "n0", int(book.node_cpu[n]), int(book.node_mem[n]))
            ex.submit_offer(name, "n0", float(book.node_reserve[n]), base + int(book.node_start[n]),
                            base + int(book.node_end[n]))
        for j in range(book.n_jobs):
            ex.submit_request(f"u{j:03d}", float(book.job_value[j]), int(book.job_cpu[j]), int(book.job_mem[j]),
                              base + int(book.job_release[j]), base + int(book.job_end[j]), "true")
        service = ExchangeService(ExchangeStore(data, sync="normal"), clock)
        srv = ExchangeServer(service, "127.0.0.1", 0)
        srv.serve_in_thread()
        agents = []
        try:
            for name in names:
                env = {**os.environ, "MARKETSCHED_TOKEN": issue_token(store, "provider", name, 0.0)}
                agents.append(subprocess.Popen(
                    [sys.executable, "-m", "marketsched.cli", "exchange", "provider", "run", "--url", srv.url,
                     "--data", str(data), "--poll", str(poll)], env=env, stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
            for a in agents:  # each has checked the server and asked who it is
                a.stderr.readline()
            threading.Thread(target=lambda: [a.stderr.read() for a in agents], daemon=True).start()
            rss = max(_rss_mib(a.pid) for a in agents)
            before = {a.pid: _cpu_of(a.pid) for a in agents}
            w0, c0 = time.perf_counter(), time.process_time()
            ex.clear()
            wall, cpu = time.perf_counter() - w0, time.process_time() - c0
            spent = [_cpu_of(a.pid) - before[a.pid] for a in agents]
            peak = max(_rss_mib(a.pid, "VmHWM") for a in agents)
        finally:
            for a in agents:
                a.send_signal(signal.SIGTERM)
            outs = [a.communicate(timeout=600)[0] for a in agents]
            srv.shutdown()
            service.store.close()
        requests = sum(json.loads(o.strip().splitlines()[-1])["requests"] for o in outs if o.strip())
        msgs = period_messages(store, 1)
        cb = ClearingBook.from_json(store.periods()[0]["book"])
        central = distributed_randomized(cb.book, alpha, period_rng(seed, 1))
        want = sorted(tuple(leg[k] for k in TERMS) for leg in contracts_of(cb, central.allocation, central.payments))
        got = sorted(tuple(c[k] for k in TERMS) for c in store.contracts())
        store.close()
    return {"wall": wall, "cpu": cpu, "agents_cpu": sum(spent), "agents_largest": max(spent), "calls": msgs["calls"],
            "answers": msgs["answers"], "sent": msgs["bytes_sent"], "received": msgs["bytes_received"],
            "http": requests, "rss": rss, "peak": peak, "same": got == want and bool(got), "dropped": len(msgs["dropped"])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--providers", default="10,50,200")
    ap.add_argument("--alpha", type=float, default=10.0)
    ap.add_argument("--repeat", type=int, default=1, help="books per size (seeds 0..repeat-1); medians printed")
    ap.add_argument("--agents", nargs="?", const="10,50", default=None, metavar="SIZES",
                    help="also clear with provider agent processes over the API, at these sizes (default 10,50)")
    ap.add_argument("--poll", type=float, default=0.05, help="--agents: seconds between an agent's polls")
    args = ap.parse_args()
    if args.agents:
        print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
        print("agents as processes: providers | wall s  exchange+API CPU s | agents CPU s (sum, largest) | asks "
              "answers  sent kB  recv kB  HTTP requests | agent RSS MiB (idle, peak) | equal")
        for p in (int(x) for x in args.agents.split(",")):
            r = with_agents(p, args.alpha, 0, args.poll)
            print(f"{p:9d} | {r['wall']:6.2f} {r['cpu']:19.3f} | {r['agents_cpu']:8.3f} {r['agents_largest']:8.3f} | "
                  f"{r['calls']:4d} {r['answers']:7d} {r['sent'] / 1e3:8.1f} {r['received'] / 1e3:8.1f} "
                  f"{r['http']:14d} | {r['rss']:6.0f} {r['peak']:6.0f} | {r['same']!s:5} (dropped {r['dropped']})")
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
