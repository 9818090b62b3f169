"""What backs a node: the capacity a provider may sell is the capacity that exists.

* **CPU units.** One CPU unit of a node, an offer or a request is one CPU (``CPU_UNIT``): a
  local node's capacity is at most the number of this machine's CPUs it names (each CPU backs
  one node, :func:`.orders.check_party_cpus`), and a Slurm provider's nodes together have at
  most the CPUs of its partition.
* **Slurm partitions** are known by their canonical name: "Slurm's default partition" (no
  name) is the partition Slurm marks ``Default=YES``, so a provider naming it and one naming
  nothing sell the same partition, and the second is refused, in either order
  (:func:`canonical_partition`). A partition Slurm does not know is refused. **Each Slurm node
  is sold by one provider**: a partition sharing a node with another provider's is refused,
  naming that provider and the nodes (:func:`check_partition_free`).

The CPU-unit rules bind the operator's command line too (``marketsched exchange node``,
:func:`check_operator_node`): a local node has at most one unit per CPU it names (none named:
this machine's CPUs now, recorded as the node's), and a Slurm provider's nodes at most its
partition's CPUs; the partition rule binds ``marketsched exchange join``. Only the rule that a
local CPU is sold *once* is the parties' alone: the operator may share CPUs between local
providers on purpose. The library's :class:`~marketsched.exchange.core.Exchange` called
without ``checked`` (simulations, tests of the mechanisms) is not bound.

* **At every clearing** (:func:`capacity_now`) a Slurm provider's offered nodes sell at most
  its partition's CPUs that are up, and a local node whose CPUs are not all here any more
  (offline, or out of the exchange's cpuset: :func:`cpus_here`) sells at most the units its
  remaining CPUs back. Each lowered capacity is recorded with the period, with the reason.
  What happens to contracts already made on lost capacity: :meth:`.core.Exchange.move_lost`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection
from dataclasses import dataclass

CPU_UNIT = 1  # CPU units per CPU


@dataclass(frozen=True)
class Partition:
    """A Slurm partition as ``scontrol show partition`` describes it."""

    name: str
    default: bool
    cpus: int  # TotalCPUs
    up: bool  # State=UP
    nodes: frozenset[str] = frozenset()  # Nodes, expanded (:func:`expand_hostlist`)


def expand_hostlist(text: str) -> list[str]:
    """The node names of a Slurm host list, e.g. ``node[1-2,4],gpu[08-10],login`` ->
    node1, node2, node4, gpu08, gpu09, gpu10, login (zero padding kept; several bracket groups
    in one name multiply out). ``(null)`` or empty: none. ValueError naming a malformed one."""
    text = text.strip()
    if text in ("", "(null)"):
        return []
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):  # split at the commas outside brackets
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if depth not in (0, 1):
            raise ValueError(f"Slurm host list {text!r}: unbalanced brackets")
        if ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    out: list[str] = []
    for item in items:
        out.extend(_expand_one(item, text))
    return out


def _expand_one(item: str, whole: str) -> list[str]:
    head, sep, rest = item.partition("[")
    if not sep:
        if not item or "]" in item:
            raise ValueError(f"Slurm host list {whole!r}: bad name {item!r}")
        return [item]
    body, sep, tail = rest.partition("]")
    if not sep:
        raise ValueError(f"Slurm host list {whole!r}: unbalanced brackets")
    names = []
    for part in body.split(","):
        lo, _, hi = part.partition("-")
        hi = hi or lo
        if not (lo.isdigit() and hi.isdigit()) or int(hi) < int(lo):
            raise ValueError(f"Slurm host list {whole!r}: bad range {part!r}")
        names += [f"{head}{str(k).zfill(len(lo))}" for k in range(int(lo), int(hi) + 1)]
    return [n + t for n in names for t in _expand_one(tail, whole)] if tail else names


def parse_partitions(text: str) -> dict[str, Partition]:
    """``scontrol -o show partition`` output (one line per partition) by name."""
    out: dict[str, Partition] = {}
    for line in text.splitlines():
        fields = dict(item.split("=", 1) for item in line.split() if "=" in item)
        name = fields.get("PartitionName")
        if not name:
            continue
        try:
            cpus = int(fields.get("TotalCPUs", "0"))
        except ValueError:
            cpus = 0
        try:
            nodes = frozenset(expand_hostlist(fields.get("Nodes", "")))
        except ValueError:
            nodes = frozenset()  # unreadable: the partition is compared by name only
        out[name] = Partition(name, fields.get("Default") == "YES", cpus, fields.get("State", "UP") == "UP", nodes)
    return out


def slurm_partitions() -> dict[str, Partition]:
    """Slurm's partitions now (``scontrol -o show partition``); ValueError when Slurm does not answer."""
    from marketsched.platform.slurm import SlurmError, run

    try:
        return parse_partitions(run(["scontrol", "-o", "show", "partition"], timeout=10))
    except (SlurmError, OSError) as exc:
        raise ValueError(f"provider field 'partition': Slurm does not answer, so the partition cannot be "
                         f"checked: {exc}") from None


def canonical_partition(partition: str | None, partitions: dict[str, Partition]) -> Partition:
    """The partition ``partition`` names (None: Slurm's default one); ValueError naming the problem."""
    if partition is None:
        default = [p for p in partitions.values() if p.default]
        if not default:
            raise ValueError("provider field 'partition': Slurm has no default partition, name one")
        return default[0]
    if partition not in partitions:
        known = ", ".join(sorted(partitions)) or "none"
        raise ValueError(f"provider field 'partition': Slurm has no partition {partition!r} (it has: {known})")
    return partitions[partition]


def check_partition_free(provider: str, partition: str | None, providers, parts: dict[str, Partition],
                         busy: Collection[str] = ()) -> None:
    """A Slurm partition is sold once, and so is each of its nodes: a provider may join with
    partition ``partition`` (None: Slurm's default) only if no other Slurm provider (of
    ``providers``, rows of the providers table) sells it, by any of its names, nor a partition
    that shares a node with it (``parts``: :func:`slurm_partitions`). A provider that left frees
    its partition once none of its contracts is unsettled (``busy``: names of providers with
    pending, starting or running contracts, whose jobs still run there).

    The rule (the exchange's; Stößer 2009 has each node sold by its own provider): two providers
    whose partitions overlap would each be sold the shared nodes in full, so the second is
    refused, naming the first and the nodes they share. A partition Slurm no longer knows is
    compared by name only. ValueError naming the problem."""
    mine = canonical_partition(partition, parts)
    shown = "Slurm's default partition" if partition is None else f"Slurm partition {partition!r}"
    for p in providers:
        if p["name"] == provider or p["kind"] != "slurm" or (p["left_t"] is not None and p["name"] not in busy):
            continue
        try:
            theirs = canonical_partition(p["partition"], parts)
        except ValueError:
            theirs = None
        if p["partition"] == partition or (theirs is not None and theirs.name == mine.name):
            alias = "" if p["partition"] == partition else (
                f" (as {'the default partition' if p['partition'] is None else repr(p['partition'])}; "
                f"Slurm calls it {mine.name!r})")
            raise ValueError(f"provider field 'partition': {shown} is sold by another provider "
                             f"{p['name']!r}{alias}")
        shared = sorted(mine.nodes & theirs.nodes) if theirs is not None else []
        if theirs is not None and shared:
            raise ValueError(f"provider field 'partition': {shown} shares node(s) {', '.join(shared)} with Slurm "
                             f"partition {theirs.name!r}, which another provider, {p['name']!r}, sells: each node "
                             "is sold by one provider")


def cpus_here() -> set[int]:
    """The CPUs local jobs can run on now: this machine's online CPUs
    (``/sys/devices/system/cpu/online``) that are in the exchange's own CPU set (its affinity,
    which its cpuset bounds). Tests inject another counter in place of this one."""
    from .providers import online_cpus

    try:
        mine = set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        mine = set(range(os.cpu_count() or 1))
    return online_cpus() & mine


def check_operator_node(provider: dict, node: dict, nodes, here: set[int],
                        partitions: Callable[[], dict[str, Partition]] | None = None) -> dict:
    """The operator's node ``node`` (:func:`.orders.check_node`'s dict) of ``provider`` (a row
    of the providers table), bound by the CPU-unit rules (module docstring); ``nodes``: rows of
    the nodes table; ``here``: :func:`cpus_here`. Returns the node, a local one with its CPUs
    (none named: ``here``, recorded); ValueError naming the node and the numbers."""
    where = f"node {node['provider']}/{node['name']}"
    if provider["kind"] == "local":
        cpus = node.get("cpus") or sorted(here)
        missing = sorted(set(cpus) - here)
        if missing:
            raise ValueError(f"node field 'cpus': {where} names CPU(s) {missing}, which this machine does not have "
                             f"online for the exchange (it has {sorted(here)})")
        try:
            check_local_units(node["cpu"], cpus)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        return {**node, "cpus": cpus}
    if provider["kind"] == "agent":  # its agent's machine, which the exchange cannot see (.agent_runs)
        if node.get("cpus"):
            check_local_units(node["cpu"], node["cpus"])
        return node
    if node.get("cpus") is not None:
        raise ValueError(f"node field 'cpus': {where} is a slurm provider's: Slurm places its jobs")
    part = canonical_partition(provider["partition"], (partitions or slurm_partitions)())
    sold = sum(n["cpu"] for n in nodes if n["provider"] == provider["name"] and n["left_t"] is None)
    try:
        check_slurm_units(provider["name"], node["cpu"], part, sold)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    return node


def check_local_units(cpu: int, cpus: list[int]) -> None:
    """A local node sells at most the CPUs that back it."""
    most = len(cpus) * CPU_UNIT
    if cpu > most:
        raise ValueError(f"node field 'cpu': {cpu} CPU units, but the node's {len(cpus)} CPU(s) {cpus} back at most "
                         f"{most} ({CPU_UNIT} unit(s) per CPU)")


def check_slurm_units(provider: str, cpu: int, partition: Partition, sold: int) -> None:
    """A Slurm provider's nodes together sell at most its partition's CPUs (``sold``: the CPU
    units of its other nodes that have not left)."""
    most = partition.cpus * CPU_UNIT
    if sold + cpu > most:
        raise ValueError(f"node field 'cpu': provider {provider!r} would sell {sold + cpu} CPU units in Slurm partition "
                         f"{partition.name!r}, which has {partition.cpus} CPU(s) ({most} units)")


def partition_cpus_up(partition: str | None) -> int:
    """CPUs of a Slurm partition (None: the default one) on nodes that are up now: allocated plus
    idle (``sinfo -o %C``; "other" CPUs are down, drained or failing). 0 when Slurm does not answer:
    what cannot be seen is not sold."""
    from marketsched.platform.slurm import SlurmError, run

    args = ["sinfo", "-h", "-o", "%C"] + ([] if partition is None else ["-p", partition])
    try:
        lines = run(args, timeout=10).split()
    except (SlurmError, OSError):
        return 0
    if partition is None:  # sinfo lists every partition: the default one is marked in %P
        try:
            named = run(["sinfo", "-h", "-o", "%P %C"], timeout=10).splitlines()
        except (SlurmError, OSError):
            return 0
        lines = [line.split()[1] for line in named if line.split() and line.split()[0].endswith("*")]
    try:
        allocated, idle, _other, _total = (int(x) for x in lines[0].split("/"))
    except (IndexError, ValueError):
        return 0
    return allocated + idle


def local_units_now(node: dict, here: set[int]) -> tuple[int, str]:
    """The CPU units a local node can sell now and, when below its registered ones, why: all its
    CPUs here, its units; else at most one unit per CPU of it still here (``here``:
    :func:`cpus_here`). A node naming no CPUs (the library's, unchecked) is this machine's."""
    named = set(node.get("cpus") or ())
    lost = sorted(named - here)
    if not lost:
        return node["cpu"], ""
    units = min(node["cpu"], len(named & here) * CPU_UNIT)
    if units >= node["cpu"]:
        return units, ""
    return units, (f"node {node['provider']}/{node['name']}: CPU(s) {lost} not here (offline or out of the "
                   f"exchange's CPU set): sells {units} of its {node['cpu']} CPU units")


def capacity_now(providers: list[dict], nodes: dict[int, dict], offered: set[int],
                 cpus_up: Callable[[str | None], int] | None = None,
                 here: Callable[[], set[int]] | None = None) -> tuple[dict[int, int], dict[int, str]]:
    """The CPU units each offered node can sell now (node id -> units) and, for each node sold
    below its registered units, why (node id -> text), rechecked at every clearing:

    1. a Slurm provider's nodes, in id order, share its partition's CPUs that are up
       (``cpus_up``, default :func:`partition_cpus_up`), so a node going down lowers what is
       sold and nothing is sold beyond what is up;
    2. a local node sells at most what its CPUs here now back (:func:`local_units_now`;
       ``here``, default :func:`cpus_here`, is read once per clearing, only when a local node
       is offered).

    Nodes selling their registered units are absent from the reasons."""
    cpus_up = cpus_up or partition_cpus_up
    kinds = {p["name"]: p for p in providers}
    left: dict[str, int] = {}
    out: dict[int, int] = {}
    why: dict[int, str] = {}
    now: set[int] | None = None
    for node_id in sorted(offered):
        node = nodes[node_id]
        p = kinds.get(node["provider"])
        if p is None:
            continue
        if p["kind"] == "agent":  # sells what it registered: a run its agent cannot make fails at its cost
            out[node_id] = node["cpu"]
            continue
        if p["kind"] == "local":
            if now is None:
                now = (here or cpus_here)()
            out[node_id], reason = local_units_now(node, now)
            if reason:
                why[node_id] = reason
            continue
        if p["name"] not in left:
            left[p["name"]] = cpus_up(p["partition"]) * CPU_UNIT
        out[node_id] = min(node["cpu"], left[p["name"]])
        left[p["name"]] -= out[node_id]
        if out[node_id] < node["cpu"]:
            shown = "Slurm's default partition" if p["partition"] is None else f"Slurm partition {p['partition']!r}"
            why[node_id] = (f"node {node['provider']}/{node['name']}: {shown} has too few CPUs up now: sells "
                            f"{out[node_id]} of its {node['cpu']} CPU units")
    return out, why
