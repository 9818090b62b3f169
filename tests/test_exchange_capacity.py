"""Capacity that exists: a provider joining by itself sells no more CPU units than the CPUs that
back its node, and a Slurm partition once, whatever name it is given (Slurm's default partition
and its own name are one partition). Slurm's partition table is injected."""

from __future__ import annotations

import re

import pytest

from exchange_helpers import SCONTROL_PARTITIONS as SCONTROL
from exchange_helpers import fake_slurm_partitions, make_exchange
from marketsched.exchange import capacity
from marketsched.exchange.capacity import CPU_UNIT, canonical_partition, parse_partitions
from marketsched.exchange.core import Exchange
from marketsched.exchange.store import ExchangeStore


@pytest.fixture
def slurm(monkeypatch):
    fake_slurm_partitions(monkeypatch)


def test_the_scontrol_table_and_canonical_names():
    parts = parse_partitions(SCONTROL)
    assert canonical_partition(None, parts).name == "main"
    assert canonical_partition("main", parts).name == "main"
    assert (canonical_partition("gpu", parts).cpus, canonical_partition("gpu", parts).default) == (4, False)
    with pytest.raises(ValueError, match="Slurm has no partition 'dbg' \\(it has: debug, gpu, main\\)"):
        canonical_partition("dbg", parts)
    with pytest.raises(ValueError, match="Slurm has no default partition"):
        canonical_partition(None, parse_partitions(SCONTROL.splitlines()[1]))


def test_a_million_units_on_one_cpu_are_refused(tmp_path):
    ex, _, _ = make_exchange(tmp_path / "x.db")
    ex.join("p1")
    with pytest.raises(ValueError, match="node field 'cpu': 1000000 CPU units, but the node's 1 CPU"):
        ex.add_node("p1", "n0", 1_000_000, 100, cpus=[0], by_party=True)
    assert ex.store.nodes() == {}
    with pytest.raises(ValueError, match="back at most 1 "):
        ex.add_node("p1", "n0", CPU_UNIT + 1, 100, cpus=[0], by_party=True)
    ex.add_node("p1", "n0", CPU_UNIT, 100, cpus=[0], by_party=True)  # what the CPU backs is accepted
    assert [n["cpu"] for n in ex.store.nodes().values()] == [CPU_UNIT]


@pytest.mark.parametrize("first, second", [(None, "main"), ("main", None)])
def test_the_default_partition_and_its_name_are_one_partition(tmp_path, slurm, first, second):
    ex, _, _ = make_exchange(tmp_path / "x.db")
    ex.join("s1", kind="slurm", partition=first, by_party=True)
    with pytest.raises(ValueError, match="is sold by another provider .*Slurm calls it 'main'"):
        ex.join("s2", kind="slurm", partition=second, by_party=True)
    assert [p["name"] for p in ex.store.providers()] == ["s1"]
    ex.join("s3", kind="slurm", partition="gpu", by_party=True)  # another partition is free


def test_a_partition_slurm_does_not_know_is_refused(tmp_path, slurm):
    ex, _, _ = make_exchange(tmp_path / "x.db")
    with pytest.raises(ValueError, match="Slurm has no partition 'nosuch'"):
        ex.join("s1", kind="slurm", partition="nosuch", by_party=True)
    ex.join("op", kind="slurm", partition="nosuch")  # the operator's command is trusted


def test_a_slurm_provider_sells_at_most_its_partitions_cpus(tmp_path, slurm):
    ex, _, _ = make_exchange(tmp_path / "x.db")
    ex.join("s1", kind="slurm", partition="gpu", by_party=True)
    ex.add_node("s1", "a", 3 * CPU_UNIT, 100, by_party=True)
    with pytest.raises(ValueError, match="would sell 5 CPU units in Slurm partition 'gpu', which has 4 CPU"):
        ex.add_node("s1", "b", 2 * CPU_UNIT, 100, by_party=True)
    ex.add_node("s1", "b", CPU_UNIT, 100, by_party=True)
    ex.leave("s1", "a")  # a node that left no longer counts
    ex.add_node("s1", "c", 3 * CPU_UNIT, 100, by_party=True)


def test_slurm_that_does_not_answer_is_a_clear_refusal(tmp_path, monkeypatch):
    def down():
        raise ValueError("provider field 'partition': Slurm does not answer, so the partition cannot be checked")

    monkeypatch.setattr(capacity, "slurm_partitions", down)
    ex, _, _ = make_exchange(tmp_path / "x.db")
    with pytest.raises(ValueError, match="Slurm does not answer"):
        ex.join("s1", kind="slurm", by_party=True)


def test_a_node_going_down_lowers_what_the_next_clearing_sells_and_the_replay_agrees(tmp_path, monkeypatch):
    from marketsched.exchange.replay import contract_terms, replay_session

    up = {"gpu": 4}
    fake_slurm_partitions(monkeypatch, up=up)
    ex, clock, _ = make_exchange(tmp_path / "x.db", mechanism="k-pricing")
    ex.join("s1", kind="slurm", partition="gpu", by_party=True)
    ex.add_node("s1", "a", 4 * CPU_UNIT, 100, by_party=True)
    s = ex.slot()
    ex.submit_offer("s1", "a", 1.0, s + 1, s + 50)

    def demand(n):  # n requests of one CPU for the same slot, more than the partition has
        first = ex.slot() + 2
        return [ex.submit_request(f"u{i}", 5.0, CPU_UNIT, 1, first, first, "true") for i in range(n)]

    demand(6)
    ex.clear()
    assert len(ex.store.contracts()) == 4  # all 4 CPUs up: 4 sold in that slot
    up["gpu"] = 1  # three of the partition's CPUs go down
    clock.advance(ex.settings["period_seconds"])
    demand(6)
    ex.clear()
    period = ex.store.periods()[-1]
    assert len([c for c in ex.store.contracts() if c["period"] == period["id"]]) == 1  # only what is up
    up["gpu"] = 0  # Slurm does not answer (or every CPU is down): nothing is sold
    clock.advance(ex.settings["period_seconds"])
    demand(2)
    ex.clear()
    assert not [c for c in ex.store.contracts() if c["period"] == ex.store.periods()[-1]["id"]]
    up["gpu"] = 4  # the replay uses the capacity recorded with each period, not today's
    assert replay_session(ex.store) == contract_terms(ex.store)


# ---------------------------------------------------------------------------- the operator's nodes
def _cli(*args):
    from click.testing import CliRunner

    from marketsched.cli import main

    return CliRunner().invoke(main, ["exchange", *map(str, args)])


def test_the_operators_nodes_are_bound_by_the_cpus_that_back_them(tmp_path, monkeypatch, slurm):
    """``exchange node`` (the operator's command line) may not claim more CPU units than the CPUs
    it names, or, naming none, than this machine has; a Slurm provider's nodes no more than its
    partition has. The operator may still share CPUs or a partition between providers."""
    monkeypatch.setattr(capacity, "cpus_here", lambda: {0, 1})
    data = tmp_path / "ex"
    assert _cli("init", data).exit_code == 0
    for p in ("p1", "p2"):
        assert _cli("join", data, p).exit_code == 0
    refused = {
        ("--cpu", 1_000_000, "--cpus", "0"): "node p1/n0: node field 'cpu': 1000000 CPU units, but the node's 1 CPU(s) "
                                               "[0] back at most 1",
        ("--cpu", 3): "node p1/n0: node field 'cpu': 3 CPU units, but the node's 2 CPU(s) [0, 1] back at most 2",
        ("--cpu", 1, "--cpus", "5"): "node p1/n0 names CPU(s) [5], which this machine does not have online",
    }
    for args, message in refused.items():
        res = _cli("node", data, "p1", "n0", "--mem", 10, *args)
        assert res.exit_code != 0 and message in res.output, (args, res.output)
    store = ExchangeStore(data)
    assert store.nodes() == {}
    assert _cli("node", data, "p1", "n0", "--cpu", 2, "--mem", 10).exit_code == 0  # this machine's CPUs, recorded
    assert _cli("node", data, "p2", "m0", "--cpu", 1, "--mem", 10, "--cpus", "0").exit_code == 0  # shared on purpose
    assert sorted((n["name"], n["cpu"], n["cpus"]) for n in store.nodes().values()) == [("m0", 1, [0]),
                                                                                          ("n0", 2, [0, 1])]
    assert _cli("join", data, "s1", "--kind", "slurm", "--partition", "gpu").exit_code == 0
    assert _cli("node", data, "s1", "a", "--cpu", 3, "--mem", 10).exit_code == 0
    res = _cli("node", data, "s1", "b", "--cpu", 2, "--mem", 10)
    assert res.exit_code != 0 and "node s1/b: node field 'cpu': provider 's1' would sell 5 CPU units in Slurm " \
                                  "partition 'gpu', which has 4 CPU(s)" in res.output
    res = _cli("node", data, "s1", "b", "--cpu", 1, "--mem", 10, "--cpus", "0")
    assert res.exit_code != 0 and "slurm provider's: Slurm places its jobs" in res.output
    store.close()


# ---------------------------------------------------------------------------- local CPUs at every clearing
def test_a_local_node_whose_cpus_fell_sells_only_what_exists_and_the_period_says_why(tmp_path, monkeypatch):
    """A CPU of a local node goes offline (or leaves the exchange's cpuset: an injected counter):
    the next clearing sells only the units the node's remaining CPUs back, and the period's book
    records why; the replay clears with the recorded capacity."""
    from marketsched.exchange.core import recorded_book
    from marketsched.exchange.replay import contract_terms, replay_session

    here = {0, 1}
    monkeypatch.setattr(capacity, "cpus_here", lambda: set(here))
    ex, clock, _ = make_exchange(tmp_path / "x.db", mechanism="k-pricing")
    ex.join("p1")
    node = ex.add_node("p1", "n0", 2 * CPU_UNIT, 100, cpus=[0, 1], checked=True)
    s = ex.slot()
    ex.submit_offer("p1", "n0", 1.0, s + 1, s + 50)

    def clear_demand(n):  # n requests of one CPU for one slot, more than the node has
        first = ex.slot() + 2
        for i in range(n):
            ex.submit_request(f"u{i}", 5.0, CPU_UNIT, 1, first, first, "true")
        period = ex.clear()
        return [c for c in ex.store.contracts() if c["period"] == period], recorded_book(ex.store, period)

    sold, book = clear_demand(3)
    assert len(sold) == 2 and book.why == {}
    here.discard(1)  # CPU 1 is unplugged
    clock.advance(ex.settings["period_seconds"])
    sold, book = clear_demand(3)
    assert len(sold) == 1 and book.caps[node] == CPU_UNIT
    assert book.why[node] == ("node p1/n0: CPU(s) [1] not here (offline or out of the exchange's CPU set): sells 1 "
                              "of its 2 CPU units")
    here.clear()
    clock.advance(ex.settings["period_seconds"])
    sold, book = clear_demand(1)
    assert sold == [] and book.caps[node] == 0
    here.update({0, 1})  # the replay uses the capacity recorded with each period, not today's
    assert replay_session(ex.store) == contract_terms(ex.store)


# ---------------------------------------------------------------------------- each Slurm node sold once
CLUSTER_PARTITIONS = (  # a 4-node cluster: the default partition has every node, pa and pb half each
    "PartitionName=main Default=YES Nodes=node[1-4] State=UP TotalCPUs=8 TotalNodes=4\n"
    "PartitionName=pa Default=NO Nodes=node[1-2] State=UP TotalCPUs=4 TotalNodes=2\n"
    "PartitionName=pb Default=NO Nodes=node[3-4] State=UP TotalCPUs=4 TotalNodes=2\n"
    "PartitionName=mid Default=NO Nodes=node2,node3 State=UP TotalCPUs=4 TotalNodes=2\n")


def _compress(names: list[str]) -> str:
    """A Slurm host list of ``names`` (prefix + zero-padded numbers), written as runs."""
    groups: dict[tuple[str, int], list[int]] = {}
    for n in names:
        head = n.rstrip("0123456789")
        digits = n[len(head):]
        groups.setdefault((head, len(digits)), []).append(int(digits))
    out = []
    for (head, width), nums in groups.items():
        nums = sorted(set(nums))
        runs, lo = [], nums[0]
        for a, b in zip(nums, nums[1:] + [None]):
            if b != a + 1:
                runs.append(f"{lo:0{width}d}" + ("" if a == lo else f"-{a:0{width}d}"))
                lo = b
        out.append(f"{head}[{','.join(runs)}]")
    return ",".join(out)


def test_slurm_host_lists_expand_to_their_nodes():
    import random

    assert capacity.expand_hostlist("node[1-2,4],gpu[08-10],login") == [
        "node1", "node2", "node4", "gpu08", "gpu09", "gpu10", "login"]
    assert capacity.expand_hostlist("r[1-2]n[1-2]") == ["r1n1", "r1n2", "r2n1", "r2n2"]
    assert capacity.expand_hostlist("(null)") == [] and capacity.expand_hostlist("") == []
    for bad in ("node[1-", "node[3-1]", "node[a]", "node]1["):
        with pytest.raises(ValueError, match="Slurm host list"):
            capacity.expand_hostlist(bad)
    rng = random.Random(7)
    for _ in range(200):  # against the plain list of names, through a writer of host lists
        names = {f"{rng.choice(['n', 'gpu', 'x-'])}{rng.randrange(0, 40):0{w}d}"
                 for w in (rng.choice([1, 2, 3]),) for _ in range(rng.randrange(1, 12))}
        assert sorted(capacity.expand_hostlist(_compress(sorted(names)))) == sorted(names)
    parts = parse_partitions(CLUSTER_PARTITIONS)
    assert parts["mid"].nodes == {"node2", "node3"} and parts["main"].nodes == {f"node{i}" for i in range(1, 5)}


@pytest.mark.parametrize("by", ["party", "operator"])
def test_a_slurm_node_is_sold_by_one_provider_whatever_partition_names_it(tmp_path, monkeypatch, by):
    """Two providers on disjoint partitions of one cluster (pa, pb) are accepted; a third whose
    partition shares nodes with them (the default one, which has every node; one straddling
    both) is refused, naming the provider that sells them and the shared nodes, whether it joins
    through the API or by the operator's command line. Before, each was sold those nodes in full."""
    fake_slurm_partitions(monkeypatch, CLUSTER_PARTITIONS)
    data = tmp_path / "ex"
    assert _cli("init", data).exit_code == 0

    def join(name, partition):
        if by == "operator":
            res = _cli("join", data, name, "--kind", "slurm", *(["--partition", partition] if partition else []))
            if res.exit_code != 0:
                raise ValueError(res.output)
            return
        ex = Exchange(ExchangeStore(data), lambda: 0.0)
        try:
            ex.join(name, kind="slurm", partition=partition, by_party=True)
        finally:
            ex.store.close()

    join("a", "pa")
    join("b", "pb")
    for name, partition, message in [
            ("c", None, "Slurm's default partition shares node(s) node1, node2 with Slurm partition 'pa', which "
                        "another provider, 'a', sells: each node is sold by one provider"),
            ("c", "main", "Slurm partition 'main' shares node(s) node1, node2 with Slurm partition 'pa', which "
                          "another provider, 'a', sells"),
            ("c", "mid", "Slurm partition 'mid' shares node(s) node2 with Slurm partition 'pa', which another "
                         "provider, 'a', sells"),
            ("c", "pb", "Slurm partition 'pb' is sold by another provider 'b'")]:
        with pytest.raises(ValueError, match=re.escape(message)):
            join(name, partition)
    store = ExchangeStore(data)
    assert [(p["name"], p["partition"]) for p in store.providers()] == [("a", "pa"), ("b", "pb")]
    store.close()


def test_the_default_partition_first_keeps_every_node(tmp_path, monkeypatch):
    """In the other order: a provider selling the default partition (every node) leaves no node
    for a provider of pa or pb."""
    fake_slurm_partitions(monkeypatch, CLUSTER_PARTITIONS)
    ex, _, _ = make_exchange(tmp_path / "x.db")
    ex.join("all", kind="slurm", checked=True)
    with pytest.raises(ValueError, match=re.escape("Slurm partition 'pb' shares node(s) node3, node4 with Slurm "
                                                   "partition 'main', which another provider, 'all', sells")):
        ex.join("b", kind="slurm", partition="pb", checked=True)
    ex.leave("all")  # gone, no contract unsettled: its nodes are free again
    ex.join("b", kind="slurm", partition="pb", checked=True)
