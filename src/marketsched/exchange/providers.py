"""What runs a provider's contracts: a backend per provider, and who is at fault when a job ends.

* ``local`` providers: :class:`LocalBackend` runs each contract's command with the live
  market's :class:`~marketsched.platform.executor.LocalExecutor` (a process tree in its own
  session), so a job keeps running through a kill -9 of the exchange and is re-attached by the
  restarted exchange. **Contained** through the live market's launcher and cgroups, one per
  contract: cpuset = the node's CPUs, CPU quota = the contract's share of them, memory limit =
  the contracted memory, at most :data:`JOB_PROCESSES` tasks (:meth:`Contracted.limits`).
* ``slurm`` providers: :class:`SlurmBackend` submits each contract's command to the provider's
  Slurm partition with the live market's :class:`~marketsched.platform.slurm.SlurmExecutor` (one
  batch job per contract with ``--cpus-per-task`` and ``--mem`` of the contract, as the user's
  account, cancelled with ``scancel`` when its window ends).

Units (the exchange's own decision; Stößer 2009 leaves them abstract): a contract's CPU is
the share ``cpu / node cpu`` of its node, and a node is its CPUs (a local node: the CPUs it
names, else this machine's; a Slurm node: its partition's CPUs as ``sinfo`` reports them). One
memory unit is one MiB (:data:`MEMORY_UNIT`); a job gets at least :data:`MIN_JOB_MEMORY`.

Who is at fault when a job ends (the settlement rules; docs/exchange.md, "Who is at fault")
-------------------------------------------------------------------------------------------
Only what the exchange controls is evidence. The user's command, its exit status and the
files in the job's folder are the user's (the job's processes run as the user's account, may
signal one another and write their folder), so they never make the provider pay:

* A **local** job that ends before its window, whatever its exit status (``exit 200``,
  ``kill -9 $$``, its wrapper killed by the job itself, the kernel's OOM killer inside the
  contracted memory), ended by itself: the user's outcome, the provider is paid. Nothing on a
  local provider's side can end it: the machine is the operator's (root is trusted), other
  accounts cannot signal the job. :meth:`LocalBackend.fault` is therefore always None; a local
  provider fails only by not starting the job (:class:`OSError` from :meth:`Backend.start`,
  e.g. its node's CPUs are offline) or by not delivering the contracted resources as measured.
* A **Slurm** job's end is judged by Slurm's accounting (``sacct``), which the user cannot
  write (:func:`slurm_fault`): ``COMPLETED``, ``FAILED`` (any exit status or signal of the
  command) and ``OUT_OF_MEMORY`` (the contracted memory) are the user's; ``CANCELLED by UID``
  is the user's when UID is the job's own account, else the provider's (its administrator;
  the exchange's own cancel at a window's end settles that contract at once); ``NODE_FAIL``,
  ``PREEMPTED``, ``BOOT_FAIL``, ``DEADLINE``, ``TIMEOUT`` and any other end are the provider's.
  An end ``sacct`` has not settled yet when the job's window ends (or ``tau*``) is still judged
  by that end, once settled (:meth:`SlurmBackend.awaiting`): a cancel by the provider's side a
  moment before the window's end is the provider's, not a job that served its whole window.

Tests pass a backend of their own with the same methods.
"""

from __future__ import annotations

import math
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from marketsched.platform.cgroups import Layout, parse_cpu_list
from marketsched.platform.executor import JobLimits, LocalExecutor, RunAs, market_cgroup_name, warn

from .orders import PROVIDER_KINDS

MEMORY_UNIT = 2**20  # one memory unit of a node or a request, in bytes
MIN_JOB_MEMORY = 32 * 2**20  # no contract job is limited below this (a shell alone needs a few MiB)
JOB_PROCESSES = 512  # tasks (processes and threads) one contract job may have at once
CPU_TOLERANCE = 0.01  # a measured CPU allocation this close to the contract's is the contract's
PAUSE_BEFORE_GO = "MARKETSCHED_EXCHANGE_PAUSE_BEFORE_GO"  # test hook (LocalBackend.start)


@dataclass(frozen=True)
class Contracted:
    """What a contract's job is entitled to on its node: ``share`` = contracted CPU units /
    the node's CPU units (0, 1], ``mem`` memory units (MiB), ``node_cpus`` the CPUs of this
    machine a local node names (None: all online ones; a Slurm node: its partition's)."""

    share: float
    mem: int
    node_cpus: tuple[int, ...] | None = None

    @classmethod
    def of(cls, contract: dict, node: dict) -> Contracted:
        cpus = node.get("cpus")
        return cls(min(1.0, contract["cpu"] / node["cpu"]), int(contract["mem"]),
                   tuple(sorted(cpus)) if cpus else None)

    def cpus(self, node_cpus: int) -> float:
        """CPUs' worth of time per period on a node of ``node_cpus`` CPUs."""
        return self.share * node_cpus

    def memory(self) -> int:
        """The memory limit in bytes."""
        return max(MIN_JOB_MEMORY, self.mem * MEMORY_UNIT)

    def limits(self, cpus: list[int]) -> JobLimits:
        """The cgroup limits of a local job on the CPUs ``cpus``."""
        return JobLimits(cpus=self.cpus(len(cpus)), memory=self.memory(), processes=JOB_PROCESSES,
                         cpuset=tuple(sorted(cpus)))

    def shortfall(self, node_cpus: int, given: dict | None) -> str | None:
        """The measured delivery rule: a note if the job was given less than the contract (CPU
        time per period below its share of the node's ``node_cpus`` CPUs, or a memory limit
        below the contracted memory) as ``given`` (:meth:`Backend.usage`) reports it; None if
        it got the contract, or if nothing was measured (no cgroups, no accounting)."""
        if not given:
            return None
        want = self.cpus(node_cpus)
        if given.get("cpus") is not None and given["cpus"] < want - CPU_TOLERANCE:
            return f"the job was given {given['cpus']:g} CPUs' worth of time, the contract {want:g}"
        if given.get("memory") is not None and given["memory"] < self.memory():
            return (f"the job was given {given['memory'] / 2**20:.0f} MiB of memory, the contract "
                    f"{self.memory() / 2**20:.0f} MiB")
        return None


class Backend(Protocol):
    def start(self, contract_id: int, command: str, env: dict, cpus: list[int] | None,
              user: RunAs | None = None, contracted: Contracted | None = None) -> None:
        """Start the contract's command now as Unix account ``user`` (None: the exchange's own
        account) with the ``contracted`` resources; OSError: the provider could not."""

    def stop(self, contract_id: int) -> float:
        """Kill the contract's processes (its window is over); returns CPU seconds used."""

    def ended(self) -> list[tuple[int, int | None]]:
        """Contracts whose processes ended by themselves since the last call: (id, exit code)."""

    def usage(self, contract_id: int, contracted: Contracted | None = None) -> dict | None:
        """What the contract's job has used and been given, as measured (while it runs, or once
        it ended, until :meth:`fault`): ``cpu_seconds``, ``peak_memory`` (bytes), ``cpus``
        (CPUs' worth of time it could use), ``memory`` (its memory limit, bytes), a value None
        when unknown; and with ``contracted``, ``shortfall``: :meth:`Contracted.shortfall`."""

    def fault(self, contract_id: int) -> str | None:
        """For a contract :meth:`ended` (or :meth:`reattach`) reported ended: why the provider's
        side ended its job (a note), or None when the job ended by itself (the user's outcome;
        module docstring). The last call about the contract: what was kept of it is dropped."""

    def running(self, contract_id: int) -> bool:
        """True if the contract's job is running on the provider now (not waiting to start)."""

    def reattach(self, contract_id: int) -> bool | int | None:
        """After a restart of the exchange: True if the contract's process still runs; False if
        its command never ran (no go: nothing of it runs now); else its recorded exit code
        (None: it ran and ended without one)."""

    def close(self) -> None:
        """Stop watching (processes keep running)."""


class _ExecutorBackend:
    """What both backends do the same way through their executor (``self.executor``)."""

    executor: Any

    def close(self) -> None:
        self.executor.shutdown(kill=False)


def online_cpus() -> set[int]:
    """This machine's CPUs that are online (``/sys/devices/system/cpu/online``; else the ones
    this process may run on)."""
    try:
        return set(parse_cpu_list(Path("/sys/devices/system/cpu/online").read_text()))
    except (OSError, ValueError):
        return set(os.sched_getaffinity(0))


class LocalBackend(_ExecutorBackend):
    """A local provider: contracts run on this machine under ``root`` (one folder per contract),
    each in its own cgroups (module docstring) where the machine has them; ``executor``: one
    made already for ``root`` (the privileged launcher's, :mod:`.launcher`)."""

    def __init__(self, root: Path, containment="auto", executor: LocalExecutor | None = None):
        root = Path(root)
        if containment == "auto" and executor is None:
            containment = Layout.detect(market_cgroup_name(root), cpuset="auto")
        self.executor = executor or LocalExecutor(root, containment=containment,
                                                  limits=JobLimits(cpus=None, memory=None))
        self.executor.keep_usage = True
        self.confined = self.executor.layout.cpuset is not None
        if not self.confined and containment != "none":
            warn(f"contract jobs under {root} are pinned to their node's CPUs with sched_setaffinity only, which a "
                 "job can undo: no writable cpuset cgroup on this machine (run the exchange as root)")

    def start(self, contract_id: int, command: str, env: dict, cpus: list[int] | None,
              user: RunAs | None = None, contracted: Contracted | None = None) -> None:
        online = online_cpus()
        node_cpus = sorted(cpus) if cpus else sorted(online)
        lost = sorted(set(node_cpus) - online)
        if lost:
            raise OSError(f"the node's CPU(s) {lost} are not online on this machine")
        limits = None
        if contracted is not None and self.executor.contained:
            limits = contracted.limits(node_cpus)
            if not self.confined:
                limits = JobLimits(cpus=limits.cpus, memory=limits.memory, processes=limits.processes)
        self.executor.launch(contract_id, command, env=env, user=user, affinity=cpus, limits=limits,
                             before_go=lambda: _pause_before_go(contract_id), record_go=True)

    def running(self, contract_id: int) -> bool:
        return contract_id in self.executor.procs  # a local job runs from its launch

    def stop(self, contract_id: int) -> float:
        used = self.executor.cpu_seconds(contract_id)
        self.executor.kill(contract_id)
        self.executor.forget(contract_id)
        return used

    def ended(self) -> list[tuple[int, int | None]]:
        return self.executor.exits()  # forgotten once settled (usage)

    def fault(self, contract_id: int) -> str | None:
        self.executor.forget(contract_id)
        return None  # nothing on a local provider's side ends a job (module docstring)

    def usage(self, contract_id: int, contracted: Contracted | None = None) -> dict | None:
        got = self.executor.usage(contract_id)
        out = {"cpu_seconds": got["cpu_seconds"], "peak_memory": got["peak_memory"], "cpus": None, "memory": None}
        lim = got["limits"]
        if lim is not None:
            width = len(lim["cpuset"]) if lim["cpuset"] else None
            given = [x for x in (lim["cpus"], width) if x is not None]
            out["cpus"] = min(given) if given else None
            out["memory"] = lim["memory"]
        if contracted is not None:
            out["shortfall"] = contracted.shortfall(len(contracted.node_cpus or online_cpus()), out)
        return out

    def reattach(self, contract_id: int) -> bool | int | None:
        went = self.executor.went(contract_id)
        if self.executor.adopt(contract_id) is not None:
            if went:
                return True
            # a launcher still waiting for a go no exchange can give any more (its pipe's
            # writer died): it never ran the command
            self.executor.kill(contract_id)
            self.executor.forget(contract_id)
            return False
        self.executor.forget(contract_id)  # it has ended: its state file goes
        code = self.executor.exit_code(contract_id)
        if code is None and not went:
            return False  # the exchange died before the go: the command never ran
        return code


def _pause_before_go(contract_id: int) -> None:
    """Test hook: with ``MARKETSCHED_EXCHANGE_PAUSE_BEFORE_GO=DIR`` in the exchange's environment
    (the operator's, never a party's), the first launch of each contract stops just before the
    go: it creates ``DIR/CONTRACT_ID`` and sleeps until the test kills the exchange."""
    folder = os.environ.get(PAUSE_BEFORE_GO)
    if not folder:
        return
    mark = Path(folder) / str(contract_id)
    try:
        mark.touch(exist_ok=False)
    except FileExistsError:
        return  # paused there once already
    while True:
        time.sleep(3600)


# ---------------------------------------------------------------------------- Slurm
SLURM_USER_STATES = {"COMPLETED", "FAILED", "OUT_OF_MEMORY"}  # the command ran and ended by itself
ACCOUNTING_WAIT = 60.0  # seconds an ended job waits for its final state in Slurm's accounting


def slurm_fault(state: str | None, job_uid: int | None) -> str | None:
    """The provider's fault in a Slurm job's accounting state (e.g. ``"CANCELLED by 0"``), or
    None when the end is the user's (module docstring). The exchange's own cancel (at a
    window's end) is never judged here: that contract is settled at once."""
    if state is None:
        return "slurm has no record of the job's end"
    word, _, rest = state.strip().partition(" ")
    if word in SLURM_USER_STATES:
        return None
    if word == "CANCELLED":
        by = re.fullmatch(r"by (\d+)", rest.strip())
        if by is not None and job_uid is not None and int(by.group(1)) == job_uid:
            return None
        return f"slurm: {state.strip()} (not by the job's account)"
    return f"slurm: {state.strip()}"


def slurm_duration(text: str) -> float | None:
    """Seconds in sacct's ``[D-][HH:]MM:SS[.mmm]``; None if empty."""
    text = text.strip()
    if not text:
        return None
    days, _, rest = text.rpartition("-")
    parts = [float(x) for x in rest.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0.0)
    return (int(days) if days else 0) * 86400 + parts[0] * 3600 + parts[1] * 60 + parts[2]


_SIZE = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def slurm_size(text: str) -> int | None:
    """Bytes in sacct's ``123K`` / ``50M`` / ``50Mn`` / ``2Gc``; None if empty."""
    m = re.fullmatch(r"([\d.]+)([KMGT]?)[nc]?", text.strip())
    if m is None:
        return None
    return int(float(m.group(1)) * _SIZE.get(m.group(2), 1))


class SlurmBackend(_ExecutorBackend):
    """A Slurm provider: contracts are batch jobs in ``partition`` (None: Slurm's default),
    their folders under ``root``."""

    def __init__(self, root: Path, partition: str | None = None):
        from marketsched.platform.slurm import SlurmError, SlurmExecutor  # only for Slurm providers

        try:
            self.executor = SlurmExecutor(Path(root), partition=partition)
        except SlurmError as exc:  # the partition is unreachable: the provider cannot run the contract
            raise OSError(f"Slurm partition {partition or '(default)'}: {exc}") from exc
        self._uids: dict[int, int | None] = {}
        self._acct: dict[int, dict] = {}  # ended contracts' accounting, until settled
        self._held: dict[int, tuple[int | None, float]] = {}  # ended, accounting not final yet: (code, since)
        self._cpus: int | None = None

    def _partition_cpus(self) -> int:
        """The partition's CPUs, those of nodes down included (``TotalCPUs``, which bounds the
        units its nodes sell): a contract's share is of these, whatever is up when its job
        starts (a node down lowers what the next clearing sells, not what was sold)."""
        if self._cpus is None:
            self._cpus = self.executor.cpus
        return self._cpus

    def start(self, contract_id: int, command: str, env: dict, cpus: list[int] | None,
              user: RunAs | None = None, contracted: Contracted | None = None) -> None:
        from marketsched.platform.slurm import SlurmError

        try:
            n, mem = 1, None
            if contracted is not None:
                n = max(1, math.ceil(contracted.cpus(self._partition_cpus()) - CPU_TOLERANCE))
                mem = contracted.memory() // 2**20
            self._uids[contract_id] = None if user is None else user.uid
            self.executor.launch(contract_id, command, env=env, user=user, cpus=n, mem_mib=mem)
        except SlurmError as exc:
            raise OSError(str(exc)) from exc

    def awaiting(self, contract_id: int) -> bool:
        """True while the contract's job has ended but Slurm's accounting of its end is not
        final yet (:meth:`ended` reports it once it is, or after :data:`ACCOUNTING_WAIT` s): its
        verdict waits for that end, even past its window's end (a job the provider's side
        cancelled a moment before ``tau*`` or the window's end is judged by that cancel, never
        as one that ran until then)."""
        return contract_id in self._held

    def running(self, contract_id: int) -> bool:
        if contract_id in self._held:  # it ran and ended; its accounting is on its way
            return True
        job = self.executor.procs.get(contract_id)
        info = self.executor.show(job.pid) if job is not None else None
        return info is not None and info.get("JobState") in ("RUNNING", "SUSPENDED", "COMPLETING")

    def stop(self, contract_id: int) -> float:
        self._held.pop(contract_id, None)
        self._uids.pop(contract_id, None)
        used = (self.accounting(contract_id) or {}).get("cpu_seconds") or 0.0
        self.executor.kill(contract_id)
        return used

    def ended(self) -> list[tuple[int, int | None]]:
        """Ended jobs, each once Slurm's accounting has its final state (``sacct`` lags the end
        by a moment); after :data:`ACCOUNTING_WAIT` s without one, with the state Slurm's
        controller reported (a cancel's author unknown then)."""
        now = time.monotonic()
        for key, code in self.executor.exits():
            self._held[key] = (code, now)
        out = []
        for key, (code, since) in list(self._held.items()):
            acct = self.accounting(key) or {}
            final = _final(acct)
            if not final and now - since < ACCOUNTING_WAIT:
                continue
            state, _ = self.executor.outcome(key)  # the controller's view (and dropped from the executor)
            if not final:
                acct["state"] = "COMPLETED" if state == "completed" else None
            self._acct[key] = acct
            del self._held[key]
            out.append((key, code))
        return out

    def accounting(self, contract_id: int) -> dict | None:
        """The job's accounting (``sacct``): ``state`` (e.g. "CANCELLED by 0"), ``cpus``
        (AllocCPUS), ``memory`` (ReqMem, bytes), ``cpu_seconds`` (TotalCPU), ``peak_memory``
        (the largest MaxRSS of its steps); None if Slurm has no record (yet)."""
        from marketsched.platform.slurm import SlurmError

        rec = self.executor.recorded(contract_id)
        if rec is None:
            return None
        try:
            out = self.executor._run(["sacct", "-n", "-P", "-j", str(rec[0]), "-o",
                                      "JobID,State,AllocCPUS,ReqMem,TotalCPU,MaxRSS"], timeout=10)
        except SlurmError:
            return None
        got: dict = {}
        peak = None
        for line in out.splitlines():
            f = line.split("|")
            if len(f) < 6:
                continue
            if f[0] == str(rec[0]):
                got = {"state": f[1], "cpus": int(f[2]) if f[2].isdigit() else None, "memory": slurm_size(f[3]),
                       "cpu_seconds": slurm_duration(f[4])}
            rss = slurm_size(f[5]) if f[5] else None
            if rss is not None:
                peak = max(peak or 0, rss)
        if not got:
            return None
        got["peak_memory"] = peak
        return got

    def fault(self, contract_id: int) -> str | None:
        acct = self._acct.pop(contract_id, None) or {}
        uid = self._uids.pop(contract_id) if contract_id in self._uids else _uid_of(self.executor, contract_id)
        return slurm_fault(acct.get("state"), uid)

    def usage(self, contract_id: int, contracted: Contracted | None = None) -> dict | None:
        acct = self._acct.get(contract_id)
        if acct is None:
            acct = self.accounting(contract_id) or {}
        out = {k: acct.get(k) for k in ("cpu_seconds", "peak_memory", "cpus", "memory")}
        if contracted is not None:  # AllocCPUS and ReqMem: what Slurm gave the job
            out["shortfall"] = contracted.shortfall(self._partition_cpus(), out)
        return out

    def reattach(self, contract_id: int) -> bool | int | None:
        if self.executor.adopt(contract_id) is not None:
            return True
        rec = self.executor.recorded(contract_id)
        if rec is None:
            # no record of a submission: the exchange died before sbatch answered. A job it
            # may have submitted meanwhile is cancelled by name: the command is started anew
            self.executor._run(["scancel", "-n", self.executor.job_name(contract_id)], timeout=10)
            return False
        acct = self.accounting(contract_id) or {}
        self.executor.forget(contract_id)  # it has ended: its state file goes
        code = self.executor.exit_code(contract_id)
        if not _final(acct):  # sacct lags the end: judged once final, as ended() judges any end
            from marketsched.platform.slurm import COMPLETION_STATES

            info = self.executor.show(rec[0]) or {}  # the controller's view, if sacct stays behind
            ran_out = info.get("JobState") in COMPLETION_STATES
            self.executor.outcomes[contract_id] = ("completed" if ran_out else "failed", "")
            self._held[contract_id] = (code, time.monotonic())
            return True
        self._acct[contract_id] = acct
        return code


def _final(acct: dict) -> bool:
    """Whether a Slurm job's accounting (:meth:`SlurmBackend.accounting`) has its final state."""
    from marketsched.platform.slurm import ACTIVE

    return (acct.get("state") or "").split(" ")[0] not in ("", *ACTIVE)


def _uid_of(executor, contract_id: int) -> int | None:
    """The owner of a contract's job folder (its user's account); None if it is gone, or if it
    is the exchange's own account (single-user mode: the job's own cancel cannot be told from
    one by the exchange's account, e.g. root's, which counts as the provider's)."""
    try:
        uid = executor.workdir(contract_id).stat().st_uid
    except OSError:
        return None
    return None if uid == os.geteuid() else uid


def awaiting(backend, contract_id: int) -> bool:
    """Whether ``backend`` holds the contract's ended job until its end can be judged
    (:meth:`SlurmBackend.awaiting`); a window's end then waits for that verdict."""
    check = getattr(backend, "awaiting", None)
    return bool(check is not None and check(contract_id))


def provider_backends(data_dir: Path, containment="auto"):
    """A backend factory: each provider's contracts under ``data_dir/providers/NAME`` (an
    exchange run as a service account uses :func:`.launcher.service_backends` instead)."""

    def make(provider: dict) -> Backend:
        root = Path(data_dir) / "providers" / provider["name"]
        if provider["kind"] == "slurm":
            return SlurmBackend(root, provider.get("partition"))
        if provider["kind"] == "local":
            return LocalBackend(root, containment)
        if provider["kind"] == "agent":  # its agent runs its contracts (.agent_runs)
            from .agent_runs import AgentBackend

            return AgentBackend(provider["name"])
        raise ValueError(f"provider {provider['name']!r} is of kind {provider['kind']!r}; this exchange runs "
                         f"{', '.join(PROVIDER_KINDS)} providers")

    return make

