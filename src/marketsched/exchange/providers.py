"""What runs a provider's contracts: a backend per provider.

* ``local`` providers: :class:`LocalBackend` runs each contract's command with the live
  market's :class:`~marketsched.live.executor.LocalExecutor` (a process tree in its own
  session, pinned to the node's CPUs; cgroups where writable), so a job keeps running through a
  kill -9 of the exchange and is re-attached by the restarted exchange.
* ``slurm`` providers: :class:`SlurmBackend` submits each contract's command to the provider's
  Slurm partition with the live market's :class:`~marketsched.live.slurm.SlurmExecutor` (one
  batch job per contract, cancelled with ``scancel`` when its window ends).

Tests pass a backend of their own with the same five methods.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from marketsched.live.executor import JobLimits, LocalExecutor, RunAs

from .orders import PROVIDER_KINDS


class Backend(Protocol):
    def start(self, contract_id: int, command: str, env: dict, cpus: list[int] | None,
              user: RunAs | None = None) -> None:
        """Start the contract's command now as Unix account ``user`` (None: the exchange's own
        account); OSError: the provider could not."""

    def stop(self, contract_id: int) -> float:
        """Kill the contract's processes (its window is over); returns CPU seconds used."""

    def ended(self) -> list[tuple[int, int | None]]:
        """Contracts whose processes ended by themselves since the last call: (id, exit code)."""

    def running(self, contract_id: int) -> bool:
        """True if the contract's job is running on the provider now (not waiting to start)."""

    def reattach(self, contract_id: int) -> bool | int | None:
        """After a restart of the exchange: True if the contract's process still runs; else its
        recorded exit code (None: it ended without one, False: it never started)."""

    def close(self) -> None:
        """Stop watching (processes keep running)."""


class _ExecutorBackend:
    """What both backends do the same way through their executor (``self.executor``)."""

    executor: Any

    def reattach(self, contract_id: int) -> bool | int | None:
        if self.executor.adopt(contract_id) is not None:
            return True
        self.executor.forget(contract_id)  # it has ended: its state file goes
        if not self.executor.workdir(contract_id).exists():
            return False
        return self.executor.exit_code(contract_id)

    def close(self) -> None:
        self.executor.shutdown(kill=False)


class LocalBackend(_ExecutorBackend):
    """A local provider: contracts run on this machine under ``root`` (one folder per contract)."""

    def __init__(self, root: Path, containment="auto"):
        self.executor = LocalExecutor(Path(root), containment=containment, limits=JobLimits(cpus=None, memory=None))

    def start(self, contract_id: int, command: str, env: dict, cpus: list[int] | None,
              user: RunAs | None = None) -> None:
        self.executor.launch(contract_id, command, env=env, user=user, affinity=cpus)

    def running(self, contract_id: int) -> bool:
        return contract_id in self.executor.procs  # a local job runs from its launch

    def stop(self, contract_id: int) -> float:
        used = self.executor.cpu_seconds(contract_id)
        self.executor.kill(contract_id)
        self.executor.forget(contract_id)
        return used

    def ended(self) -> list[tuple[int, int | None]]:
        out = self.executor.exits()
        for key, _ in out:
            self.executor.forget(key)
        return out



class SlurmBackend(_ExecutorBackend):
    """A Slurm provider: contracts are batch jobs in ``partition`` (None: Slurm's default),
    their folders under ``root``."""

    def __init__(self, root: Path, partition: str | None = None):
        from marketsched.live.slurm import SlurmError, SlurmExecutor  # only for Slurm providers

        try:
            self.executor = SlurmExecutor(Path(root), partition=partition)
        except SlurmError as exc:  # the partition is unreachable: the provider cannot run the contract
            raise OSError(f"Slurm partition {partition or '(default)'}: {exc}") from exc

    def start(self, contract_id: int, command: str, env: dict, cpus: list[int] | None,
              user: RunAs | None = None) -> None:
        from marketsched.live.slurm import SlurmError

        try:
            self.executor.launch(contract_id, command, env=env, user=user)
        except SlurmError as exc:
            raise OSError(str(exc)) from exc

    def running(self, contract_id: int) -> bool:
        job = self.executor.procs.get(contract_id)
        info = self.executor.show(job.pid) if job is not None else None
        return info is not None and info.get("JobState") in ("RUNNING", "SUSPENDED", "COMPLETING")

    def stop(self, contract_id: int) -> float:
        self.executor.kill(contract_id)
        return 0.0

    def ended(self) -> list[tuple[int, int | None]]:
        return self.executor.exits()



def provider_backends(data_dir: Path, containment="auto"):
    """A backend factory: each provider's contracts under ``data_dir/providers/NAME``."""

    def make(provider: dict) -> Backend:
        root = Path(data_dir) / "providers" / provider["name"]
        if provider["kind"] == "slurm":
            return SlurmBackend(root, provider.get("partition"))
        if provider["kind"] == "local":
            return LocalBackend(root, containment)
        raise ValueError(f"provider {provider['name']!r} is of kind {provider['kind']!r}; this exchange runs "
                         f"{', '.join(PROVIDER_KINDS)} providers")

    return make
