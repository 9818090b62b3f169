"""Bidding behaviour: truthful bids, bid shading and the Small Risk-aggressive Group (Shudler et al. 2010).

Source: Shudler, Amar, Barak, Mu'alem, "The Effects of Untruthful Bids on User Utilities and
Stability in Computing Markets", section II.B ("Full-Truthfulness", "Untruthful bids", "Small
Risk-aggressive Group").

A bidding strategy maps true types to reports: the mechanism only ever
sees the bids returned here, utilities use the true values.

* **FT (full truthfulness):** ``bid_i = w_i``.
* **Shading with parameter beta** (``0 <= beta < 1``): the bid is drawn uniformly from
  ``R = [(1 - beta) w_i, w_i]``. Implemented as ``bid_i = w_i (1 - beta U_i)`` with
  ``U_i ~ Uniform[0, 1)`` drawn once per job, so the bid is uniform on ``((1-beta) w_i, w_i]``
  and never above the value.
* **SRG (Small Risk-aggressive Group):** 90% of jobs are risk-conservative (beta = 0.1), 10%
  risk-aggressive (beta = 0.9). The paper offers two ways to split: an exact random partition
  of 10% of all jobs (needs N in advance) or a biased coin per arriving job. Both are here
  (``split="exact"`` or ``"coin"``); **the default is "exact"** (decision: it removes one
  source of run-to-run noise in the size of the aggressive group, which the game's user payoff
  averages over; the paper's bid distributions are the same either way).

Common random numbers: every random quantity of a
bidder -- membership of the aggressive group and the uniform draw ``U_i`` -- is drawn once per
(workload, seed) into a :class:`ShadingDraws`, *before* the mechanism and beta are chosen.
Every cell of an experiment (FT or SRG, any beta, any mechanism or pricing) then maps the same
true values and the same draws to bids, so two cells differ only in what they were meant to
differ in. Steps:

1. ``draws = draw_shading(workload_or_n, seed)`` (group first, then ``U``, from two
   independent child streams of ``SeedSequence(seed)`` tagged for bidding, so the value draw
   ``default_rng(seed)`` and the split mode never shift ``U``);
2. ``bids = make_bids(behaviour, true_value, draws, beta)`` for each cell.

Decisions:

* **Copies of a split parallel job** (the paper serialises parallel jobs but does not say this) share their job's group and
  ``U``, as they share its value (``per_job`` in :mod:`marketsched.workloads.values`): a job is
  one user with one strategy. Draws are made per original job and expanded through
  ``workload.meta["parent"]``; the exact 10% partition is therefore of original jobs.
  ``share_copies=False`` draws per serial row instead.
* **Negative true values** cannot be shaded downwards from a non-positive value in a
  meaningful way (``w (1 - beta U) > w`` for ``w < 0``), so they raise ``ValueError``; draw
  values with ``negative="resample"`` (the default) or ``"clip"``.
* ``beta`` must satisfy ``0 <= beta < 1`` (the paper's range; beta = 1 would allow a zero
  bid).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: SRG model parameters (Shudler et al. 2010, section II.B).
SRG_P_AGGRESSIVE = 0.1
SRG_BETA_CONSERVATIVE = 0.1
SRG_BETA_AGGRESSIVE = 0.9
#: The "more traditional 80/20 split" section II.B also tried: conservative users shade by up to 20 %.
SRG20_BETA_CONSERVATIVE = 0.2
SPLITS = ("exact", "coin")
BEHAVIOURS = ("ft", "shade", "srg", "srg20")

# Stream tag so bidding draws never collide with the value draw default_rng(seed).
_BIDDING_STREAM = 0x5A4D_0B1D


@dataclass(frozen=True, eq=False)
class ShadingDraws:
    """Per-job random draws of the bidders, fixed before mechanism and beta are chosen.

    ``aggressive[i]``: job ``i`` belongs to the risk-aggressive group (SRG);
    ``u[i]`` in [0, 1): job ``i``'s position in its bid range (``bid = w (1 - beta u)``).
    """

    aggressive: np.ndarray
    u: np.ndarray
    seed: int
    split: str = "exact"
    p_aggressive: float = SRG_P_AGGRESSIVE

    def __post_init__(self):
        a = np.asarray(self.aggressive)
        u = np.asarray(self.u)
        if a.dtype != bool or a.ndim != 1:
            raise ValueError(f"ShadingDraws.aggressive must be a 1-d bool array, got {a.dtype} shape {a.shape}")
        if u.shape != a.shape:
            raise ValueError(f"ShadingDraws.u has shape {u.shape}, aggressive has {a.shape}")
        if u.size and not ((u >= 0).all() and (u < 1).all()):
            i = int(np.argmax((u < 0) | (u >= 1) | np.isnan(u)))
            raise ValueError(f"ShadingDraws.u[{i}] = {u[i]!r} is outside [0, 1)")

    def __len__(self) -> int:
        return int(self.aggressive.shape[0])


def _check_beta(beta: float, what: str = "beta") -> float:
    beta = float(beta)
    if not (0.0 <= beta < 1.0):
        raise ValueError(f"{what} = {beta!r} is outside [0, 1) "
                         "(Shudler et al. 2010, section II.B: bid range [(1-beta)w, w])")
    return beta


def _check_values(true_value, n: int | None = None) -> np.ndarray:
    w = np.asarray(true_value, dtype=np.float64)
    if w.ndim != 1:
        raise ValueError(f"true values must be a 1-d array, got shape {w.shape}")
    if n is not None and w.shape[0] != n:
        raise ValueError(f"{w.shape[0]} true values for {n} draws")
    bad = ~np.isfinite(w) | (w < 0)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(
            f"true value of job row {i} is {w[i]!r}: values must be finite and >= 0 to be shaded "
            "(draw them with negative='resample' or 'clip')"
        )
    return w


def draw_shading(jobs, seed: int, p_aggressive: float = SRG_P_AGGRESSIVE, split: str = "exact",
                 share_copies: bool = True) -> ShadingDraws:
    """Draw group membership and ``U`` once per (workload, seed) (common random numbers).

    ``jobs`` is a :class:`~marketsched.workloads.workload.Workload` or a job count. With a
    workload whose ``meta["parent"]`` maps serial rows to original jobs (after
    ``split_parallel``) and ``share_copies=True``, copies share their job's draws.

    Steps: (1) ``SeedSequence([seed, tag]).spawn(2)`` gives a group stream and a ``U`` stream;
    (2) group: ``exact`` picks ``round(p * N)`` jobs uniformly without replacement, ``coin``
    flips a ``Bernoulli(p)`` coin per job in submission order; (3) ``U_i ~ Uniform[0, 1)``;
    (4) expand to serial rows through ``parent``.
    """
    if split not in SPLITS:
        raise ValueError(f"draw_shading: split must be one of {SPLITS}, got {split!r}")
    p = float(p_aggressive)
    if not (0.0 <= p <= 1.0):
        raise ValueError(f"draw_shading: p_aggressive = {p!r} is outside [0, 1]")
    parent = None
    if isinstance(jobs, (int, np.integer)):
        n_rows = int(jobs)
        if n_rows < 0:
            raise ValueError(f"draw_shading: job count {n_rows} is negative")
    else:
        n_rows = len(jobs)
        meta = getattr(jobs, "meta", None) or {}
        if share_copies and meta.get("parent") is not None:
            parent = np.asarray(meta["parent"], dtype=np.int64)
            if parent.shape != (n_rows,):
                raise ValueError(f"draw_shading: workload meta['parent'] has shape {parent.shape}, expected ({n_rows},)")
    n = int(parent.max()) + 1 if parent is not None and n_rows else n_rows
    group_ss, u_ss = np.random.SeedSequence([int(seed), _BIDDING_STREAM]).spawn(2)
    g_rng, u_rng = np.random.default_rng(group_ss), np.random.default_rng(u_ss)
    if split == "exact":
        aggressive = np.zeros(n, dtype=bool)
        aggressive[g_rng.choice(n, size=int(round(p * n)), replace=False)] = True
    else:
        aggressive = g_rng.random(n) < p
    u = u_rng.random(n)
    if parent is not None:
        aggressive, u = aggressive[parent], u[parent]
    return ShadingDraws(aggressive=aggressive, u=u, seed=int(seed), split=split, p_aggressive=p)


def truthful(true_value) -> np.ndarray:
    """FT: report the true value (Shudler et al. 2010, section II.B)."""
    return _check_values(true_value).copy()


def shade(true_value, u, beta) -> np.ndarray:
    """Shaded bids ``w (1 - beta u)``; ``beta`` a scalar or one per job, ``u`` in [0, 1)."""
    w = _check_values(true_value)
    u = np.asarray(u, dtype=np.float64)
    if u.shape != w.shape:
        raise ValueError(f"shade: {u.shape[0] if u.ndim else u} draws for {w.shape[0]} values")
    b = np.asarray(beta, dtype=np.float64)
    if b.ndim == 0:
        _check_beta(float(b))
    else:
        if b.shape != w.shape:
            raise ValueError(f"shade: beta has shape {b.shape}, values {w.shape}")
        bad = ~((b >= 0) & (b < 1))
        if bad.any():
            i = int(np.argmax(bad))
            _check_beta(b[i], f"beta of job row {i}")
    bid = w * (1.0 - b * u)
    return np.minimum(bid, w)  # exact guard against rounding: a bid is never above its value


def srg_bids(true_value, draws: ShadingDraws, beta_conservative: float = SRG_BETA_CONSERVATIVE,
             beta_aggressive: float = SRG_BETA_AGGRESSIVE) -> np.ndarray:
    """SRG bids: aggressive jobs shade with ``beta_aggressive``, the others with ``beta_conservative``.

    Section V varies ``beta_aggressive`` over {5, 25, 50, 60, 70, 80, 90}% with the
    conservative users at 10% (section V does not restate it; we keep the SRG model's 10%).
    """
    w = _check_values(true_value, len(draws))
    beta = np.where(draws.aggressive, _check_beta(beta_aggressive, "beta_aggressive"),
                    _check_beta(beta_conservative, "beta_conservative"))
    return shade(w, draws.u, beta)


def make_bids(behaviour: str, true_value, draws: ShadingDraws, beta: float = SRG_BETA_AGGRESSIVE,
              beta_conservative: float = SRG_BETA_CONSERVATIVE) -> np.ndarray:
    """Bids for one experiment cell.

    ``"ft"``: truthful (``beta`` ignored); ``"shade"``: every job shades with ``beta``;
    ``"srg"``: the SRG model with aggressive ``beta`` and conservative ``beta_conservative``;
    ``"srg20"``: the same groups with the conservative users at ``SRG20_BETA_CONSERVATIVE`` (20 %;
    with ``beta = 0.8`` the 80/20 split of section II.B).
    """
    if behaviour == "ft":
        return truthful(true_value)
    if behaviour == "shade":
        return shade(_check_values(true_value, len(draws)), draws.u, beta)
    if behaviour == "srg":
        return srg_bids(true_value, draws, beta_conservative, beta)
    if behaviour == "srg20":
        return srg_bids(true_value, draws, SRG20_BETA_CONSERVATIVE, beta)
    raise ValueError(f"unknown bidding behaviour {behaviour!r}; choose one of {', '.join(BEHAVIOURS)}")
