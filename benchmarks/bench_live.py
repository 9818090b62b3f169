"""Live market figures: load over loopback, and decision latency with a long queue.

Cases (issue 10):

* ``load``: a broker (``marketsched market serve``, its own process, 2 slots, HB + k-th price,
  SQLite with synchronous=FULL) on 127.0.0.1; 20 concurrent clients (threads, one user each,
  one HTTP connection per request) submit 1,000 jobs with random bids, twice: jobs that run at
  once (``true``: the mechanism starts, preempts and the executor launches ~1,000 processes
  during the run), and into a full market (every submission queues: the API, ledger and
  mechanism path alone). Prints throughput and latency percentiles,
  and checks every submission was accepted exactly once (1,000 distinct ids; the database
  holds exactly the 1,000 commands) and that the books balance.
* ``decision``: the time of one mechanism decision with 10,000 queued jobs, (a) in the
  :class:`~marketsched.platform.engine.LiveEngine` alone (an arrival that queues, an arrival that
  preempts, a completion), and (b) end to end in the broker (a submission committed to SQLite,
  a cancellation of a running job, which starts the next queued one), with 10,000 queued jobs
  in its database.
* ``flood``: a broker whose open-file limit is 1,024 (issue 16's set-up) while 1,500 idle
  connections are open: how long a health check takes (60 s at most), and a job submitted
  then (does it run?); then 10 requests with ``Content-Length: -1``, each followed by 40 MB
  that the server might read: the broker's resident memory before and after.

    python benchmarks/bench_live.py            # load and decision
    python benchmarks/bench_live.py load       # jobs that run at once, then a full market
    python benchmarks/bench_live.py decision
    python benchmarks/bench_live.py flood

The load is bounded (1,000 requests, 30 s timeout each; 1,500 sockets, 400 MB sent) and goes to
127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import os
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

from marketsched.platform.executor import kill_recorded_jobs


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


def fmt_ms(xs):
    return (f"p50 {1000 * pct(xs, 50):.2f} ms, p90 {1000 * pct(xs, 90):.2f} ms, p99 {1000 * pct(xs, 99):.2f} ms, "
            f"max {1000 * max(xs):.2f} ms")


def proc_cpu(pid) -> float:
    """CPU seconds (user + system) process ``pid`` has used: what it costs, whatever the load."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def served(*args, preexec_fn=None):
    """A broker (``marketsched market serve ARGS``, its own process) on a free port of
    127.0.0.1 in a fresh folder, up and answering; killed and cleaned away after. Yields
    ``(process, port, data folder, administrator's Client)``."""
    from marketsched.live.cli import Client

    tmp = Path(tempfile.mkdtemp(prefix="bench-live-"))
    data = tmp / "market"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(tmp / "broker.log", "wb")
    broker = subprocess.Popen([sys.executable, "-m", "marketsched.cli", "market", "serve", "--data", str(data),
                               "--port", str(port), *map(str, args)], stdout=log, stderr=log, preexec_fn=preexec_fn)
    try:
        url = f"http://127.0.0.1:{port}"
        probe = Client(url, None, timeout=5)
        deadline = time.monotonic() + 60
        while True:
            try:
                probe.get("/api/health")
                break
            except Exception:
                if time.monotonic() > deadline or broker.poll() is not None:
                    raise SystemExit("broker did not start: " + (tmp / "broker.log").read_text())
                time.sleep(0.1)
        yield broker, port, data, Client(url, (data / "admin.token").read_text().strip(), timeout=60)
    finally:
        if broker.poll() is None:
            broker.kill()
            broker.wait()
        log.close()
        kill_recorded_jobs(data)
        shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------------------- load
def load(n_clients=20, n_jobs=1000, full=False, sync="full"):
    """``full=False``: the jobs (``true``) run at once, so most submissions start a process.
    ``full=True``: two long high-bid jobs hold both slots first, so every submission queues:
    the API, ledger and mechanism path alone."""
    from marketsched.live.cli import Client
    from marketsched.platform.ledger import Store

    with served("--slots", 2, "--sync", sync, "--single-user") as (broker, port, data, admin):
        url = admin.url
        tokens = [admin.post("/api/users", {"name": f"user{i}", "deposit": 1e6})["token"] for i in range(n_clients)]
        if full:
            holder = Client(url, admin.post("/api/users", {"name": "holder", "deposit": 1e9})["token"])
            for k in range(2):
                holder.post("/api/jobs", {"bid": 1000, "command": f"sleep 3600 # holder {k}"})
        per = n_jobs // n_clients
        lat: list[float] = []
        ids: list[int] = []
        errors: list[str] = []
        lock = threading.Lock()
        start = threading.Barrier(n_clients + 1)

        def client(i):
            c = Client(url, tokens[i], timeout=30)
            rng = random.Random(i)
            start.wait()
            for k in range(per):
                t0 = time.perf_counter()
                try:
                    job = c.post("/api/jobs", {"bid": round(rng.uniform(1, 10), 3),
                                               "command": f"{'sleep 3600 #' if full else 'true'} {i}-{k}"})
                except Exception as exc:  # noqa: BLE001 - counted and printed
                    with lock:
                        errors.append(repr(exc))
                    continue
                dt = time.perf_counter() - t0
                with lock:
                    lat.append(dt)
                    ids.append(job["id"])

        threads = [threading.Thread(target=client, args=(i,)) for i in range(n_clients)]
        for t in threads:
            t.start()
        start.wait()
        cpu0 = proc_cpu(broker.pid)
        t0 = time.perf_counter()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        cpu = proc_cpu(broker.pid) - cpu0
        # let the jobs finish, then check the database
        deadline = time.monotonic() + (0 if full else 120)
        while time.monotonic() < deadline:
            p = admin.get("/api/price")
            if p["running"] == 0 and p["queued"] == 0:
                break
            time.sleep(0.2)
        drain = time.perf_counter() - t0
        broker.send_signal(signal.SIGTERM)
        broker.wait(timeout=30)
        store = Store(data)
        jobs = store.jobs()
        books = store.check_books()
        commands = sorted(j["command"] for j in jobs if "holder" not in j["command"])
        expected = sorted(f"{'sleep 3600 #' if full else 'true'} {i}-{k}" for i in range(n_clients) for k in range(per))
        completed = sum(j["state"] == "completed" for j in jobs)
        queued = sum(j["state"] == "queued" for j in jobs)
        store.close()
        what = ("market full (2 long jobs hold the slots): every submission queues" if full
                else "jobs run at once ('true'): most submissions start a process")
        print(f"load: {n_clients} clients x {per} submissions over loopback, broker with 2 slots (HB, k-th price), "
              f"SQLite synchronous={sync}; {what}")
        print(f"  accepted {len(ids)} of {n_clients * per}, errors {len(errors)}; distinct ids {len(set(ids))}; "
              f"database holds each command exactly once: {commands == expected}")
        print(f"  throughput {len(ids) / wall:.0f} submissions/s ({wall:.2f} s); latency {fmt_ms(lat)}")
        print(f"  broker CPU time {cpu:.2f} s: {1000 * cpu / max(len(ids), 1):.2f} ms per submission "
              f"(machine load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")
        done = f"{queued} jobs queued" if full else f"all {completed} jobs completed {drain:.1f} s after the start"
        print(f"  {done}; books: deposits {books['deposits'] / 1e6:g}"
              f" = users {books['users'] / 1e6:.6f} + revenue {books['revenue'] / 1e6:.6f}")
        for e in errors[:5]:
            print("  error:", e)
        return {"accepted": len(ids), "errors": len(errors), "throughput": len(ids) / wall,
                "p99_ms": 1000 * pct(lat, 99), "exactly_once": commands == expected and len(set(ids)) == len(ids)}




# ---------------------------------------------------------------------------- decision
def decision(n_queued=10_000, samples=2000):
    from marketsched.mechanisms.online.priority import PriorityScheduler
    from marketsched.platform.clock import FakeClock
    from marketsched.platform.engine import LiveEngine

    rng = random.Random(1)
    print(f"decision latency with {n_queued:,} queued jobs")
    for pricing in ("kth", "first"):
        for rule in ("hb", "nphb"):
            clock = FakeClock()
            eng = LiveEngine(PriorityScheduler([], [], [], preemptive=(rule == "hb"), pricing=pricing, name=rule), 2,
                             clock)
            eng.batch(arrivals=[(b, b, 1.0, 1) for b in (rng.uniform(1, 10) for _ in range(n_queued + 2))])
            eng.drain()
            t = 1.0
            queue_lat, top_lat, done_lat = [], [], []
            for _ in range(samples):
                t += 0.001
                clock.set(t)
                b = rng.uniform(0.1, 0.9)  # below every running bid: queues
                t0 = time.perf_counter()
                eng.submit_job(b, b, 1.0)
                queue_lat.append(time.perf_counter() - t0)
                b = 50 + rng.random()  # above every bid: HB preempts
                t0 = time.perf_counter()
                row = eng.submit_job(b, b, 1.0)
                top_lat.append(time.perf_counter() - t0)
                running = [j for j, r in enumerate(eng.running) if r] if not eng.running[row] else [row]
                t0 = time.perf_counter()
                eng.complete(running[0])
                done_lat.append(time.perf_counter() - t0)
                eng.drain()
            print(f"  engine {rule}/{pricing}: arrival that queues: {fmt_ms(queue_lat)}")
            print(f"  engine {rule}/{pricing}: arrival at the top:  {fmt_ms(top_lat)}")
            print(f"  engine {rule}/{pricing}: completion:          {fmt_ms(done_lat)}")
    broker_decision(n_queued)


def broker_decision(n_queued, samples=200):
    from marketsched.live.broker import Broker, MarketConfig

    tmp = Path(tempfile.mkdtemp(prefix="bench-live-dec-"))
    b = Broker(tmp / "market", MarketConfig(slots=2, single_user=True, max_jobs_per_user=n_queued + samples + 10)).start()
    try:
        b.ensure_admin()
        b.add_user(True, "u", 1e9)
        rng = random.Random(2)
        t0 = time.perf_counter()
        for k in range(n_queued + 2):
            bid = 100.0 if k < 2 else rng.uniform(1, 10)  # two long jobs hold the slots
            b.submit("u", False, bid, f"sleep 3600 # {k}")  # only jobs that get a slot start a process
        fill = time.perf_counter() - t0
        print(f"  broker: {n_queued + 2:,} submissions to fill the queue took {fill:.1f} s "
              f"({(n_queued + 2) / fill:.0f}/s, each committed)")
        sub, canc = [], []
        for k in range(samples):
            bid = rng.uniform(0.1, 0.9)
            t0 = time.perf_counter()
            b.submit("u", False, bid, f"sleep 3600 # q{k}")
            sub.append(time.perf_counter() - t0)
        print(f"  broker: submission that queues (validated, committed, decided): {fmt_ms(sub)}")
        for k in range(20):  # a running job is cancelled: its group killed, the best queued job starts
            running = sorted(b.running_jobs)
            t0 = time.perf_counter()
            b.cancel("u", False, running[0])
            canc.append(time.perf_counter() - t0)
        print(f"  broker: cancellation of a running job (kill, settle, start next): {fmt_ms(canc)}")
        p = b.price()
        print(f"  broker: queue now {p['queued']:,}, running {p['running']}")
    finally:
        b.stop(kill_jobs=False)
        kill_recorded_jobs(tmp / "market")
        shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------------------- flood
def flood(n_idle=1500, files=1024, n_bad=10, junk_mb=40):
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < n_idle + 200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, n_idle + 200), hard))
    with served("--slots", 1, "--single-user", preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (files, files))) as (
            broker, port, data, admin):
        _flood(broker, port, admin, n_idle, files, n_bad, junk_mb)


def _flood(broker, port, admin, n_idle, files, n_bad, junk_mb):
    from marketsched.live.cli import Client

    socks = []

    def health(timeout=60.0):
        t0 = time.perf_counter()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
                s.sendall(b"GET /api/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                ok = s.recv(100).startswith(b"HTTP/1.1 200")
        except OSError as exc:
            return None, f"{type(exc).__name__} after {time.perf_counter() - t0:.1f} s"
        return time.perf_counter() - t0, "200" if ok else "not 200"

    def cpu():
        return proc_cpu(broker.pid)

    def rss():
        for line in Path(f"/proc/{broker.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024

    try:
        user = Client(admin.url, admin.post("/api/users", {"name": "u", "deposit": 100})["token"], timeout=60)
        quiet = health()[0]
        cpu0 = cpu()
        t_open = time.monotonic()
        failed = 0
        for _ in range(n_idle):  # at most 60 s: a server that stops accepting fills the kernel's queue
            if time.monotonic() - t_open > 60:
                break
            s = socket.socket()
            s.settimeout(2)
            try:
                s.connect(("127.0.0.1", port))
                socks.append(s)
            except OSError:
                s.close()
                failed += 1
        took, what = health()
        cpu1 = cpu()
        print(f"flood: broker with an open-file limit of {files}, {len(socks)} idle connections open "
              f"({failed} connects timed out, {time.monotonic() - t_open:.0f} s to open; machine load average "
              f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)", flush=True)
        print(f"  broker CPU time from the first idle connection to the health check's answer: {cpu1 - cpu0:.2f} s "
              f"({1000 * (cpu1 - cpu0) / max(len(socks), 1):.2f} ms per connection)", flush=True)
        print(f"  health check: quiet {1000 * quiet:.1f} ms; during the flood "
              + (f"{1000 * took:.1f} ms ({what})" if took is not None else f"no answer ({what})"), flush=True)
        try:
            job = user.post("/api/jobs", {"bid": 1, "command": "echo ran"})
            t0 = time.monotonic()
            while time.monotonic() - t0 < 30:
                state = admin.get(f"/api/jobs/{job['id']}")
                if state["state"] in ("completed", "failed"):
                    break
                time.sleep(0.2)
            print(f"  a job submitted during the flood: {state['state']}"
                  + (f" ({state['note']})" if state["note"] else ""), flush=True)
        except Exception as exc:  # noqa: BLE001 - printed: that is the figure
            print(f"  a job submitted during the flood: {exc}", flush=True)
        for s in socks:
            s.close()
        socks.clear()
        before = rss()
        junk = b"x" * (1 << 20)
        for _ in range(n_bad):
            with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
                s.sendall(b"POST /api/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n")
                try:
                    for _ in range(junk_mb):
                        s.sendall(junk)
                except OSError:
                    pass
        time.sleep(1)
        after = rss()
        took, what = health()
        print(f"  {n_bad} requests with Content-Length: -1 and {junk_mb} MB after each: broker RSS "
              f"{before:.0f} MB -> {after:.0f} MB; health then "
              + (f"{1000 * took:.1f} ms" if took is not None else f"no answer ({what})"))
    finally:
        for s in socks:
            s.close()


def main(argv):
    cases = argv or ["load", "decision"]
    for c in cases:
        if c == "load":
            for sync in ("full", "normal"):
                load(full=False, sync=sync)
                load(full=True, sync=sync)
        elif c == "decision":
            decision()
        elif c == "flood":
            flood()
        else:
            raise SystemExit(f"unknown case {c!r}; choose load, decision or flood")


if __name__ == "__main__":
    main(sys.argv[1:])
