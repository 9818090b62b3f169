"""What backs a node: the capacity a provider may sell is the capacity that exists.

* **CPU units.** One CPU unit of a node, an offer or a request is one CPU (``CPU_UNIT``): a
  local node's capacity is at most the number of this machine's CPUs it names (each CPU backs
  one node, :func:`.orders.check_party_cpus`), and a Slurm provider's nodes together have at
  most the CPUs of its partition.
* **Slurm partitions** are known by their canonical name: "Slurm's default partition" (no
  name) is the partition Slurm marks ``Default=YES``, so a provider naming it and one naming
  nothing sell the same partition, and the second is refused, in either order
  (:func:`canonical_partition`). A partition Slurm does not know is refused.

These rules bind the parties joining through the HTTP API; the operator's own commands
(``marketsched exchange join``/``node``) are trusted, as for sharing a partition on purpose.

* **At every clearing** a Slurm provider's offered nodes sell at most its partition's CPUs
  that are up (:func:`capacity_now`): a node that goes down lowers what the next clearing
  sells. Contracts already made stand; a job the provider then cannot run is the provider's
  failure (it pays the penalty).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

CPU_UNIT = 1  # CPU units per CPU


@dataclass(frozen=True)
class Partition:
    """A Slurm partition as ``scontrol show partition`` describes it."""

    name: str
    default: bool
    cpus: int  # TotalCPUs
    up: bool  # State=UP


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
        out[name] = Partition(name, fields.get("Default") == "YES", cpus, fields.get("State", "UP") == "UP")
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


def capacity_now(providers: list[dict], nodes: dict[int, dict], offered: set[int],
                 cpus_up: Callable[[str | None], int] | None = None) -> dict[int, int]:
    """The CPU units each offered node of a Slurm provider can sell now (node id -> units),
    rechecked at every clearing: a provider's nodes, in id order, share its partition's CPUs that
    are up (``cpus_up``, default :func:`partition_cpus_up`), so a node going down lowers what is
    sold and nothing is sold beyond what is up. Local nodes are absent (their CPUs are checked
    when they register)."""
    cpus_up = cpus_up or partition_cpus_up
    slurm = {p["name"]: p for p in providers if p["kind"] == "slurm"}
    left: dict[str, int] = {}
    out: dict[int, int] = {}
    for node_id in sorted(offered):
        node = nodes[node_id]
        p = slurm.get(node["provider"])
        if p is None:
            continue
        if p["name"] not in left:
            left[p["name"]] = cpus_up(p["partition"]) * CPU_UNIT
        out[node_id] = min(node["cpu"], left[p["name"]])
        left[p["name"]] -= out[node_id]
    return out
