"""``exchange status`` says which nodes the last clearing sold below their registered CPU units,
and why (the reasons the clearing's book records: :mod:`marketsched.exchange.capacity`)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from marketsched.cli import main
from marketsched.exchange import capacity
from marketsched.exchange.core import Exchange
from marketsched.exchange.store import ExchangeStore
from marketsched.platform.clock import WallClock


def _ok(runner, *args):
    res = runner.invoke(main, ["exchange", *map(str, args)])
    assert res.exit_code == 0, res.output
    return res.output


def test_status_shows_why_capacity_is_lowered(tmp_path, monkeypatch):
    runner = CliRunner()
    data = tmp_path / "ex"
    _ok(runner, "init", data, "--slot-seconds", 1000, "--period-seconds", 1000, "--mechanism", "k-pricing")
    assert json.loads(_ok(runner, "status", data, "--json"))["capacity"] is None  # no clearing yet
    store = ExchangeStore(data)
    ex = Exchange(store, WallClock(store.settings()["epoch"]))
    monkeypatch.setattr(capacity, "cpus_here", lambda: {0})  # CPU 1 is offline, or out of the exchange's set
    ex.join("p1")
    ex.join("s1", kind="slurm", partition="gone")
    nodes = [("p1", "full", 1, [0]), ("p1", "half", 2, [0, 1]), ("s1", "big", 8, None)]
    for provider, name, cpu, cpus in nodes:  # the operator's own nodes, as registered (not checked now)
        ex.add_node(provider, name, cpu, 10, cpus=cpus)
        ex.submit_offer(provider, name, 1.0, 3, 5)
    monkeypatch.setattr(capacity, "partition_cpus_up", lambda partition: {"gone": 3}[partition])
    ex.clear()
    got = json.loads(_ok(runner, "status", data, "--json"))["capacity"]
    assert got["period"] == 1
    assert [(n["node"], n["registered"], n["sells"]) for n in got["nodes"]] == [("p1/half", 2, 1), ("s1/big", 8, 3)]
    assert "CPU(s) [1] not here (offline or out of the exchange's CPU set)" in got["nodes"][0]["why"]
    assert "Slurm partition 'gone' has too few CPUs up now: sells 3 of its 8 CPU units" in got["nodes"][1]["why"]
    text = _ok(runner, "status", data)
    assert "capacity lowered at the last clearing (period 1):" in text
    assert all(f"  {n['why']}" in text for n in got["nodes"])
    # the partition is whole again: the next clearing sells every registered unit but CPU 1's
    monkeypatch.setattr(capacity, "partition_cpus_up", lambda partition: 8)
    ex.clear()
    got = json.loads(_ok(runner, "status", data, "--json"))["capacity"]
    assert got["period"] == 2 and [n["node"] for n in got["nodes"]] == ["p1/half"]
    store.close()
