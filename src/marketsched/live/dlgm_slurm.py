"""DLGM and P-DLGM on Slurm: each DLGM node is a Slurm node (``market serve --mechanism
dlgm|pdlgm --executor slurm``).

DLGM is decentralized: every node keeps its own WSPT queue and each job chooses its node
(Heydenreich, Müller & Uetz 2006; Stößer 2009, sections 5.3 and 5.4). On a cluster the nodes
are the Slurm partition's nodes, in ``sinfo`` order (DLGM node ``n`` is the ``n``-th name), and
the queues stay in the market (the policy object's, as on the local executor): Slurm only runs
what the market decides, on the node it decided.

Steps (:class:`DLGMSlurmExecutor`, the executor interface :class:`~marketsched.live.dlgm_service.DLGMService`
uses):

1. **Start** (``launch``): ``sbatch -w NODE`` of the job's node (the
   :class:`~marketsched.platform.slurm.SlurmExecutor`'s batch job, one task of one CPU, its
   folder under ``DATA/dlgm``), submitted only when the market starts the job: a queued DLGM
   job is not in Slurm (its place in its node's queue is the market's).
2. **Preempt / resume** (P-DLGM, ``stop``/``cont``): ``scontrol suspend`` / ``scontrol resume``
   as the live market's Slurm executor does them (its rules hold: a suspend waits for the job's
   tasks, a resume waits out Slurm's 2 s gap and for an idle CPU on the job's own node, which
   on DLGM is free: the preemptor ran there and ended). The operations are carried out at
   once (``flush``), not at a broker's ``arrange``: there is no Slurm queue to order.
3. **Stop at the reported run time, cancel** (``kill``): ``scancel``.
4. **Exits** and **restart** (``exits``, ``adopt``, ``reap``): the Slurm executor's.

Decisions: a DLGM node is one Slurm node whatever its CPUs (one job at a time, a single
server as in the model; the node's other CPUs are left to Slurm); the market's ``--slots``
must equal the partition's node count (checked at the start), so the recorded run replays
through the simulator on as many nodes. Jobs run as the broker's account, as DLGM jobs do on
the local executor.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from marketsched.platform.slurm import SlurmError, SlurmExecutor


class DLGMSlurmExecutor(SlurmExecutor):
    """The Slurm executor for a DLGM market: ``nodes`` the Slurm node of each DLGM node (default:
    the partition's, :meth:`partition_nodes`); :attr:`place` maps a job to its DLGM node (the
    service sets it to the market's choice)."""

    def __init__(self, root: Path, nodes: list[str] | None = None, partition: str | None = None, poll: float = 0.2):
        super().__init__(root, partition=partition, poll=poll)
        self.nodes = list(nodes) if nodes is not None else self.partition_nodes()
        if not self.nodes:
            raise SlurmError(f"Slurm partition {self.partition or '(default)'} lists no node")
        self.place: Callable[[int], int] = lambda key: 0

    def partition_nodes(self) -> list[str]:
        """The partition's node names in ``sinfo`` order (``sinfo -h -N -o %N -p PARTITION``)."""
        names = self._run(["sinfo", "-h", "-N", "-o", "%N", "-p", self._partition_name()], timeout=10).split()
        return list(dict.fromkeys(names))

    def launch(self, key: int, command: str, env: dict | None = None, user=None, **kw):  # type: ignore[override]
        """Step 1: ``sbatch -w`` the job's node."""
        job = super().launch(key, command, env, user=user, nodelist=self.nodes[self.place(key)])
        self.flush()
        return job

    def stop(self, key: int) -> bool:
        """Step 2: ``scontrol suspend`` (now, or at the next poll while its tasks start)."""
        done = super().stop(key)
        self.flush()
        return done

    def cont(self, key: int) -> bool:
        """Step 2: ``scontrol resume`` (now, or at a poll once Slurm's 2 s gap has passed)."""
        done = super().cont(key)
        self.flush()
        return done
