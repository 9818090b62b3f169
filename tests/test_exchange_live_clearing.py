"""A large critical-value clearing never blocks the exchange: a real ``exchange run`` holds the
computation of a clearing of 2,500 orders per side at a test gate (event order, no wall-clock
margins) while a contract job reaches its window's end, parties read and write through the HTTP
API and ``exchange status`` runs. Asserts recorded facts only: the job was stopped and settled
while the clearing was held, every call answered without a 500, and the held clearing then
committed the whole book."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from live_helpers import raw, wait_for
from marketsched.exchange.api import ExchangeServer, ExchangeService, issue_token
from marketsched.exchange.clearing import GATE_ENV
from marketsched.exchange.core import Exchange, create_exchange
from marketsched.exchange.store import FINAL_CONTRACT_STATES, ExchangeStore
from marketsched.mechanisms.clearing.orderbook import generate_order_book
from marketsched.platform.clock import WallClock

SLOT = 1.0
ORDERS = 2500
FAR = 900  # slots ahead (of 1 s): the large book's contracts never start during the test


def _held(gate: Path) -> int | None:
    """The last order id of the clearing held at the gate, or None."""
    waiting = Path(f"{gate}.waiting")
    try:
        return int(waiting.read_text().split()[1])
    except (FileNotFoundError, IndexError, ValueError):
        return None


def test_a_large_clearing_blocks_no_read_write_or_window(tmp_path):
    data = tmp_path / "ex"
    gate = tmp_path / "gate"
    gate.touch()  # open: the first clearings make the contract whose window will end
    epoch = time.time()
    store = ExchangeStore(data)
    create_exchange(store, slot_seconds=SLOT, period_seconds=2 * SLOT, mechanism="critical-value", seed=1,
                    epoch=epoch)
    client = Exchange(store, WallClock(epoch))
    client.join("p1")
    client.add_node("p1", "n0", 2, 100, cpus=[0])
    now = client.slot()
    client.submit_offer("p1", "n0", 1.0, now + 1, now + 500)
    token = issue_token(store, "user", "alice", 0.0)
    service = ExchangeService(ExchangeStore(data), WallClock(epoch))
    srv = ExchangeServer(service, "127.0.0.1", 0)
    srv.serve_in_thread()
    log = open(tmp_path / "exchange.log", "ab")
    env = {**os.environ, GATE_ENV: str(gate)}
    proc = subprocess.Popen([sys.executable, "-m", "marketsched.cli", "exchange", "run", str(data), "--single-user",
                             "--containment", "none", "--poll", "0.1"], stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                            env=env)
    try:
        assert wait_for(lambda: len(store.periods()) > 0, timeout=120)
        first = client.slot() + 10  # room for several clearings (every 2 slots) on a loaded machine
        # a job that would run for 300 s in a window of 6 slots: the exchange must stop it
        victim_req = client.submit_request("v", 5.0, 1, 10, first, first + 5, "sleep 300")
        assert wait_for(lambda: any(c["request_id"] == victim_req and c["state"] == "running"
                                    for c in store.contracts()), timeout=120)
        (victim,) = [c["id"] for c in store.contracts() if c["request_id"] == victim_req]

        # close the gate, then the large book: 2,500 nodes offered and 2,500 requests, far ahead
        gate.unlink()
        book = generate_order_book(ORDERS, ORDERS, np.random.default_rng([5, 0]))
        base = client.slot() + FAR
        with store.transaction():
            for p in range(50):
                client.join(f"big{p}")
            for n in range(ORDERS):
                owner = f"big{n % 50}"
                client.add_node(owner, f"n{n}", int(book.node_cpu[n]), int(book.node_mem[n]))
                client.submit_offer(owner, f"n{n}", float(book.node_reserve[n]), base + int(book.node_start[n]),
                                    base + int(book.node_end[n]))
            for j in range(ORDERS):
                client.submit_request(f"u{j % 100}", float(book.job_value[j]), int(book.job_cpu[j]),
                                      int(book.job_mem[j]), base + int(book.job_release[j]),
                                      base + int(book.job_end[j]), "true")
        big_last = store.last_order_id()
        # a clearing that snapshotted before the large book is let through, until one holding it waits
        while True:
            assert wait_for(lambda: _held(gate) is not None, timeout=120)
            if _held(gate) >= big_last:
                break
            gate.touch()  # the held clearing passes (it removes its .waiting file), then the gate closes again
            assert wait_for(lambda: not Path(f"{gate}.waiting").exists(), timeout=120)
            gate.unlink()
        held = len(store.periods())

        # while the large clearing is held: the victim's window ends and it is stopped and settled
        assert wait_for(lambda: store.contract(victim)["state"] in FINAL_CONTRACT_STATES, timeout=120)
        assert store.contract(victim)["ended_t"] >= store.contract(victim)["end_t"]  # stopped at its window's end
        # reads and writes through the API answer, never 500
        for path in ("/api/orders", "/api/contracts", "/api/market", "/api/market/history", "/api/me"):
            status, _ = raw(srv, "GET", path, token=token)
            assert status == 200, path
        body = json.dumps({"value": 3, "cpu": 1, "mem": 1, "first_slot": client.slot() + 3,
                           "last_slot": client.slot() + 4, "command": "true"}).encode()
        status, answer = raw(srv, "POST", "/api/requests", body, token=token,
                             headers={"Content-Type": "application/json"})
        assert status in (200, 201), answer
        rid = json.loads(answer)["id"]
        status, answer = raw(srv, "POST", f"/api/orders/{rid}/cancel", token=token)
        assert status == 200, answer
        # the command line too
        out = subprocess.run([sys.executable, "-m", "marketsched.cli", "exchange", "status", str(data)],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
        assert _held(gate) is not None and len(store.periods()) == held  # the clearing is still held

        gate.touch()  # release: the large clearing commits
        assert wait_for(lambda: _committed(store, big_last), timeout=300)
        period = next(p for p in store.periods() if p["last_order"] >= big_last)
        assert period["requests"] == ORDERS and period["mechanism"] == "critical-value"
        assert len([c for c in store.contracts() if c["period"] == period["id"]]) > ORDERS // 2
        store.check_books()
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        log.close()
        srv.shutdown()
        service.store.close()
        for c in store.contracts(("starting", "running")):
            from marketsched.platform.jobfiles import read_state

            rec = read_state(data / "providers" / c["provider"], c["id"])
            if rec is not None:
                try:
                    os.killpg(rec["pid"], signal.SIGKILL)
                except ProcessLookupError:
                    pass
    assert "Traceback" not in (tmp_path / "exchange.log").read_text()


def _committed(store: ExchangeStore, big_last: int) -> bool:
    """Whether a clearing that saw order ``big_last`` committed."""
    return any(p["last_order"] >= big_last for p in store.periods())
