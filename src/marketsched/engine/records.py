"""Per-job results of a simulation, stored as columns.

Every submitted job ends in exactly one final state:

* ``COMPLETED``: ran to the end of its run time;
* ``REJECTED``: refused at submission (e.g. it can never fit);
* ``DISCARDED``: dropped from the queue by the mechanism (e.g. EES run-or-discard);
* ``KILLED``: stopped while running or queued and never resumed (e.g. budget exhausted,
  cancelled, or still unfinished when a run is cut at ``until``).

``PENDING`` only appears while a simulation is under way.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import numpy as np


class FinalState(IntEnum):
    PENDING = 0
    COMPLETED = 1
    REJECTED = 2
    DISCARDED = 3
    KILLED = 4


@dataclass(frozen=True, eq=False)
class Records:
    """What happened to each job: one row per workload row, in workload order.

    Times are in seconds (NaN where a job never started or never ended), ``payment`` in the
    mechanism's currency units (total over the job's life, positive = the job pays).
    """

    first_start: np.ndarray  # float64
    end_time: np.ndarray  # float64: completion, discard, rejection or kill time
    preemptions: np.ndarray  # int64: times the job was stopped and later resumed
    payment: np.ndarray  # float64
    state: np.ndarray  # int8, FinalState codes

    def __len__(self) -> int:
        return int(self.state.shape[0])

    def counts(self) -> dict[str, int]:
        """Number of jobs per final state (names in lower case), including zeros."""
        c = np.bincount(self.state.astype(np.int64), minlength=len(FinalState))
        return {s.name.lower(): int(c[s]) for s in FinalState}

    def columns(self) -> dict[str, np.ndarray]:
        return {
            "first_start": self.first_start,
            "end_time": self.end_time,
            "preemptions": self.preemptions,
            "payment": self.payment,
            "state": self.state,
        }

    def equals(self, other: Records) -> bool:
        """Bit-for-bit equality (NaN equal to NaN), for determinism checks."""
        return all(
            np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
            for a, b in zip(self.columns().values(), other.columns().values())
        )


def empty_records(n: int) -> Records:
    """Records of ``n`` jobs before a run: no start, no end, no preemption, no payment, PENDING
    (the columns a compiled kernel fills in place)."""
    return Records(
        first_start=np.full(n, np.nan),
        end_time=np.full(n, np.nan),
        preemptions=np.zeros(n, dtype=np.int64),
        payment=np.zeros(n, dtype=np.float64),
        state=np.zeros(n, dtype=np.int8),
    )
