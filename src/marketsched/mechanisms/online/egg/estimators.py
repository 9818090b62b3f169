"""Resource estimators restricted to verifiable monotone models (Kang & Parkes 2007, section 2.3).

Provider ``k``'s estimator maps a job description to an ``L``-vector of resource
requirements, ``Q = R_k^t(J)`` (run time, memory, disk, ...). The infrastructure holds the
model and evaluates it itself, so a provider cannot look at the bid before estimating
(rule R3, step 1b of the protocol). Two rules constrain the models:

* **Definition 4 (description monotonicity):** ``R(J') >= R(J)`` componentwise whenever
  ``J' >= J``;
* **Definition 5 (time monotonicity):** ``R^{t'}(J) >= R^t(J)`` for ``t < t' < t + Delta``
  while the provider stays active. A model that lowers any estimate may only be installed
  after an **inactive period of at least Delta**.

Model classes (decision: only models whose monotonicity the
infrastructure can *verify structurally*, never by sampling):

* :class:`LinearEstimator`: ``Q = b + W x`` with ``b >= 0`` and ``W >= 0`` on ordered
  attributes, ``W = 0`` on categorical ones. With the product order on descriptions (and
  ordered attributes ``>= 0``), ``W >= 0`` is exactly description monotonicity; a new model
  dominates an old one everywhere iff ``b' >= b`` and ``W' >= W`` (sufficient; also necessary
  on the non-negative orthant, which is the description domain).
* :class:`GroupedLinearEstimator`: one linear model per value of a categorical attribute
  (e.g. per user or per executable, a lookup of linear models) and a default model for
  values not listed. Descriptions comparable in the product order have the same group, so
  per-group monotonicity is description monotonicity. Domination is checked group by group
  (every group of either model, plus the defaults).

:class:`EstimatorStore` is the infrastructure's registry: it verifies every installation,
starts the inactive period a lowering model requires, and returns all providers' estimates
for a batch of descriptions at a time ``t``.

Decisions: a model that does not dominate the current one is refused unless the provider
accepts the inactive period (``allow_inactive=True``): it then becomes inactive on
``[t, t + Delta)`` and the new model takes effect at ``t + Delta`` (decision 10). Inactive
providers produce no estimates and are not asked in auctions (decision 9, see
``docs/egg.md`` for the arrival manipulation this leaves open and why).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, cast

import numpy as np


class EstimatorUpdateError(ValueError):
    """An estimator installation that breaks definition 4 or 5."""


def _check_x(x, n_attr: int, where: str) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 1:
        x = x[None, :]
    if x.ndim != 2 or x.shape[1] != n_attr:
        raise ValueError(f"{where}: descriptions must have shape (n, {n_attr}), got {x.shape}")
    if not np.isfinite(x).all():
        raise ValueError(f"{where}: descriptions must be finite")
    return x


@dataclass(frozen=True, eq=False)
class LinearEstimator:
    """``Q = intercept + weights @ x`` (``weights`` is ``(L, A)``), verified monotone.

    ``categorical`` marks attributes compared for equality in the product order: their
    weights must be 0. Ordered attributes must be ``>= 0`` in every description evaluated.
    """

    intercept: np.ndarray
    weights: np.ndarray
    categorical: np.ndarray | None = None

    def __post_init__(self):
        b = np.asarray(self.intercept, dtype=np.float64).reshape(-1)
        W = np.asarray(self.weights, dtype=np.float64)
        if W.ndim == 1:
            W = W[None, :]
        if W.ndim != 2 or W.shape[0] != b.shape[0]:
            raise ValueError(f"LinearEstimator: weights must be (L, A) with L = len(intercept) = {b.shape[0]}, got {W.shape}")
        cat = np.zeros(W.shape[1], bool) if self.categorical is None else np.asarray(self.categorical, bool)
        if cat.shape != (W.shape[1],):
            raise ValueError(f"LinearEstimator: categorical mask must have length {W.shape[1]}")
        if not (np.all(np.isfinite(b)) and np.all(np.isfinite(W))):
            raise ValueError("LinearEstimator: intercept and weights must be finite")
        if np.any(b < 0):
            raise EstimatorUpdateError(f"LinearEstimator: intercept {b.tolist()} has a negative entry (estimates must be >= 0)")
        neg = (W < 0) & ~cat[None, :]
        if neg.any():
            l, a = np.argwhere(neg)[0]
            raise EstimatorUpdateError(
                f"LinearEstimator: weight of attribute {a} on resource {l} is {W[l, a]} < 0; definition 4 "
                "(description monotonicity) needs non-negative weights on ordered attributes")
        nz = (W != 0) & cat[None, :]
        if nz.any():
            l, a = np.argwhere(nz)[0]
            raise EstimatorUpdateError(
                f"LinearEstimator: categorical attribute {a} has weight {W[l, a]} on resource {l}; categorical "
                "attributes can only select a model (GroupedLinearEstimator), not scale one")
        object.__setattr__(self, "intercept", b)
        object.__setattr__(self, "weights", W)
        object.__setattr__(self, "categorical", cat)

    @property
    def categorical_mask(self) -> np.ndarray:
        """Boolean (A,) mask of the categorical attributes (``categorical`` as normalised on construction)."""
        return cast(np.ndarray, self.categorical)

    @property
    def n_resources(self) -> int:
        return int(self.intercept.shape[0])

    @property
    def n_attributes(self) -> int:
        return int(self.weights.shape[1])

    def estimate(self, x) -> np.ndarray:
        """(n, L) estimates of (n, A) descriptions."""
        x = _check_x(x, self.n_attributes, "LinearEstimator.estimate")
        if np.any(x[:, ~self.categorical_mask] < 0):
            raise ValueError("LinearEstimator.estimate: ordered attributes must be >= 0")
        return self.intercept[None, :] + x @ self.weights.T

    def dominates(self, other) -> bool:
        """True if ``self(x) >= other(x)`` for every valid description (checked on the parameters)."""
        if isinstance(other, LinearEstimator):
            if other.weights.shape != self.weights.shape:
                return False
            return bool(np.all(self.intercept >= other.intercept) and np.all(self.weights >= other.weights))
        if isinstance(other, GroupedLinearEstimator):
            return all(self.dominates(m) for m in other.all_models())
        return False


@dataclass(frozen=True, eq=False)
class GroupedLinearEstimator:
    """A :class:`LinearEstimator` per value of categorical attribute ``group_attr``, plus a default."""

    group_attr: int
    models: dict[float, LinearEstimator]
    default: LinearEstimator
    _keys: np.ndarray = field(init=False, repr=False)
    _b: np.ndarray = field(init=False, repr=False)
    _w: np.ndarray = field(init=False, repr=False)

    def __post_init__(self):
        if not self.default.categorical_mask[self.group_attr]:
            raise ValueError(f"GroupedLinearEstimator: attribute {self.group_attr} must be categorical")
        models = {float(g): m for g, m in self.models.items()}
        for g, m in models.items():
            if not isinstance(m, LinearEstimator) or m.weights.shape != self.default.weights.shape:
                raise ValueError(f"GroupedLinearEstimator: model of group {g} must be a LinearEstimator "
                                 f"with weights of shape {self.default.weights.shape}")
        object.__setattr__(self, "models", models)
        keys = np.array(sorted(models), dtype=np.float64)
        stack_b = np.stack([models[g].intercept for g in keys] + [self.default.intercept])
        stack_w = np.stack([models[g].weights for g in keys] + [self.default.weights])
        object.__setattr__(self, "_keys", keys)
        object.__setattr__(self, "_b", stack_b)
        object.__setattr__(self, "_w", stack_w)

    @property
    def n_resources(self) -> int:
        return self.default.n_resources

    @property
    def n_attributes(self) -> int:
        return self.default.n_attributes

    def all_models(self) -> list[LinearEstimator]:
        return [*self.models.values(), self.default]

    def model_for(self, g: float) -> LinearEstimator:
        return self.models.get(float(g), self.default)

    def estimate(self, x) -> np.ndarray:
        x = _check_x(x, self.n_attributes, "GroupedLinearEstimator.estimate")
        if np.any(x[:, ~self.default.categorical_mask] < 0):
            raise ValueError("GroupedLinearEstimator.estimate: ordered attributes must be >= 0")
        g = x[:, self.group_attr]
        keys = self._keys
        pos = np.searchsorted(keys, g)
        pos_c = np.minimum(pos, max(len(keys) - 1, 0))
        found = (pos < len(keys)) & (keys[pos_c] == g) if len(keys) else np.zeros(len(g), bool)
        idx = np.where(found, pos_c, len(keys))
        return self._b[idx] + np.einsum("nla,na->nl", self._w[idx], x)

    def dominates(self, other) -> bool:
        if isinstance(other, LinearEstimator):
            return all(m.dominates(other) for m in self.all_models())
        if isinstance(other, GroupedLinearEstimator):
            if other.group_attr != self.group_attr:
                return all(m.dominates(o) for m in self.all_models() for o in other.all_models())
            groups = set(self.models) | set(other.models)
            return (all(self.model_for(g).dominates(other.model_for(g)) for g in groups)
                    and self.default.dominates(other.default))
        return False


# The models as one table for EstimatorStore.estimates: (group attribute or None, group keys,
# intercepts (K, G+1, L), weights (K, G+1, L, A), mask of the ordered attributes).
_Stack = tuple[int | None, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


class EstimatorStore:
    """The infrastructure's estimator registry for ``K`` providers (definitions 4-5).

    Parameters
    ----------
    models:
        The initial model of each provider (verified monotone on construction).
    delta:
        The patience bound ``Delta``: length of the inactive period a lowering model needs.
    runtime_dim:
        Which resource component is the run time (used for the feasibility bound
        ``tau >= a + r``), or ``None`` if no component is (run time 0).
    """

    def __init__(self, models, delta: float, runtime_dim: int | None = 0):
        models = list(models)
        if not models:
            raise ValueError("EstimatorStore: need at least one provider's model")
        for k, m in enumerate(models):
            if not hasattr(m, "estimate") or not hasattr(m, "dominates"):
                raise ValueError(f"EstimatorStore: model of provider {k} is not an estimator")
        L = {m.n_resources for m in models}
        A = {m.n_attributes for m in models}
        if len(L) != 1 or len(A) != 1:
            raise ValueError(f"EstimatorStore: every model needs the same resources and attributes, got L={L}, A={A}")
        self.n_resources = L.pop()
        self.n_attributes = A.pop()
        if runtime_dim is not None and not 0 <= runtime_dim < self.n_resources:
            raise ValueError(f"EstimatorStore: runtime_dim {runtime_dim} is not in 0..{self.n_resources - 1}")
        if not (np.isfinite(delta) and delta >= 0):
            raise ValueError(f"EstimatorStore: delta must be a finite number >= 0, got {delta!r}")
        self.delta = float(delta)
        self.runtime_dim = runtime_dim
        self.models = models
        self.n_providers = len(models)
        self.inactive_until = np.full(self.n_providers, -np.inf)  # inactive on [inactive_from, inactive_until)
        self.inactive_from = np.full(self.n_providers, -np.inf)
        self.pending: dict[int, tuple[float, object]] = {}
        self.installs = 0
        self.refused = 0
        self.now = -np.inf
        self._stack: _Stack | Literal[False] | None = None

    def copy(self) -> EstimatorStore:
        """An independent copy (models are immutable and shared)."""
        out = object.__new__(EstimatorStore)
        out.__dict__.update(self.__dict__)
        out.models = list(self.models)
        out.inactive_until = self.inactive_until.copy()
        out.inactive_from = self.inactive_from.copy()
        out.pending = dict(self.pending)
        return out

    # ------------------------------------------------------------------ installation
    def install(self, k: int, model, at: float, allow_inactive: bool = False) -> float:
        """Install ``model`` for provider ``k`` at time ``at``; return when it takes effect.

        A model dominating the current one (and any pending one) takes effect at once. A
        model that lowers some estimate needs an inactive period of length ``Delta``
        (definition 5): with ``allow_inactive=True`` the provider is inactive on
        ``[at, at + Delta)`` and the model takes effect at ``at + Delta``; otherwise
        :class:`EstimatorUpdateError` is raised and nothing changes.
        """
        self.advance(at)
        if not 0 <= k < self.n_providers:
            raise ValueError(f"EstimatorStore.install: provider {k} is not in 0..{self.n_providers - 1}")
        if model.n_resources != self.n_resources or model.n_attributes != self.n_attributes:
            raise ValueError("EstimatorStore.install: model has the wrong number of resources or attributes")
        current = self.pending[k][1] if k in self.pending else self.models[k]
        if model.dominates(current) and k not in self.pending:
            self.models[k] = model
            self._stack = None
            self.installs += 1
            return float(at)
        if not allow_inactive and k in self.pending:
            self.refused += 1
            raise EstimatorUpdateError(
                f"provider {k} is inactive until {self.pending[k][0]:g} waiting for a model to take effect; "
                "a further model needs a new inactive period (pass allow_inactive=True)")
        if not allow_inactive:
            self.refused += 1
            raise EstimatorUpdateError(
                f"provider {k}: the new model lowers some estimate (it does not dominate the current one); "
                f"definition 5 requires an inactive period of at least Delta = {self.delta:g} "
                "(pass allow_inactive=True)")
        self.inactive_from[k] = at
        self.inactive_until[k] = at + self.delta
        self.pending[k] = (at + self.delta, model)
        self.installs += 1
        return float(at + self.delta)

    def set_inactive(self, k: int, start: float, end: float) -> None:
        """Declare provider ``k`` inactive on ``[start, end)`` (no estimates, not asked)."""
        if not start <= end:
            raise ValueError(f"EstimatorStore.set_inactive: need start <= end, got {start}, {end}")
        if start < self.now:
            raise ValueError(f"EstimatorStore.set_inactive: start {start} is in the past (now {self.now})")
        self.inactive_from[k] = start
        self.inactive_until[k] = end

    def advance(self, t: float) -> None:
        """Move the clock to ``t``; models whose inactive period has ended take effect."""
        if t < self.now:
            raise ValueError(f"EstimatorStore: time {t} is before the store's clock {self.now}")
        self.now = float(t)
        for k in [k for k, (eff, _) in self.pending.items() if eff <= t]:
            self.models[k] = self.pending.pop(k)[1]
            self._stack = None

    def active(self, t: float | None = None) -> np.ndarray:
        """Boolean (K,): providers producing estimates at ``t`` (default: now)."""
        t = self.now if t is None else t
        return ~((self.inactive_from <= t) & (t < self.inactive_until))

    # ------------------------------------------------------------------ estimates
    def estimates(self, x, t: float | None = None) -> np.ndarray:
        """(n, K, L) estimates of every provider for (n, A) descriptions at ``t`` (default now).

        Evaluated by the infrastructure from the stored models (rule R3). Inactive providers'
        rows are filled too (their current model) but the auction excludes them.
        """
        if t is not None:
            self.advance(t)
        x = _check_x(x, self.n_attributes, "EstimatorStore.estimates")
        if self._stack is None:
            self._stack = self._build_stack()
        if self._stack is False:
            return np.stack([m.estimate(x) for m in self.models], axis=1)
        attr, keys, b, W, ordered = self._stack
        if (x[:, ordered] < 0).any():
            raise ValueError("EstimatorStore.estimates: ordered attributes must be >= 0")
        if attr is None:
            return b[None, :, 0] + np.einsum("kla,na->nkl", W[:, 0], x)
        g = x[:, attr]
        pos = np.searchsorted(keys, g)
        pc = np.minimum(pos, max(len(keys) - 1, 0))
        found = (pos < len(keys)) & (keys[pc] == g) if len(keys) else np.zeros(len(g), bool)
        idx = np.where(found, pc, len(keys))  # last row: the default model
        return np.transpose(b[:, idx], (1, 0, 2)) + np.einsum("knla,na->nkl", W[:, idx], x)

    def _build_stack(self) -> _Stack | Literal[False]:
        """All models as one table (providers x groups x resources [x attributes]) for one einsum.

        Possible when every model is linear or grouped on the same attribute; otherwise False
        (each model is evaluated on its own).
        """
        attrs = {m.group_attr for m in self.models if isinstance(m, GroupedLinearEstimator)}
        if not all(isinstance(m, (LinearEstimator, GroupedLinearEstimator)) for m in self.models) or len(attrs) > 1:
            return False
        attr = attrs.pop() if attrs else None
        keys = np.array(sorted({g for m in self.models if isinstance(m, GroupedLinearEstimator) for g in m.models}),
                        dtype=np.float64)

        def rows(m: LinearEstimator | GroupedLinearEstimator) -> list[LinearEstimator]:
            if isinstance(m, GroupedLinearEstimator):
                return [m.model_for(g) for g in keys] + [m.default]
            return [m] * (len(keys) + 1)

        b = np.stack([np.stack([r.intercept for r in rows(m)]) for m in self.models])
        W = np.stack([np.stack([r.weights for r in rows(m)]) for m in self.models])
        first = self.models[0]
        cat = first.categorical_mask if isinstance(first, LinearEstimator) else first.default.categorical_mask
        return attr, keys, b, W, ~cat

    def runtimes(self, Q: np.ndarray) -> np.ndarray:
        """The run-time component of (n, K, L) estimates (zeros if no component is run time)."""
        if self.runtime_dim is None:
            return np.zeros(Q.shape[:-1])
        return Q[..., self.runtime_dim]
