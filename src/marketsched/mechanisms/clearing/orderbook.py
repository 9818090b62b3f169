"""Order book of the grid exchange (Stößer 2009, chapter 3, section 3.4.1).

A node offer is ``theta_n = (v_n, C_n, M_n, R_n, E_n)``: reserve price per CPU unit per
timeslot, CPU and memory capacity, first and last available timeslot. A job request is
``theta_j = (v_j, c_j, m_j, r_j, e_j)``: willingness to pay per CPU unit per timeslot,
CPU and memory needed in every slot, fixed release and end slot (the job runs in every slot
of ``[r_j, e_j]`` or not at all, so ``d_j = e_j - r_j + 1``).

The book is columnar: one NumPy array per field. :class:`OrderBook` checks every field and
raises :class:`ValueError` naming the field and the first offending order.

:func:`generate_order_book` draws a book from table 3.6 (section 3.5.1).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

JOB_FIELDS = ("job_value", "job_cpu", "job_mem", "job_release", "job_end")
NODE_FIELDS = ("node_reserve", "node_cpu", "node_mem", "node_start", "node_end")


@dataclass(frozen=True, eq=False)
class OrderBook:
    """Job requests and node offers as parallel arrays (timeslots are integers from 0).

    Build with :meth:`from_arrays` (or :meth:`from_rows`), which validates. Values and
    reserve prices are per CPU unit per timeslot, as in the thesis.
    """

    job_value: np.ndarray  # v_j >= 0, reported willingness to pay per CPU per slot
    job_cpu: np.ndarray  # c_j >= 1
    job_mem: np.ndarray  # m_j >= 0
    job_release: np.ndarray  # r_j >= 0 (int)
    job_end: np.ndarray  # e_j >= r_j (int)
    node_reserve: np.ndarray  # v_n >= 0
    node_cpu: np.ndarray  # C_n >= 0
    node_mem: np.ndarray  # M_n >= 0
    node_start: np.ndarray  # R_n >= 0 (int)
    node_end: np.ndarray  # E_n >= R_n (int)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_arrays(cls, *, job_value, job_cpu, job_mem, job_release, job_end,
                    node_reserve, node_cpu, node_mem, node_start, node_end) -> OrderBook:
        """Validate the ten columns and build a book; raises ValueError naming the problem."""
        raw = dict(job_value=job_value, job_cpu=job_cpu, job_mem=job_mem, job_release=job_release,
                   job_end=job_end, node_reserve=node_reserve, node_cpu=node_cpu, node_mem=node_mem,
                   node_start=node_start, node_end=node_end)
        cols = {}
        for key, val in raw.items():
            try:
                arr = np.asarray(val, dtype=np.float64)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"field {key!r} is not numeric: {exc}") from None
            if arr.ndim != 1:
                raise ValueError(f"field {key!r} must be one-dimensional, got shape {arr.shape}")
            bad = ~np.isfinite(arr)
            if bad.any():
                raise ValueError(f"field {key!r} is not finite (NaN or inf) at {_who(key, int(np.argmax(bad)))}")
            cols[key] = arr
        for side, fields in (("job", JOB_FIELDS), ("node", NODE_FIELDS)):
            n = cols[fields[0]].shape[0]
            for key in fields:
                if cols[key].shape[0] != n:
                    raise ValueError(f"field {key!r} has {cols[key].shape[0]} entries, "
                                     f"expected {n} (length of {fields[0]!r})")
        _check(cols, "job_value", cols["job_value"] >= 0, "must be >= 0")
        _check(cols, "job_cpu", cols["job_cpu"] >= 1, "must be >= 1 (a job needs computing power)")
        _check(cols, "job_mem", cols["job_mem"] >= 0, "must be >= 0")
        _check(cols, "node_reserve", cols["node_reserve"] >= 0, "must be >= 0")
        _check(cols, "node_cpu", cols["node_cpu"] >= 0, "must be >= 0")
        _check(cols, "node_mem", cols["node_mem"] >= 0, "must be >= 0")
        for key in ("job_release", "job_end", "node_start", "node_end"):
            _check(cols, key, cols[key] == np.round(cols[key]), "must be an integer timeslot")
            _check(cols, key, cols[key] >= 0, "must be >= 0 (timeslots start at 0)")
        _check(cols, "job_end", cols["job_end"] >= cols["job_release"], "is before job_release (empty job)")
        _check(cols, "node_end", cols["node_end"] >= cols["node_start"], "is before node_start (empty window)")
        for key in ("job_release", "job_end", "node_start", "node_end"):
            cols[key] = cols[key].astype(np.int64)
        return cls(**cols)

    @classmethod
    def from_rows(cls, jobs, nodes) -> OrderBook:
        """Build from row tuples ``(v, c, m, r, e)`` per job and ``(v, C, M, R, E)`` per node."""
        jobs = np.asarray(jobs, dtype=np.float64).reshape(-1, 5) if len(jobs) else np.zeros((0, 5))
        nodes = np.asarray(nodes, dtype=np.float64).reshape(-1, 5) if len(nodes) else np.zeros((0, 5))
        return cls.from_arrays(**{k: jobs[:, i] for i, k in enumerate(JOB_FIELDS)},
                               **{k: nodes[:, i] for i, k in enumerate(NODE_FIELDS)})

    # ------------------------------------------------------------------ views
    @property
    def n_jobs(self) -> int:
        return int(self.job_value.shape[0])

    @property
    def n_nodes(self) -> int:
        return int(self.node_reserve.shape[0])

    @property
    def job_duration(self) -> np.ndarray:
        """d_j = e_j - r_j + 1 (timeslots)."""
        return self.job_end - self.job_release + 1

    @property
    def horizon(self) -> int:
        """Number of timeslots 0..T-1 covering every order."""
        ends = [int(a.max()) + 1 for a in (self.job_end, self.node_end) if a.size]
        return max(ends, default=0)

    def with_job_value(self, job: int, value: float) -> OrderBook:
        """The same book with job ``job`` reporting ``value`` (for misreporting studies)."""
        v = self.job_value.copy()
        v[job] = value
        if not (np.isfinite(value) and value >= 0):
            raise ValueError(f"job_value of job {job} must be finite and >= 0, got {value}")
        return replace(self, job_value=v)

    def with_node_reserve(self, node: int, reserve: float) -> OrderBook:
        """The same book with node ``node`` reporting ``reserve``."""
        v = self.node_reserve.copy()
        v[node] = reserve
        if not (np.isfinite(reserve) and reserve >= 0):
            raise ValueError(f"node_reserve of node {node} must be finite and >= 0, got {reserve}")
        return replace(self, node_reserve=v)


def _who(key: str, i: int) -> str:
    return f"{'job' if key.startswith('job') else 'node'} {i}"


def _check(cols, key, ok, message):
    if not np.all(ok):
        i = int(np.argmax(~np.asarray(ok)))
        raise ValueError(f"field {key!r} {message}: {_who(key, i)} has {cols[key][i]:g}")


# ---------------------------------------------------------------------- table 3.6 generator
MEMORY_READINGS = ("sigma", "variance")


def generate_order_book(n_nodes: int, n_jobs: int, rng: np.random.Generator, *,
                        job_duration_trials: int = 5, node_availability_trials: int = 8,
                        memory: str = "sigma") -> OrderBook:
    """Draw an order book from table 3.6 of the thesis (section 3.5.1).

    ==============  =========================  =========================
    parameter       job requests               node offers
    ==============  =========================  =========================
    CPU             1 + Binomial(5, 0.5)       1 + Binomial(10, 0.5)
    memory          round(Lognormal(4, 0.15))  round(Lognormal(5, 0.2))
    start slot      Binomial(5, 0.5)           Binomial(4, 0.5)
    duration        1 + Binomial(5, 0.5)       1 + Binomial(8, 0.5)
    valuation       integer Uniform[10, 20]    integer Uniform[7, 12]
    ==============  =========================  =========================

    Decisions (the thesis leaves these open):

    * The second lognormal parameter is the log-space *standard deviation* sigma, although
      the text calls it a variance: only sigma = 0.15 reproduces the stated memory mean
      55.216 and variance 69.375 (``exp(4 + 0.15**2 / 2) = 55.216``). ``memory="variance"``
      reads it as the text names it, the log-space variance (sigma = sqrt(0.15), sqrt(0.2)),
      for sensitivity runs.
    * Memory is rounded to the nearest integer (at least 1).
    * Time origin is slot 0 (Binomial(n, 0.5) can be 0); end = start + duration - 1.
    * ``job_duration_trials`` / ``node_availability_trials`` are the binomial trials of the
      durations (5 and 8 in tables 3.7, 3.9-3.13; the table 3.8 sweep uses 5..8 and 8..11).
    * Draw order: all job columns, then all node columns, each column drawn as a vector.
    """
    if n_nodes < 0 or n_jobs < 0:
        raise ValueError(f"n_nodes and n_jobs must be >= 0, got {n_nodes}, {n_jobs}")
    if memory not in MEMORY_READINGS:
        raise ValueError(f"memory must be one of {MEMORY_READINGS}, got {memory!r}")
    spread = (lambda p: p) if memory == "sigma" else np.sqrt
    job_cpu = 1 + rng.binomial(5, 0.5, n_jobs)
    job_mem = np.maximum(1, np.rint(rng.lognormal(4.0, spread(0.15), n_jobs)))
    job_release = rng.binomial(5, 0.5, n_jobs)
    job_end = job_release + rng.binomial(job_duration_trials, 0.5, n_jobs)  # 1 + Bin - 1
    job_value = rng.integers(10, 21, n_jobs).astype(np.float64)
    node_cpu = 1 + rng.binomial(10, 0.5, n_nodes)
    node_mem = np.maximum(1, np.rint(rng.lognormal(5.0, spread(0.2), n_nodes)))
    node_start = rng.binomial(4, 0.5, n_nodes)
    node_end = node_start + rng.binomial(node_availability_trials, 0.5, n_nodes)
    node_reserve = rng.integers(7, 13, n_nodes).astype(np.float64)
    return OrderBook.from_arrays(job_value=job_value, job_cpu=job_cpu, job_mem=job_mem,
                                 job_release=job_release, job_end=job_end, node_reserve=node_reserve,
                                 node_cpu=node_cpu, node_mem=node_mem, node_start=node_start,
                                 node_end=node_end)
