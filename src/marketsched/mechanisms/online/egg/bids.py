"""Job descriptions, value schedules and bids of the Egg framework.

Source: Kang & Parkes (2007), L. Kang and D. C. Parkes, "A Decentralized Auction Framework to Promote
Efficient Resource Allocation in Open Computational Grids" (NetEcon+IBC 2007), section 2.2:
a job's type is ``theta_i = (J_i, w_i, a_i, gamma_i)``; a *bid* is the job description, the
value schedule and an optional minimum reliability; the arrival is the moment the bid reaches
the infrastructure (it is not part of the bid). Definition 1 (single-minded users) and the
partial order on descriptions are in the same section.

What is here
------------
* :class:`Schema` and :func:`dominates`: a job description ``J`` is an attribute vector; the
  partial order ``J' >= J`` (``J'`` is worth at least as much as ``J`` to a user who needs
  ``J``) is the *product order*: every ordered attribute (input size, iterations, software
  version, requested time, ...) is ``>=`` and every categorical attribute (user, executable,
  site) is equal. One order for every user, as definition 1 requires.
* Value schedules ``w(tau)`` on absolute time, vectorised over ``tau``:
  :class:`Linear` (the paper's sample bid ``("download Atlas 5.x", (10, 2, t_d), 99%)``),
  :class:`ConstantDeadline` (the "simple special case") and :class:`Steps` (piecewise
  constant, example 2).
* :class:`Bid` (one report) and :class:`BidBatch` (many reports as columns, for the
  vectorised auctioneer and the benchmark).
* :func:`true_utility`: the user's utility under definition 1 and the rules of section 3.

Decisions (open in the paper)
-----------------------------
* **Value schedules are non-increasing** in ``tau`` (checked; ``ValueError`` otherwise).
  ``w(tau)`` is the willingness to pay for completion *by* ``tau``; every example in the
  paper decreases or is constant. This makes the best completion time inside a price
  column its earliest feasible point, so the auctioneer never searches inside a column.
* **Half-open patience window** (decision 2): ``w(tau) = 0`` for ``tau >= a + Delta``. The
  market truncates a reported schedule there (decision 5: truncate, never reject; counted
  by the market). Example 2's ``w([t0+3, t0+Delta]) = 0`` and example 1's free fourth
  column both read this way.
* **Pieces are half-open** ``[b_j, b_{j+1})``: example 2's ``w([t0, t0+2]) = 19`` and
  ``w([t0+2, t0+3]) = 17`` overlap at ``t0+2``; the paper prices the column starting at
  ``t0+2`` at value 17, so ``w(t0+2) = 17``.
* **The sample bid's formula** is printed as ``(2 + (10-2)(t_d - tau))/(t_d - t_0)``; the
  bracket is a misprint (it would not equal 10 at ``t_0``). :class:`Linear` uses
  ``w(tau) = v_end + (v_start - v_end)(t_d - tau)/(t_d - t_0)`` on ``[t_0, t_d]``, 0 after.
  A value schedule is defined from the arrival on; :class:`Linear` evaluated before ``t_0``
  is held at ``v_start``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

# ----------------------------------------------------------------------------- descriptions


@dataclass(frozen=True)
class Schema:
    """Names of the attributes of a job description and which of them are categorical.

    The infrastructure defines the syntax (section 2.2: "the default syntax and semantics
    are defined by the market infrastructure"). Ordered attributes must be finite numbers;
    categorical ones are compared for equality only (store codes as numbers).
    """

    names: tuple[str, ...]
    categorical: tuple[str, ...] = ()

    def __post_init__(self):
        if len(set(self.names)) != len(self.names) or not self.names:
            raise ValueError(f"Schema: attribute names must be distinct and non-empty, got {self.names}")
        unknown = set(self.categorical) - set(self.names)
        if unknown:
            raise ValueError(f"Schema: categorical attributes {sorted(unknown)} are not among {self.names}")

    @property
    def categorical_mask(self) -> np.ndarray:
        return np.array([n in self.categorical for n in self.names], dtype=bool)

    def vector(self, **attrs) -> np.ndarray:
        """An attribute vector from keyword arguments (every attribute required)."""
        missing = [n for n in self.names if n not in attrs]
        extra = [k for k in attrs if k not in self.names]
        if missing or extra:
            raise ValueError(f"Schema.vector: missing {missing}, unknown {extra}")
        x = np.array([float(attrs[n]) for n in self.names])
        self.check(x[None, :], "Schema.vector")
        return x

    def check(self, x: np.ndarray, where: str = "description") -> np.ndarray:
        """Validate a (n, A) matrix of descriptions; return it as float64."""
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != len(self.names):
            raise ValueError(f"{where}: descriptions must have shape (n, {len(self.names)}), got {x.shape}")
        bad = ~np.isfinite(x)
        if bad.any():
            i, j = np.argwhere(bad)[0]
            raise ValueError(f"{where}: attribute {self.names[j]!r} of row {i} is {x[i, j]} (not finite)")
        return x


def dominates(a, b, categorical_mask=None) -> np.ndarray:
    """``a >= b`` in the product order (weakly), row-wise over broadcast (..., A) arrays.

    Ordered attributes: ``a >= b``; categorical attributes: ``a == b``. ``J' >= J`` means a
    ``J'`` job is worth at least as much as a ``J`` job to a user who needs ``J``
    (definition 1; the order is the same for every user).
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if categorical_mask is None:
        return np.all(a >= b, axis=-1)
    cat = np.asarray(categorical_mask, dtype=bool)
    return np.all(np.where(cat, a == b, a >= b), axis=-1)


# ----------------------------------------------------------------------------- value schedules


class ValueSchedule:
    """A non-increasing value schedule ``w(tau)`` on absolute time (section 2.2)."""

    @property
    def deadline(self) -> float:
        """Latest time with positive value (``d`` in the paper); ``-inf`` if never positive."""
        raise NotImplementedError

    def value_at(self, tau) -> np.ndarray:
        raise NotImplementedError

    def truncated(self, horizon: float) -> ValueSchedule:
        """The schedule with ``w(tau) = 0`` for ``tau >= horizon`` (bounded patience)."""
        return Truncated(self, float(horizon))

    def scaled(self, factor: float) -> ValueSchedule:
        """``factor * w`` (used for over- and under-statements)."""
        return Scaled(self, float(factor))


@dataclass(frozen=True)
class Linear(ValueSchedule):
    """Linear willingness to pay from ``v_start`` at ``t0`` to ``v_end`` at ``t_deadline``.

    The paper's sample bid (section 2.2): ``("download Atlas 5.x", (10, 2, Apr-01-06
    00:00:01), 99%)``; ``t0`` is the time the bid is submitted. ``w(tau) = v_end + (v_start -
    v_end) (t_deadline - tau) / (t_deadline - t0)`` for ``t0 <= tau <= t_deadline`` (misprint
    corrected, see the module docstring), ``v_start`` before ``t0``, 0 after ``t_deadline``.
    """

    v_start: float
    v_end: float
    t0: float
    t_deadline: float

    def __post_init__(self):
        for name in ("v_start", "v_end", "t0", "t_deadline"):
            if not np.isfinite(getattr(self, name)):
                raise ValueError(f"Linear: {name} must be finite, got {getattr(self, name)}")
        if self.v_end < 0 or self.v_start < self.v_end:
            raise ValueError(f"Linear: need v_start >= v_end >= 0 (non-increasing, non-negative), "
                             f"got v_start={self.v_start}, v_end={self.v_end}")
        if self.t_deadline < self.t0:
            raise ValueError(f"Linear: t_deadline {self.t_deadline} is before t0 {self.t0}")

    @property
    def deadline(self) -> float:
        if self.v_start <= 0:
            return -np.inf
        return self.t_deadline

    def value_at(self, tau) -> np.ndarray:
        tau = np.asarray(tau, dtype=np.float64)
        span = self.t_deadline - self.t0
        if span > 0:
            frac = np.clip((self.t_deadline - tau) / span, 0.0, 1.0)
        else:
            frac = np.ones_like(tau)
        w = self.v_end + (self.v_start - self.v_end) * frac
        return np.where(tau <= self.t_deadline, w, 0.0)


def ConstantDeadline(value: float, deadline: float, t0: float = 0.0) -> Linear:
    """Constant willingness to pay ``value`` up to a hard ``deadline`` (section 2.2)."""
    return Linear(float(value), float(value), float(t0), float(deadline))


@dataclass(frozen=True)
class Steps(ValueSchedule):
    """Piecewise constant: ``values[j]`` on ``[breaks[j], breaks[j+1])``, 0 from ``breaks[-1]``.

    ``breaks`` has one more entry than ``values``; before ``breaks[0]`` the value is
    ``values[0]`` (a schedule is only ever read from the arrival on). Example 2:
    ``Steps([0, 2, 3], [19, 17])`` (hours from ``t0``).
    """

    breaks: tuple[float, ...]
    values: tuple[float, ...]

    def __post_init__(self):
        b = np.asarray(self.breaks, dtype=np.float64)
        v = np.asarray(self.values, dtype=np.float64)
        object.__setattr__(self, "breaks", tuple(b.tolist()))
        object.__setattr__(self, "values", tuple(v.tolist()))
        if b.ndim != 1 or v.ndim != 1 or b.shape[0] != v.shape[0] + 1 or v.shape[0] < 1:
            raise ValueError(f"Steps: need len(breaks) == len(values) + 1 >= 2, got {b.shape[0]} and {v.shape[0]}")
        if not (np.all(np.isfinite(b)) and np.all(np.isfinite(v))):
            raise ValueError("Steps: breaks and values must be finite")
        if np.any(np.diff(b) <= 0):
            i = int(np.argmax(np.diff(b) <= 0))
            raise ValueError(f"Steps: breaks must increase strictly; break {i + 1} ({b[i + 1]}) <= break {i} ({b[i]})")
        if np.any(v < 0):
            raise ValueError(f"Steps: values must be >= 0, got {v.tolist()}")
        if np.any(np.diff(v) > 0):
            i = int(np.argmax(np.diff(v) > 0))
            raise ValueError(f"Steps: values must not increase (completion *by* tau); value {i + 1} "
                             f"({v[i + 1]}) > value {i} ({v[i]})")

    @property
    def deadline(self) -> float:
        v = np.asarray(self.values)
        pos = np.nonzero(v > 0)[0]
        if pos.size == 0:
            return -np.inf
        return self.breaks[pos[-1] + 1]  # supremum (half-open piece)

    def value_at(self, tau) -> np.ndarray:
        tau = np.asarray(tau, dtype=np.float64)
        b = np.asarray(self.breaks)
        v = np.append(np.asarray(self.values), 0.0)
        idx = np.clip(np.searchsorted(b, tau, side="right") - 1, 0, len(v) - 1)
        return v[idx]


@dataclass(frozen=True)
class Truncated(ValueSchedule):
    base: ValueSchedule
    horizon: float

    @property
    def deadline(self) -> float:
        return min(self.base.deadline, self.horizon)

    def value_at(self, tau) -> np.ndarray:
        tau = np.asarray(tau, dtype=np.float64)
        return np.where(tau < self.horizon, self.base.value_at(tau), 0.0)


@dataclass(frozen=True)
class Scaled(ValueSchedule):
    base: ValueSchedule
    factor: float

    def __post_init__(self):
        if not (np.isfinite(self.factor) and self.factor >= 0):
            raise ValueError(f"Scaled: factor must be a finite number >= 0, got {self.factor}")

    @property
    def deadline(self) -> float:
        return self.base.deadline if self.factor > 0 else -np.inf

    def value_at(self, tau) -> np.ndarray:
        return self.factor * self.base.value_at(tau)


# ----------------------------------------------------------------------------- bids and types


@dataclass(frozen=True)
class Bid:
    """One report: description, value schedule, minimum reliability, view of the grid.

    ``min_reliability`` is ``gamma_hat`` in ``[0, 1]`` (optional in the paper: 0 means
    none). ``view`` is the user's view of the grid (section 2.1: the auctioneer asks only
    those providers), an iterable of provider indices, or ``None`` for all providers.
    """

    description: np.ndarray
    schedule: ValueSchedule
    min_reliability: float = 0.0
    view: tuple[int, ...] | None = None

    def __post_init__(self):
        d = np.asarray(self.description, dtype=np.float64)
        if d.ndim != 1 or not np.all(np.isfinite(d)):
            raise ValueError(f"Bid: description must be a finite 1-d attribute vector, got {d}")
        object.__setattr__(self, "description", d)
        if not (0.0 <= self.min_reliability <= 1.0):
            raise ValueError(f"Bid: min_reliability must be in [0, 1], got {self.min_reliability}")
        if not isinstance(self.schedule, ValueSchedule):
            raise ValueError(f"Bid: schedule must be a ValueSchedule, got {type(self.schedule).__name__}")
        if self.view is not None:
            object.__setattr__(self, "view", tuple(int(k) for k in self.view))


@dataclass(frozen=True)
class JobType:
    """A user's private type ``theta_i = (J_i, w_i, a_i, gamma_i)`` (section 2.2)."""

    description: np.ndarray
    schedule: ValueSchedule
    arrival: float
    min_reliability: float = 0.0
    view: tuple[int, ...] | None = None

    def truthful_bid(self) -> Bid:
        return Bid(self.description, self.schedule, self.min_reliability, self.view)


def true_utility(job: JobType, description_run, completion_time: float, price: float, completed: bool,
                 categorical_mask=None) -> float:
    """Realised utility of a job under definition 1 and the rules of section 3.

    The infrastructure runs the *reported* description (``description_run``, rule R4) and
    releases the result at the scheduled completion time; the user pays ``price`` only if
    the job completed by then (R5, R7). Value: ``w_i(tau)`` if the job completed by ``tau``
    and ``description_run >= J_i``, else 0 (definition 1).
    """
    if not completed:
        return 0.0
    ok = bool(dominates(description_run, job.description, categorical_mask))
    value = float(job.schedule.value_at(completion_time)) if ok else 0.0
    return value - price


# ----------------------------------------------------------------------------- columnar bids

KIND_LINEAR = 0
KIND_STEPS = 1


@dataclass(frozen=True, eq=False)
class BidBatch:
    """Many bids as columns (row ``b`` is one bid), for the vectorised auctioneer.

    Schedules are either linear (``kind == 0``: ``v_start, v_end, t0, t_deadline``) or
    piecewise constant (``kind == 1``: ``step_breaks[b, :P+1]`` and ``step_values[b, :P]``,
    padded with ``+inf`` breaks and 0 values). ``view`` is an optional (B, K) boolean mask;
    ``horizon`` an optional (B,) time from which a (truncated) schedule is 0.
    """

    arrival: np.ndarray  # (B,) reported arrival (the infrastructure's timestamp)
    description: np.ndarray  # (B, A)
    min_reliability: np.ndarray  # (B,)
    kind: np.ndarray  # (B,) int8
    v_start: np.ndarray
    v_end: np.ndarray
    t0: np.ndarray
    t_deadline: np.ndarray
    step_breaks: np.ndarray | None = None  # (B, P+1)
    step_values: np.ndarray | None = None  # (B, P)
    view: np.ndarray | None = None  # (B, K) bool
    horizon: np.ndarray | None = None  # (B,) w = 0 from here on (a truncated report); None: +inf
    meta: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.arrival.shape[0])

    # -- construction
    @classmethod
    def linear(cls, arrival, description, v_start, v_end, t_deadline, min_reliability=None, t0=None,
               view=None) -> BidBatch:
        """Linear (or, with ``v_start == v_end``, constant-with-deadline) bids, validated."""
        arrival = np.asarray(arrival, dtype=np.float64)
        n = arrival.shape[0]
        description = np.asarray(description, dtype=np.float64)
        if description.ndim == 1:
            description = description[:, None]

        def column(x) -> np.ndarray:
            return np.broadcast_to(np.asarray(x, dtype=np.float64), (n,)).copy()

        batch = cls(arrival=arrival, description=description, kind=np.zeros(n, np.int8), view=view,
                    v_start=column(v_start), v_end=column(v_end), t_deadline=column(t_deadline),
                    t0=arrival.copy() if t0 is None else column(t0),
                    min_reliability=np.zeros(n) if min_reliability is None else column(min_reliability))
        batch.validate()
        return batch

    @classmethod
    def from_bids(cls, bids: Sequence[Bid], arrival, n_providers: int | None = None) -> BidBatch:
        """Columns from :class:`Bid` objects (linear and step schedules, possibly truncated or scaled)."""
        arrival = np.broadcast_to(np.asarray(arrival, dtype=np.float64), (len(bids),)).copy()
        n = len(bids)
        kind = np.zeros(n, np.int8)
        v_start, v_end, t0, td = np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n)
        steps: list[tuple[np.ndarray, np.ndarray] | None] = []
        horizon = np.full(n, np.inf)
        for b, bid in enumerate(bids):
            base, factor, horizon[b] = _flatten(bid.schedule)
            if isinstance(base, Linear):
                v_start[b], v_end[b], t0[b], td[b] = factor * base.v_start, factor * base.v_end, base.t0, base.t_deadline
                steps.append(None)
            else:
                kind[b] = KIND_STEPS
                t0[b] = td[b] = base.breaks[0]
                steps.append((np.asarray(base.breaks), factor * np.asarray(base.values)))
        sb = sv = None
        if kind.any():
            p = max(len(s[1]) for s in steps if s is not None)
            sb = np.full((n, p + 1), np.inf)
            sv = np.zeros((n, p))
            for b, s in enumerate(steps):
                if s is not None:
                    sb[b, : len(s[0])] = s[0]
                    sv[b, : len(s[1])] = s[1]
        view = None
        if any(bid.view is not None for bid in bids):
            if n_providers is None:
                raise ValueError("BidBatch.from_bids: bids name a view; pass n_providers")
            view = np.zeros((n, n_providers), dtype=bool)
            for b, bid in enumerate(bids):
                if bid.view is None:
                    view[b] = True
                else:
                    idx = np.asarray(bid.view, dtype=np.int64)
                    if idx.size and (idx.min() < 0 or idx.max() >= n_providers):
                        raise ValueError(f"BidBatch.from_bids: bid {b} views provider outside 0..{n_providers - 1}")
                    view[b, idx] = True
        desc = np.stack([bid.description for bid in bids]) if n else np.zeros((0, 0))
        batch = cls(arrival=arrival, description=desc,
                    min_reliability=np.array([bid.min_reliability for bid in bids], dtype=np.float64),
                    kind=kind, v_start=v_start, v_end=v_end, t0=t0, t_deadline=td,
                    step_breaks=sb, step_values=sv, view=view, horizon=horizon)
        batch.validate()
        return batch

    def validate(self) -> None:
        n = len(self)
        for name in ("v_start", "v_end", "t0", "t_deadline", "min_reliability", "kind"):
            arr = getattr(self, name)
            if arr.shape != (n,):
                raise ValueError(f"BidBatch: column {name} has shape {arr.shape}, expected ({n},)")
        if self.description.ndim != 2 or self.description.shape[0] != n:
            raise ValueError(f"BidBatch: description has shape {self.description.shape}, expected ({n}, A)")
        for name in ("arrival", "description", "v_start", "v_end", "t0", "t_deadline"):
            arr = getattr(self, name)
            bad = ~np.isfinite(arr)
            if bad.any():
                i = int(np.argwhere(bad)[0][0])
                raise ValueError(f"BidBatch: {name} of bid {i} is not finite")
        lin = self.kind == KIND_LINEAR
        bad = lin & ((self.v_end < 0) | (self.v_start < self.v_end))
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"BidBatch: bid {i} needs v_start >= v_end >= 0, got {self.v_start[i]}, {self.v_end[i]}")
        bad = lin & (self.t_deadline < self.t0)
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"BidBatch: bid {i} has deadline {self.t_deadline[i]} before t0 {self.t0[i]}")
        bad = (self.min_reliability < 0) | (self.min_reliability > 1) | np.isnan(self.min_reliability)
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"BidBatch: min_reliability of bid {i} is {self.min_reliability[i]}, not in [0, 1]")
        if (self.kind == KIND_STEPS).any():
            if self.step_breaks is None or self.step_values is None:
                raise ValueError("BidBatch: step bids need step_breaks and step_values")

    def take(self, index) -> BidBatch:
        def sub(x):
            return None if x is None else x[index]

        return BidBatch(arrival=self.arrival[index], description=self.description[index],
                        min_reliability=self.min_reliability[index], kind=self.kind[index],
                        v_start=self.v_start[index], v_end=self.v_end[index], t0=self.t0[index],
                        t_deadline=self.t_deadline[index], step_breaks=sub(self.step_breaks),
                        step_values=sub(self.step_values), view=sub(self.view), horizon=sub(self.horizon),
                        meta=self.meta)

    # -- evaluation
    def deadlines(self) -> np.ndarray:
        """``d_b``: latest time with positive value (a supremum for half-open pieces), ``-inf`` if none."""
        d = np.where(self.v_start > 0, self.t_deadline, -np.inf)
        if self.step_breaks is not None and self.step_values is not None and (self.kind == KIND_STEPS).any():
            pos = np.asarray(self.step_values > 0)
            last = np.where(pos.any(axis=1), pos.shape[1] - 1 - np.argmax(pos[:, ::-1], axis=1), -1)
            ds = np.where(last >= 0, np.take_along_axis(self.step_breaks, np.maximum(last, 0)[:, None] + 1, 1)[:, 0],
                          -np.inf)
            d = np.where(self.kind == KIND_STEPS, ds, d)
        if self.horizon is not None:
            d = np.minimum(d, self.horizon)
        return d

    def values(self, tau) -> np.ndarray:
        """``w_b(tau[b, ...])``: the value of bid ``b`` at the times in row ``b`` of ``tau``.

        ``tau`` has shape (B,) or (B, ...). Non-increasing schedules, evaluated exactly as the
        scalar classes (:class:`Linear`, :class:`Steps`).
        """
        tau = np.asarray(tau, dtype=np.float64)
        extra = (None,) * (tau.ndim - 1)
        sl = (slice(None),) + extra
        vs, ve, t0, td = self.v_start[sl], self.v_end[sl], self.t0[sl], self.t_deadline[sl]
        span = td - t0
        with np.errstate(divide="ignore", invalid="ignore"):
            frac = np.where(span > 0, np.clip((td - tau) / np.where(span > 0, span, 1.0), 0.0, 1.0), 1.0)
        w = np.where(tau <= td, ve + (vs - ve) * frac, 0.0)
        if self.step_breaks is not None and (self.kind == KIND_STEPS).any():
            sb = self.step_breaks
            sv = np.concatenate([self.step_values, np.zeros((len(self), 1))], axis=1)
            # index of the piece: number of breaks <= tau, minus one (clipped to piece 0)
            cnt = (sb.reshape(sb.shape[:1] + (1,) * (tau.ndim - 1) + sb.shape[1:]) <= tau[..., None]).sum(-1)
            idx = np.clip(cnt - 1, 0, sv.shape[1] - 1)
            ws = np.take_along_axis(sv.reshape(sv.shape[:1] + (1,) * (tau.ndim - 1) + sv.shape[1:]),
                                    idx[..., None], axis=-1)[..., 0]
            w = np.where((self.kind == KIND_STEPS)[sl], ws, w)
        if self.horizon is not None:
            w = np.where(tau < self.horizon[sl], w, 0.0)
        return w


def _flatten(s: ValueSchedule):
    """(base schedule, value factor, horizon) of a possibly scaled and truncated schedule."""
    factor = 1.0
    horizon = np.inf
    while isinstance(s, (Scaled, Truncated)):
        if isinstance(s, Scaled):
            factor *= s.factor
        else:
            horizon = min(horizon, s.horizon)
        s = s.base
    if not isinstance(s, (Linear, Steps)):
        raise ValueError(f"BidBatch: cannot represent schedule {s!r} as columns "
                         "(supported: Linear, ConstantDeadline, Steps, scaled or truncated)")
    return s, factor, horizon
