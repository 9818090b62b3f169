"""Grid exchange figures end to end through its HTTP API.

The exchange (``marketsched exchange run``: slots of 1 s, a k-pricing clearing every 2 s,
SQLite with synchronous=FULL) and its API (``marketsched exchange serve`` on 127.0.0.1) run as
two processes of their own on one database. Four providers offer a 64-CPU node each for the
next 10 minutes through the API; then ``--clients`` users (threads, one keep-alive HTTP
connection each) submit ``--orders`` requests in all (1, 2 or 4 CPUs, a window of 1-2 slots
starting 8-12 slots ahead, values drawn from seed 1), while one subscriber listens to a price
alert stream (``above=0``: every clearing that trades). Prints:

* submissions per second through the API (each answered after its commit) and the latency
  percentiles of one submission;
* orders per second end to end: from the first submission until a committed clearing has had
  every request in its book (so each is filled into contracts or left open to expire), the
  number of clearings, and how many requests were filled;
* the delay of each price alert from its clearing's moment to the subscriber;
* the CPU seconds of the API process and of the exchange process (what they cost, whatever
  the load on the machine).

It checks that every submission was accepted exactly once (distinct ids; the database holds
exactly the submitted requests) and that the books balance.

    python benchmarks/bench_exchange_api.py [--orders 2000] [--clients 20]

The load is bounded (``--orders`` requests, 30 s timeout each) and goes to 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench_live import fmt_ms, proc_cpu  # the same figures as the live market's benchmark

from marketsched.exchange.core import Exchange
from marketsched.exchange.store import ExchangeStore


def cli(*args) -> str:
    return subprocess.run([sys.executable, "-m", "marketsched.cli", "exchange", *map(str, args)], check=True,
                          capture_output=True, text=True).stdout.strip()


class Conn:
    """One keep-alive HTTP connection with a token."""

    def __init__(self, port: int, token: str):
        self.http = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def call(self, method: str, path: str, body=None):
        self.http.request(method, path, body=None if body is None else json.dumps(body), headers=self.headers)
        r = self.http.getresponse()
        out = json.loads(r.read())
        if r.status != 200:
            raise RuntimeError(f"{method} {path}: {r.status} {out}")
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--orders", type=int, default=2000)
    ap.add_argument("--clients", type=int, default=20)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-exchange-api-"))
    data = tmp / "ex"
    procs: list[subprocess.Popen] = []
    try:
        cli("init", data, "--slot-seconds", 1, "--period-seconds", 2, "--mechanism", "k-pricing")
        providers = {}
        # 64-CPU nodes on this machine: more units than its CPUs back, which the command line
        # refuses; the library's unchecked add_node registers them (the jobs are `true`)
        store = ExchangeStore(data)
        ex = Exchange(store, lambda: 0.0)
        for i in range(4):
            cli("join", data, f"p{i}")
            ex.add_node(f"p{i}", "n0", 64, 1000)
            providers[f"p{i}"] = cli("token", data, f"p{i}", "--provider")
        store.close()
        users = {f"u{i}": cli("token", data, f"u{i}", "--user") for i in range(args.clients)}
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        log = open(tmp / "log", "wb")
        serve = subprocess.Popen([sys.executable, "-m", "marketsched.cli", "exchange", "serve", str(data), "--port",
                                  str(port)], stdout=log, stderr=log)
        run = subprocess.Popen([sys.executable, "-m", "marketsched.cli", "exchange", "run", str(data), "--poll",
                                "0.1", "--containment", "none", "--single-user"], stdout=log, stderr=log)
        procs += [serve, run]
        deadline = time.monotonic() + 60
        while True:
            try:
                health = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                health.request("GET", "/api/health")
                if health.getresponse().status == 200:
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the API did not come up: {(tmp / 'log').read_text()}") from None
                time.sleep(0.1)
        market = Conn(port, "").call("GET", "/api/market")
        epoch = time.time() - market["t"]
        for name, tok in providers.items():
            Conn(port, tok).call("POST", "/api/offers", {"node": "n0", "reserve": 1 + int(name[1:]),
                                                         "first_slot": market["slot"] + 2,
                                                         "last_slot": market["slot"] + 600})
        # the alert subscriber
        alerts: list[tuple[float, dict]] = []
        stop = threading.Event()

        def listen():
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            conn.request("GET", "/api/alerts?above=0", headers={"Authorization": f"Bearer {users['u0']}"})
            r = conn.getresponse()
            while not stop.is_set():
                line = r.readline()
                if not line:
                    break
                if line.startswith(b"data: "):
                    alerts.append((time.time(), json.loads(line[6:])))

        threading.Thread(target=listen, daemon=True).start()
        ids: list[int] = []
        lat: list[float] = []
        errors: list[str] = []
        per = args.orders // args.clients

        def client(name: str, tok: str, seed: int):
            rng = random.Random(seed)
            conn = Conn(port, tok)
            for _ in range(per):
                slot = int((time.time() - epoch) // 1)
                first = slot + rng.randint(8, 12)
                body = {"value": round(rng.uniform(1, 8), 2), "cpu": rng.choice([1, 2, 4]), "mem": rng.randint(0, 50),
                        "first_slot": first, "last_slot": first + rng.randint(0, 1), "command": "true"}
                t0 = time.perf_counter()
                try:
                    ids.append(conn.call("POST", "/api/requests", body)["id"])
                except Exception as exc:  # noqa: BLE001 - reported below
                    errors.append(repr(exc))
                lat.append(time.perf_counter() - t0)

        cpu0 = {p.pid: proc_cpu(p.pid) for p in procs}
        t0 = time.perf_counter()
        threads = [threading.Thread(target=client, args=(n, t, 1000 + i)) for i, (n, t) in enumerate(users.items())]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        submit_s = time.perf_counter() - t0
        n = len(ids)
        print(f"{n} requests from {args.clients} clients in {submit_s:.2f} s: {n / submit_s:.0f} submissions/s; "
              f"one submission {fmt_ms(lat)}")
        if errors:
            print(f"  {len(errors)} refused, e.g. {errors[0]}")
        # end to end: until a committed clearing has had every request in its book
        store = ExchangeStore(data, sync="normal")
        deadline = time.monotonic() + 120
        last_id = max(ids)
        while store.rows("SELECT COALESCE(MAX(last_order), 0) FROM ex_periods")[0][0] < last_id:
            if time.monotonic() > deadline:
                raise RuntimeError("no clearing saw the last request within 120 s")
            time.sleep(0.02)
        e2e = time.perf_counter() - t0
        filled = store.rows("SELECT COUNT(*) FROM ex_orders WHERE side = 'request' AND state = 'filled'")[0][0]
        contracts = store.rows("SELECT COUNT(*) FROM ex_contracts")[0][0]
        periods = store.rows("SELECT COUNT(*), MAX(latency), MAX(requests) FROM ex_periods WHERE requests > 0")[0]
        print(f"end to end: {n} requests submitted and cleared in {e2e:.2f} s: {n / e2e:.0f} orders/s "
              f"({periods[0]} clearings, the largest book {periods[2]} requests; {filled} filled into {contracts} "
              f"contracts; clearing latency at most {periods[1]:.3f} s)")
        cpu = {p.pid: proc_cpu(p.pid) - cpu0[p.pid] for p in procs}
        print(f"CPU seconds: API process {cpu[serve.pid]:.2f} ({1000 * cpu[serve.pid] / n:.2f} ms per submission), "
              f"exchange process {cpu[run.pid]:.2f}")
        time.sleep(1.0)  # the last clearing's alert
        stop.set()
        delays = [got - (epoch + a["t"]) for got, a in alerts]
        traded = store.rows("SELECT COUNT(DISTINCT period) FROM ex_contracts")[0][0]
        if delays:
            print(f"price alerts: {len(alerts)} of {traded} trading clearings received; delay from the clearing "
                  f"{fmt_ms(delays)}")
        stored = store.rows("SELECT COUNT(*), COUNT(DISTINCT id) FROM ex_orders WHERE side = 'request'")[0]
        assert len(set(ids)) == n == stored[0] == stored[1], (n, len(set(ids)), stored)
        books = store.check_books()
        print(f"checks: {n} distinct ids, {stored[0]} requests stored; books balance (mid-session: the clearing "
              f"account holds {books['clearing'] / 1e6:.6f} for contracts not all settled yet)")
        store.close()
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
