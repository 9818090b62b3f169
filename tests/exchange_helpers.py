"""A fake clock and fake provider backends for the exchange's tests (no processes, no time)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

from marketsched.exchange.core import Exchange, create_exchange
from marketsched.exchange.store import ExchangeStore
from marketsched.platform.clock import FakeClock


class FakeBackend:
    """Records starts; the test ends jobs by hand (``exit``: by themselves; ``fail``: by the
    provider's side), makes starts fail, or sets what a job was given (``given``)."""

    def __init__(self, clock):
        self.clock = clock
        self.live: dict[int, float] = {}
        self.exited: dict[int, int | None] = {}
        self.started: list[tuple[int, float, tuple]] = []
        self._news: list[tuple[int, int | None]] = []
        self.fail_start = False
        self.pending: set[int] = set()  # started, but the provider has not run them yet (a Slurm queue)
        self.faults: dict[int, str] = {}
        self.given: dict[int, dict] = {}  # contract -> measured {"cpus", "memory"} (default: nothing measured)
        self.contracted: dict[int, object] = {}

    def start(self, contract_id, command, env, cpus, user=None, contracted=None):
        self.contracted[contract_id] = contracted
        if self.fail_start:
            raise OSError("node down")
        assert contract_id not in self.live and contract_id not in self.exited, "a contract started twice"
        self.live[contract_id] = self.clock()
        self.started.append((contract_id, self.clock(), tuple(cpus or ())))

    def running(self, contract_id):
        return contract_id in self.live and contract_id not in self.pending

    def stop(self, contract_id):
        self.live.pop(contract_id)
        self.exited[contract_id] = -9
        return 0.0

    def ended(self):
        out, self._news = self._news, []
        return out

    def exit(self, contract_id, code):
        """The job's processes end by themselves with ``code`` (any status; None: unknown)."""
        self.live.pop(contract_id)
        self.exited[contract_id] = code
        self._news.append((contract_id, code))

    def fail(self, contract_id, why="node lost", code=None):
        """The provider's side ends the job (a lost node, a preemption)."""
        self.faults[contract_id] = why
        self.exit(contract_id, code)

    def fault(self, contract_id):
        return self.faults.pop(contract_id, None)

    def usage(self, contract_id, contracted=None):
        given = self.given.get(contract_id)
        out = {"cpu_seconds": None, "peak_memory": None, **(given or {"cpus": None, "memory": None})}
        if contracted is not None:
            out["shortfall"] = contracted.shortfall(len(contracted.node_cpus or (0,)), given)
        return out

    def reattach(self, contract_id):
        if contract_id in self.live:
            return True
        if contract_id in self.exited:
            self._news = [n for n in self._news if n[0] != contract_id]
            return self.exited[contract_id]
        return False

    def close(self):
        pass


class Machines:
    """Fake backends per provider that outlive an exchange (as processes outlive a kill -9)."""

    def __init__(self, clock):
        self.clock = clock
        self.by_name: dict[str, FakeBackend] = {}

    def __call__(self, provider):
        return self.by_name.setdefault(provider["name"], FakeBackend(self.clock))


def make_exchange(path, mechanism="critical-value", k=0.5, slot_seconds=10.0, period_seconds=30.0, seed=1,
                  penalty=1.0, clock=None, machines=None, deposits=False):
    store = ExchangeStore(path)
    create_exchange(store, slot_seconds=slot_seconds, period_seconds=period_seconds, mechanism=mechanism, k=k,
                    penalty=penalty, seed=seed, deposits=deposits)
    clock = clock or FakeClock()
    machines = machines or Machines(clock)
    ex = Exchange(store, clock, machines)
    ex.single_user = True  # fake jobs run as nobody's account (the tests run as root)
    return ex, clock, machines


def reopen(path, clock, machines):
    """The exchange started again on the same database (after a kill -9)."""
    ex = Exchange(ExchangeStore(path), clock, machines)
    ex.single_user = True
    ex.recover()
    return ex


def trade(ex, clock, periods: int, seed: int = 0) -> None:
    """``periods`` clearings of a small market from the clock's time on: providers p1-p3 (one
    node of 8 CPUs each, reserves 1, 2 and 3, offered for 400 slots, on the first call) and, before each
    clearing, six requests of users u0-u5 (1, 2 or 4 CPUs, values drawn from ``seed``, windows
    of 1-3 slots starting 2-4 slots ahead). Clearings are ``period_seconds`` apart."""
    import numpy as np

    rng = np.random.default_rng(seed)
    start = ex.slot() + 1
    for i, reserve in enumerate((1.0, 2.0, 3.0)):
        name = f"p{i + 1}"
        if not any(p["name"] == name for p in ex.store.providers()):
            ex.join(name)
            ex.add_node(name, "n0", 8, 64)
            ex.submit_offer(name, "n0", reserve, start, start + 399)
    for _ in range(periods):
        now = ex.slot()
        for u in range(6):
            first = now + int(rng.integers(2, 5))
            ex.submit_request(f"u{u}", round(float(rng.uniform(0.5, 6.0)), 2), int(rng.choice([1, 2, 4])),
                              int(rng.integers(0, 8)), first, first + int(rng.integers(0, 3)), "true")
        ex.clear()
        clock.advance(ex.settings["period_seconds"])


SCONTROL_PARTITIONS = (
    "PartitionName=main AllowGroups=ALL Default=YES Nodes=localhost State=UP TotalCPUs=8 TotalNodes=1\n"
    "PartitionName=gpu AllowGroups=ALL Default=NO Nodes=g[1-2] State=UP TotalCPUs=4 TotalNodes=2\n"
    "PartitionName=debug AllowGroups=ALL Default=NO Nodes=d[1-8] State=UP TotalCPUs=64 TotalNodes=8\n")


def fake_slurm_partitions(monkeypatch, text: str = SCONTROL_PARTITIONS, up: dict | None = None) -> None:
    """Slurm's partition table as the exchange sees it (``scontrol -o show partition``): main
    (the default, 8 CPUs), gpu (4) and debug (64); ``up``: CPUs up per partition name (None:
    the default one; default: all of them)."""
    from marketsched.exchange import capacity

    table = capacity.parse_partitions(text)
    monkeypatch.setattr(capacity, "slurm_partitions", lambda: table)

    def cpus_up(name):
        part = capacity.canonical_partition(name, table)
        return (up or {}).get(name, (up or {}).get(part.name, part.cpus))

    monkeypatch.setattr(capacity, "partition_cpus_up", cpus_up)


def one_contract(tmp_path, penalty=1.5):
    """p1 sells slots 2-5 of one node (4 CPU units on CPUs 0 and 1); u1 buys slots 2-3 (window
    [20 s, 40 s)): the exchange, its fake clock and machines, and the pending contract."""
    ex, clock, machines = make_exchange(tmp_path / "x.db", penalty=penalty)
    ex.join("p1")
    ex.add_node("p1", "n", 4, 100, cpus=[0, 1])
    ex.submit_offer("p1", "n", 5, 2, 5)
    ex.submit_request("u1", 12, 2, 10, 2, 3, "echo hi")
    ex.tick()
    (c,) = ex.store.contracts()
    return ex, clock, machines, c


@contextmanager
def api_with_agents(data, clock, hang: float):
    """The API of the exchange at ``data`` on 127.0.0.1 (on ``clock``) and a list for the agent
    processes a test starts; at the end the agents still running get SIGTERM (each waited for up
    to ``hang`` s) and the API stops."""
    from marketsched.exchange.api import ExchangeServer, ExchangeService

    service = ExchangeService(ExchangeStore(data), clock)
    srv = ExchangeServer(service, "127.0.0.1", 0)
    srv.serve_in_thread()
    agents: list = []
    try:
        yield srv, agents
    finally:
        for a in agents:
            if a.poll() is None:
                a.send_signal(signal.SIGTERM)
                a.wait(timeout=hang)
        srv.shutdown()
        service.store.close()


def agent_exchange(data, clock, providers, cpu: int, mem: int, last_slot: int) -> Exchange:
    """An exchange at ``data`` on ``clock`` (critical-value, slots of 10 s, penalty 1) whose
    ``providers`` are of the kind agent (their agents run their contracts), each with node n0 of
    ``cpu`` units and ``mem`` offered at 1.0 for slots 1 to ``last_slot``; single-user mode."""
    from marketsched.exchange.providers import provider_backends

    store = ExchangeStore(data)
    create_exchange(store, slot_seconds=10.0, period_seconds=30.0, mechanism="critical-value", penalty=1.0)
    ex = Exchange(store, clock, provider_backends(data))
    ex.single_user = True
    for p in providers:
        ex.join(p, "agent")
        ex.add_node(p, "n0", cpu, mem)
        ex.submit_offer(p, "n0", 1.0, 1, last_slot)
    return ex


def start_agent(srv, token: str, data: Path, work: Path, agents: list, log: Path | None = None) -> subprocess.Popen:
    """A real provider agent, ``exchange provider run`` on ``work`` with ``token``, polling the API
    ``srv`` every 0.05 s, added to ``agents`` (stopped by :func:`api_with_agents`). ``log``: its
    messages are appended there (else kept in pipes)."""
    cmd = [sys.executable, "-m", "marketsched.cli", "exchange", "provider", "run", "--url", srv.url, "--data",
           str(data), "--poll", "0.05", "--work", str(work)]
    env = {**os.environ, "MARKETSCHED_TOKEN": token}
    if log is None:
        proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    else:
        with open(log, "a") as err:
            proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
    agents.append(proc)
    return proc


def run_row(ex, cid: int, column: str, table: str = "ex_runs"):
    """Column ``column`` of contract ``cid``'s published run (``table``: ``ex_egg_runs`` for an Egg
    contract), read on a connection of its own (the agent's reports come through the API's)."""
    store = ExchangeStore(ex.store.path)
    try:
        return store.rows(f"SELECT {column} FROM {table} WHERE contract = ?", (cid,))[0][0]
    finally:
        store.close()


def egg_agent_exchange(data, clock, providers, cpu: int, mem: int) -> Exchange:
    """An Egg exchange at ``data`` on ``clock`` (slots of 1 s, the default Egg settings: run-time
    buckets in seconds, 9 buckets x 50 price columns) whose ``providers`` are of the kind agent,
    each with node n0 of ``cpu`` units and ``mem``; single-user mode."""
    from marketsched.exchange.providers import provider_backends

    store = ExchangeStore(data)
    create_exchange(store, slot_seconds=1, period_seconds=1, mechanism="egg")
    ex = Exchange(store, clock, provider_backends(data))
    ex.single_user = True
    for p in providers:
        ex.join(p, "agent")
        ex.add_node(p, "n0", cpu, mem)
    return ex


def egg_slurm_exchange(data, clock, single_user: bool, units: int = 8) -> Exchange:
    """An Egg exchange at ``data`` on ``clock`` (slots of an hour, patience 3 slots, one resource
    axis of 3 buckets) with provider ``cluster`` of the kind slurm (Slurm's default partition),
    node ``main`` of ``units`` CPU units and 1000 MiB, priced 1 in every cell but the current
    column's (not offered: an award is due at the next slot's start, not now); ``u1`` with 100."""
    from marketsched.exchange import egg
    from marketsched.exchange.providers import provider_backends

    store = ExchangeStore(data)
    create_exchange(store, slot_seconds=3600.0, period_seconds=3600.0, mechanism="egg",
                    egg=egg.default_settings(patience_slots=3, horizon_slots=4, edges=[[0, 2, 4, 8]],
                                             runtime_dim=None))
    ex = Exchange(store, clock, provider_backends(data, containment="none"))
    ex.single_user = single_user
    ex.join("cluster", kind="slurm")
    ex.add_node("cluster", "main", units, 1000)
    ex.deposit("u1", 100)
    with store.transaction():
        egg.post_prices(ex.egg, "cluster", [[None, 1.0, 1.0, 1.0]] * 3, clock())
    return ex
