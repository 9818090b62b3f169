"""The exchange's bid language and its validation (Stößer 2009, section 3.4.1).

* A **node** a provider joins with: ``(cpu, mem)`` capacity, and for a local provider the CPUs
  of this machine that back it.
* A **request** of a user: ``theta_j = (v_j, c_j, m_j, r_j, e_j)``, the most it pays per CPU
  unit per timeslot, the CPU and memory it needs in every slot, its first and last slot (it
  runs in every slot of ``[r_j, e_j]`` or not at all), plus the command to run.
* An **offer** of a provider: ``theta_n = (v_n, C_n, M_n, R_n, E_n)``: the reserve price per
  CPU unit per timeslot of one of its nodes over the slots ``[R_n, E_n]``; capacity is the
  node's.

Every check raises :class:`ValueError` naming the order kind and the field. Every number is
bounded (``MAX_*`` below), so that no order can make a clearing allocate without limit: the
mechanisms keep arrays of (jobs or nodes) x slots up to the book's last slot, so an order ends
at most ``MAX_AHEAD_SLOTS`` after the current slot (and its window is at most that long).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Collection

MECHANISMS = ("critical-value", "k-pricing", "pay-as-bid", "randomized-distributed", "exact", "egg")
PROVIDER_KINDS = ("local", "slurm", "agent")  # agent: its own agent runs its contracts (.agent_runs)
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
MAX_PRICE = 1e9  # per CPU unit per slot
MAX_CPU = 1_000_000  # CPU units of a node or a request
MAX_ORDER_COST = 1e12  # value x cpu x slots of one request: 1e18 micro-units, within SQLite's 64-bit integers
MAX_MEM = 10**12  # memory units of a node or a request
MAX_SLOT = 2**40  # any slot number
MAX_AHEAD_SLOTS = 1000  # how far after the current slot an order may end (a clearing's arrays grow with it)
MAX_COMMAND_BYTES = 65536  # a request's command, UTF-8
MAX_NODES_PER_PROVIDER = 256  # nodes of one provider that have not left
MAX_OUTPUT_BYTES = 64 * 1024  # a contract job's output an agent reports and the exchange keeps (.agent_runs)


def check_name(kind: str, field: str, value) -> str:
    if not isinstance(value, str) or not NAME_RE.match(value):
        raise ValueError(f"{kind} field {field!r} must be 1-64 letters, digits, '_', '.' or '-' "
                         f"(starting with a letter or digit), got {_shown(value)}")
    return value


def _shown(value) -> str:
    r = repr(value)
    return r if len(r) <= 60 else f"{r[:60]}... ({len(r)} characters)"


def check_whole(kind: str, field: str, value, minimum: int, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (isinstance(value, float) and not (
            math.isfinite(value) and value == int(value))) or not minimum <= value <= maximum:
        raise ValueError(f"{kind} field {field!r} must be a whole number from {minimum} to {maximum}, "
                         f"got {_shown(value)}")
    return int(value)


def check_price(kind: str, field: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (isinstance(value, int) and abs(value) > 2**63) \
            or not math.isfinite(value) or not 0 <= value <= MAX_PRICE:
        raise ValueError(f"{kind} field {field!r} must be a finite number from 0 to {MAX_PRICE:g} (per CPU unit "
                         f"per slot), got {_shown(value)}")
    return float(value)


def check_window(kind: str, first_slot, last_slot, after_slot: int | None) -> tuple[int, int]:
    first = check_whole(kind, "first_slot", first_slot, 0, MAX_SLOT)
    last = check_whole(kind, "last_slot", last_slot, 0, MAX_SLOT)
    if last < first:
        raise ValueError(f"{kind} field 'last_slot' ({last}) is before first_slot ({first})")
    if last - first >= MAX_AHEAD_SLOTS:
        raise ValueError(f"{kind} fields 'first_slot'/'last_slot': a window of {last - first + 1} slots is longer "
                         f"than the {MAX_AHEAD_SLOTS} the exchange accepts")
    if after_slot is not None and first <= after_slot:
        raise ValueError(f"{kind} field 'first_slot' ({first}) must be after the current slot ({after_slot}): "
                         "the exchange clears future slots only")
    if after_slot is not None and last > after_slot + MAX_AHEAD_SLOTS:
        raise ValueError(f"{kind} field 'last_slot' ({last}) is more than {MAX_AHEAD_SLOTS} slots after the "
                         f"current slot ({after_slot}), as far ahead as the exchange trades")
    return first, last


def check_node(provider, name, cpu, mem, cpus=None) -> dict:
    """A node's attributes; ``cpus``: CPUs of this machine backing it (local providers)."""
    out = {"provider": check_name("node", "provider", provider), "name": check_name("node", "name", name),
           "cpu": check_whole("node", "cpu", cpu, 1, MAX_CPU), "mem": check_whole("node", "mem", mem, 0, MAX_MEM)}
    if cpus is not None:
        if not cpus or not all(isinstance(c, int) and not isinstance(c, bool) and 0 <= c < 65536 for c in cpus):
            raise ValueError(f"node field 'cpus' must be a non-empty list of CPU numbers >= 0, got {cpus!r}")
        out["cpus"] = sorted(set(cpus))
    return out


def check_party_cpus(provider: dict, cpus: list[int] | None, nodes, busy: Collection[int] = ()) -> None:
    """The CPUs a provider (a row of the providers table) names for a node it registers itself:
    a local provider's are CPUs of this machine that back no other node (of ``nodes``, rows of
    the nodes table, its own included: a CPU is sold once); a node that left frees its CPUs once
    none of its contracts is unsettled (``busy``: ids of nodes with pending, starting or running
    contracts, whose jobs still use those CPUs). A Slurm provider names none."""
    if provider["kind"] == "slurm":
        if cpus is not None:
            raise ValueError("node field 'cpus' is for local providers: Slurm places a slurm provider's jobs")
        return
    if provider["kind"] == "agent":  # CPUs of its agent's machine (.agent_runs): not this machine's
        for n in nodes:
            if n["provider"] == provider["name"] and n["left_t"] is None and set(n["cpus"] or ()) & set(cpus or ()):
                raise ValueError(f"node field 'cpus': CPU {min(set(n['cpus']) & set(cpus or ()))} backs a node of "
                                 "this provider")
        return
    if cpus is None:
        raise ValueError("node field 'cpus' is required: the CPUs of this machine that back a local provider's node")
    have = os.cpu_count() or 1
    bad = [c for c in cpus if c >= have]
    if bad:
        raise ValueError(f"node field 'cpus': this machine has CPUs 0-{have - 1}, not {bad[0]}")
    for n in nodes:
        if (n["left_t"] is None or n["id"] in busy) and set(n["cpus"] or ()) & set(cpus):
            whose = "of this provider" if n["provider"] == provider["name"] else "of another provider"
            raise ValueError(f"node field 'cpus': CPU {min(set(n['cpus']) & set(cpus))} backs a node {whose}")


def check_request(user, value, cpu, mem, first_slot, last_slot, command, after_slot: int | None = None) -> dict:
    """A user's request ``(v_j, c_j, m_j, r_j, e_j)`` and its command."""
    first, last = check_window("request", first_slot, last_slot, after_slot)
    if not isinstance(command, str) or not command.strip():
        raise ValueError(f"request field 'command' must be a non-empty shell command, got {_shown(command)}")
    if "\x00" in command:
        raise ValueError("request field 'command' contains a NUL character")
    try:
        size = len(command.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise ValueError(f"request field 'command' contains a lone surrogate at character {exc.start}, "
                         "which is not text") from None
    if size > MAX_COMMAND_BYTES:
        raise ValueError(f"request field 'command' is {size} bytes long, more than the {MAX_COMMAND_BYTES} the "
                         "exchange accepts (put a long script in a file and run the file)")
    price, units = check_price("request", "value", value), check_whole("request", "cpu", cpu, 1, MAX_CPU)
    order = {"owner": check_name("request", "user", user), "value": price, "cpu": units,
             "mem": check_whole("request", "mem", mem, 0, MAX_MEM), "first_slot": first, "last_slot": last,
             "command": command}
    most = price * units * (last - first + 1)
    if most > MAX_ORDER_COST:
        raise ValueError(f"request field 'value': value x cpu x slots is {most:.6g}, more than the {MAX_ORDER_COST:g} "
                         "one request may cost (the ledger keeps money in 64-bit micro-units)")
    return order


def check_offer(provider, node, reserve, first_slot, last_slot, after_slot: int | None = None) -> dict:
    """A provider's offer ``(v_n, R_n, E_n)`` for one of its nodes (capacity: the node's)."""
    first, last = check_window("offer", first_slot, last_slot, after_slot)
    return {"owner": check_name("offer", "provider", provider), "node": check_name("offer", "node", node),
            "value": check_price("offer", "reserve", reserve), "first_slot": first, "last_slot": last}


def check_mechanism(mechanism: str, k: float) -> tuple[str, float]:
    if mechanism not in MECHANISMS:
        raise ValueError(f"mechanism must be one of {', '.join(MECHANISMS)}, got {mechanism!r}")
    if isinstance(k, bool) or not isinstance(k, (int, float)) or not (0.0 <= k <= 1.0):
        raise ValueError(f"k must be a number in [0, 1] (the user's share of each local surplus), got {k!r}")
    return mechanism, float(k)


MAX_ANSWER_SECONDS = 3600.0


def check_answer_seconds(answer_seconds: float, mechanism: str) -> float:
    """The distributed mode's deadline for provider agents' answers (0: no agents, the
    providers are answered in the exchange's process); only that mode asks providers."""
    if isinstance(answer_seconds, bool) or not isinstance(answer_seconds, (int, float)) or not (
            0 <= answer_seconds <= MAX_ANSWER_SECONDS):
        raise ValueError(f"exchange setting 'answer_seconds' must be a number of seconds from 0 to "
                         f"{MAX_ANSWER_SECONDS:g}, got {answer_seconds!r}")
    if answer_seconds and mechanism != "randomized-distributed":
        raise ValueError(f"exchange setting 'answer_seconds' is for the randomized-distributed mechanism (its "
                         f"provider agents' deadline), not {mechanism!r}")
    return float(answer_seconds)
