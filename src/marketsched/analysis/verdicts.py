"""How a reproduction's figure is compared with a paper's claim: one rule for every report.

Every reproduction report (``docs/reproductions/*/report.md``) lists each quantitative claim of
its paper with our figure and a verdict computed here, so the rule is stated once and is the
same for every paper. ``docs/reproductions/README.md`` ("How verdicts are decided") prints
:func:`rule_markdown`, generated from the constants below; a test keeps the two equal.

**Intervals** (95%, :data:`CONFIDENCE`) on every figure we compare:

* :func:`t_interval`: mean over independent runs (seeds, books, groups) +- Student-t quantile
  x standard error. One run has no interval (``lo = hi``, ``n = 1``, shown as "1 run").
* :func:`paired_interval`: the t-interval of the differences of paired runs (common random
  numbers); :func:`relative_paired_interval`: the same divided by ``|mean of the reference|``.
* :func:`bootstrap_interval`: percentile bootstrap with :data:`BOOTSTRAP_RESAMPLES` resamples
  and the fixed seed :data:`BOOTSTRAP_SEED`, for statistics that are not a mean of runs
  (ratios of means, shares of pairs).
* :func:`wilson_interval`: a count out of ``n`` (Wilson score interval).
* :func:`exact`: a computed, not sampled, figure (worked examples, closed forms): ``lo = hi``;
  :func:`numerical`: one computed by a numerical method, +- its tolerance.

**Claims** are regions of the real line:

* a *printed number* (:func:`value`) is the paper's value +- half a unit of its last printed
  digit (``"1.07"``: [1.065, 1.075]); the paper's figure is the string as printed;
* a *bound* (:func:`bound`): ``>= 0.90`` is [0.90 - half unit, inf);
* an *ordering* (:func:`ordering`): "A above B" is a paired difference A - B in (0, inf);
* a *verbal claim* (:func:`verbal`): a phrase of :data:`VERBAL`, the table of tolerances fixed
  before the runs ("about 50%" is 50 +- 5% of 50; "almost the same" is a relative difference
  within +-5%; "slightly higher" is a relative difference in (0, 10%]);
* a *category* (:func:`category_verdict`): an equilibrium, a significance level, a best cell.

**Verdicts** (:func:`judge`), with ``I`` our interval and ``R`` the claim's region:

* a printed number is a *match* when ``I`` overlaps ``R`` (the paper's value lies in our
  interval, or within its printed precision of it); every other claim (bound, ordering,
  verbal) is a *match* only when ``I`` lies inside ``R``: the claim is established by our
  interval, not merely compatible with it (an ordering is confirmed only if the interval of the
  paired difference excludes 0);
* *near* when it is not a match but ``I`` overlaps ``R`` widened by :data:`NEAR` (5%) of the
  magnitude of each finite end: close to the paper, or compatible with a claim we cannot
  establish;
* *differs* otherwise;
* *not attempted* when we have no figure (not run, or no counterpart).

A category is a *match* when ours equals the paper's, *near* when both lie on an ordered scale
(significance stars; the beta grid of an equilibrium with the same algorithm) one step apart,
*differs* otherwise. A claim made of several parts (a floor "for every m") takes the worst
verdict of its parts, in the order differs, near, not attempted, match (:func:`worst`).

Comparisons we add ourselves (paired variants, sensitivity runs) are listed apart as ours and
never counted with the paper's claims (:class:`Claims` with ``ours=True``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

CONFIDENCE = 0.95
NEAR = 0.05
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20240519

MATCH, NEAR_V, DIFFERS, NOT_ATTEMPTED = "match", "near", "differs", "not attempted"
VERDICTS = (MATCH, NEAR_V, DIFFERS, NOT_ATTEMPTED)
_SEVERITY = {MATCH: 0, NOT_ATTEMPTED: 1, NEAR_V: 2, DIFFERS: 3}

# The tolerances of the papers' verbal claims, fixed before the runs and the same for every
# report. kind "value": a region around the stated figure (relative half-width); kind
# "relative": a region of the relative difference (A - B) / |B|; kind "share": a region of a
# proportion.
VERBAL: dict[str, tuple[str, float, float, str]] = {
    "about": ("value", -0.05, 0.05, "the stated figure +- 5% of it (\"about\", \"approximately\", \"~\")"),
    "the same": ("relative", -0.02, 0.02, "relative difference within +-2% (\"the same\", \"equal\")"),
    "almost the same": ("relative", -0.05, 0.05,
                        "relative difference within +-5% (\"almost the same\", \"almost no difference\", "
                        "\"close\", \"coincides\", \"nearly identical\", \"comparable\")"),
    "slightly higher": ("relative", 0.0, 0.10, "relative difference in (0, +10%] (\"slightly higher/better\")"),
    "slightly lower": ("relative", -0.10, 0.0, "relative difference in [-10%, 0) (\"slightly lower/worse\")"),
    "higher": ("relative", 0.0, math.inf, "relative difference > 0 (\"higher\", \"better\", \"more\", \"above\")"),
    "lower": ("relative", -math.inf, 0.0, "relative difference < 0 (\"lower\", \"worse\", \"less\", \"below\")"),
    "almost always": ("share", 0.90, 1.0, "a share of cases >= 90%"),
    "usually": ("share", 0.50, 1.0, "a share of cases > 50% (\"usually\", \"most\")"),
}
_OPEN_ZERO = {"slightly higher", "slightly lower", "higher", "lower", "usually"}  # strict at 0 / 50%


# ------------------------------------------------------------------------------ intervals
@dataclass(frozen=True)
class Interval:
    """Our figure: an estimate with its 95% interval ``[lo, hi]`` from ``n`` runs (``method``)."""

    estimate: float
    lo: float
    hi: float
    n: int = 1
    method: str = "exact"

    def __post_init__(self):
        if not (self.lo <= self.estimate <= self.hi) and not any(map(math.isnan, (self.lo, self.hi, self.estimate))):
            raise ValueError(f"Interval: estimate {self.estimate} outside [{self.lo}, {self.hi}]")

    @property
    def has_spread(self) -> bool:
        return self.method != "exact" and self.n > 1

    def scaled(self, factor: float) -> Interval:
        a, b = self.lo * factor, self.hi * factor
        return Interval(self.estimate * factor, min(a, b), max(a, b), self.n, self.method)

    def text(self, fmt: str = ".3g", unit: str = "") -> str:
        """``"0.912 [0.905, 0.919]"`` (95% interval), or the bare figure when there is none."""
        e = f"{format(self.estimate, fmt)}{unit}"
        if self.method == "exact":
            return e
        if self.method == "numerical":
            return f"{e} (+-{self.hi - self.estimate:.1g}, numerical)"
        if self.n <= 1:
            return f"{e} (1 run)"
        if self.lo == self.hi and self.method == "fit":
            return f"{e} (no interval: {self.n} points)"
        return f"{e} [{format(self.lo, fmt)}, {format(self.hi, fmt)}]{unit}"


def exact(x: float) -> Interval:
    """A computed figure (no sampling)."""
    x = float(x)
    return Interval(x, x, x, 1, "exact")


def numerical(x: float, tol: float) -> Interval:
    """A figure computed by a numerical method accurate to ``tol`` (a minimiser, a root finder)."""
    x, tol = float(x), abs(float(tol))
    return Interval(x, x - tol, x + tol, 1, "numerical")


def t_interval(samples: Iterable[float], confidence: float = CONFIDENCE) -> Interval:
    """Mean of independent runs +- t quantile x standard error (one run: no interval)."""
    from scipy import stats

    x = np.asarray(list(samples) if not isinstance(samples, np.ndarray) else samples, dtype=float)
    if x.size == 0:
        raise ValueError("t_interval: no samples")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"t_interval: non-finite sample among {x.size}")
    m = float(x.mean())
    if x.size == 1:
        return Interval(m, m, m, 1, "t")
    half = float(stats.t.ppf(0.5 + confidence / 2, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size))
    return Interval(m, m - half, m + half, int(x.size), "t")


def paired_interval(a: Iterable[float], b: Iterable[float], confidence: float = CONFIDENCE) -> Interval:
    """t-interval of the paired differences ``a - b`` (same seeds / books / groups)."""
    a, b = np.asarray(list(a), dtype=float), np.asarray(list(b), dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"paired_interval: {a.size} runs against {b.size}; pairs need equal lengths")
    return t_interval(a - b, confidence)


def relative_paired_interval(a: Iterable[float], b: Iterable[float], confidence: float = CONFIDENCE) -> Interval:
    """(mean of a - b) / |mean of b|, with the t-interval of the paired differences scaled alike."""
    return _relative(paired_interval, a, b, confidence)


def _relative(difference: Callable[..., Interval], a: Iterable[float], b: Iterable[float],
              confidence: float) -> Interval:
    """``difference(a, b)`` divided by ``|mean(b)|`` (an error if that mean is 0)."""
    b = np.asarray(list(b), dtype=float)
    ref = abs(float(b.mean()))
    if ref == 0:
        raise ValueError(f"relative {difference.__name__}: the reference mean is 0")
    return difference(a, b, confidence).scaled(1 / ref)


def welch_interval(a: Iterable[float], b: Iterable[float], confidence: float = CONFIDENCE) -> Interval:
    """Difference of the means of two independent samples, ``mean(a) - mean(b)``, with Welch's t-interval."""
    from scipy import stats

    a, b = np.asarray(list(a), dtype=float), np.asarray(list(b), dtype=float)
    if a.size == 0 or b.size == 0:
        raise ValueError("welch_interval: an empty sample")
    d = float(a.mean() - b.mean())
    if a.size < 2 or b.size < 2:
        return Interval(d, d, d, 1, "welch")
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    se = math.sqrt(va + vb)
    if se == 0:
        return Interval(d, d, d, int(min(a.size, b.size)), "welch")
    den = va * va / (a.size - 1) + vb * vb / (b.size - 1)
    df = (va + vb) ** 2 / den if den > 0 else a.size + b.size - 2  # den underflows for tiny variances
    half = float(stats.t.ppf(0.5 + confidence / 2, df) * se)
    return Interval(d, d - half, d + half, int(min(a.size, b.size)), "welch")


def relative_welch_interval(a: Iterable[float], b: Iterable[float], confidence: float = CONFIDENCE) -> Interval:
    """(mean(a) - mean(b)) / |mean(b)| for independent samples (Welch's interval scaled alike)."""
    return _relative(welch_interval, a, b, confidence)


def bootstrap_interval(statistic: Callable[..., float], *samples: Any, confidence: float = CONFIDENCE,
                       resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED) -> Interval:
    """Percentile bootstrap of ``statistic(*samples)``; the samples are paired rows, resampled together."""
    arrays = [np.asarray(s, dtype=float) for s in samples]
    if not arrays or arrays[0].size == 0:
        raise ValueError("bootstrap_interval: no samples")
    n = arrays[0].shape[0]
    if any(a.shape[0] != n for a in arrays):
        raise ValueError("bootstrap_interval: paired samples need equal lengths")
    est = float(statistic(*arrays))
    if n == 1:
        return Interval(est, est, est, 1, "bootstrap")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(resamples, n))
    stats_ = np.array([statistic(*(a[i] for a in arrays)) for i in idx], dtype=float)
    stats_ = stats_[np.isfinite(stats_)]
    alpha = (1 - confidence) / 2
    lo, hi = (float(v) for v in np.quantile(stats_, [alpha, 1 - alpha]))
    return Interval(est, min(lo, est), max(hi, est), n, "bootstrap")


def wilson_interval(k: int, n: int, confidence: float = CONFIDENCE) -> Interval:
    """A count ``k`` of ``n`` cases as a proportion with its Wilson score interval."""
    from scipy import stats

    if n <= 0 or not (0 <= k <= n):
        raise ValueError(f"wilson_interval: need 0 <= k <= n and n > 0, got k={k}, n={n}")
    z = float(stats.norm.ppf(0.5 + confidence / 2))
    p = k / n
    den = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return Interval(p, max(0.0, min(p, centre - half)), min(1.0, max(p, centre + half)), n, "wilson")


# ------------------------------------------------------------------------------ claims
@dataclass(frozen=True)
class Region:
    """The set of figures a claim allows. ``contain``: the claim is matched only by an interval
    inside it (bounds, orderings, verbal claims); otherwise by one overlapping it (a printed number)."""

    lo: float
    hi: float
    contain: bool
    lo_open: bool = False
    hi_open: bool = False

    def __post_init__(self):
        if math.isnan(self.lo) or math.isnan(self.hi) or self.lo > self.hi:
            raise ValueError(f"Region: bad ends [{self.lo}, {self.hi}]")
        if self.lo == self.hi and (self.lo_open or self.hi_open):
            raise ValueError(f"Region: an open end makes [{self.lo}, {self.hi}] empty")

    def widened(self, frac: float = NEAR) -> Region:
        lo = self.lo - frac * abs(self.lo) if math.isfinite(self.lo) else self.lo
        hi = self.hi + frac * abs(self.hi) if math.isfinite(self.hi) else self.hi
        return Region(lo, hi, self.contain, self.lo_open, self.hi_open)

    def _above_lo(self, x: float) -> bool:
        return x > self.lo if self.lo_open else x >= self.lo

    def _below_hi(self, x: float) -> bool:
        return x < self.hi if self.hi_open else x <= self.hi

    def contains(self, iv: Interval) -> bool:
        return self._above_lo(iv.lo) and self._below_hi(iv.hi)

    def overlaps(self, iv: Interval) -> bool:
        return self._below_hi(iv.lo) and self._above_lo(iv.hi)


def printed_half_unit(printed: str) -> float:
    """Half a unit of the last printed digit: ``"0.967"`` -> 0.0005, ``"219,704"`` -> 0.5, ``"50%"`` -> 0.5."""
    s = str(printed).strip().replace(",", "").replace("%", "").replace("\u2212", "-")
    m = re.fullmatch(r"[+-]?(\d*)(?:\.(\d*))?(?:[eE]([+-]?\d+))?", s)
    if not m or not (m.group(1) or m.group(2)):
        raise ValueError(f"printed_half_unit: {printed!r} is not a printed number")
    decimals = len(m.group(2) or "")
    exp = int(m.group(3) or 0)
    return 0.5 * 10.0 ** (exp - decimals)


def printed_value(printed: str) -> float:
    """The number a printed figure shows (``"1.07"`` -> 1.07, ``"50%"`` -> 50, ``"219,704"`` -> 219704)."""
    printed_half_unit(printed)  # validates
    return float(str(printed).strip().replace(",", "").replace("%", "").replace("\u2212", "-"))


def _paper_number(printed, exact: bool) -> tuple[float, float]:
    if exact:  # a theorem's exact figure (3/4, 1/m, 2 sqrt 2 - 2): no rounding to allow for
        return (printed_value(printed) if isinstance(printed, str) else float(printed)), 0.0
    if not isinstance(printed, str):
        raise ValueError(f"give the paper's figure as printed (a string), not {printed!r}, or pass exact=True")
    return printed_value(printed), printed_half_unit(printed)


def value(printed, exact: bool = False) -> Region:
    """A number the paper prints: its value +- half a unit of the last printed digit
    (``exact=True``: an exact figure of a theorem or formula, no rounding)."""
    p, h = _paper_number(printed, exact)
    return Region(p - h, p + h, contain=False)


def bound(op: str, printed, exact: bool = False) -> Region:
    """``op`` in ``>=``, ``>``, ``<=``, ``<``: a floor or ceiling the paper states (printed precision applies,
    unless ``exact``)."""
    p, h = _paper_number(printed, exact)
    if op in (">=", ">"):
        return Region(p - h if op == ">=" else p, math.inf, True, lo_open=op == ">")
    if op in ("<=", "<"):
        return Region(-math.inf, p + h if op == "<=" else p, True, hi_open=op == "<")
    raise ValueError(f"bound: unknown operator {op!r}; use >=, >, <= or <")


def ordering(direction: str = ">") -> Region:
    """A claimed ordering, judged on the interval of a paired difference A - B: ``>`` (A above B) or ``<``."""
    if direction == ">":
        return Region(0.0, math.inf, True, lo_open=True)
    if direction == "<":
        return Region(-math.inf, 0.0, True, hi_open=True)
    raise ValueError(f"ordering: direction must be '>' or '<', got {direction!r}")


def verbal(phrase: str, stated: float | None = None) -> Region:
    """The region of a verbal claim from :data:`VERBAL`. ``stated``: the figure of an "about X" claim.

    "relative" phrases are judged on a relative difference (A - B) / |B|, "share" phrases on a
    proportion, "about X" on the figure itself (an overlap test, like a printed number).
    """
    if phrase not in VERBAL:
        raise ValueError(f"verbal: unknown phrase {phrase!r}; the table has {', '.join(VERBAL)}")
    kind, lo, hi, _ = VERBAL[phrase]
    if kind == "value":
        if stated is None:
            raise ValueError(f"verbal: {phrase!r} needs the stated figure")
        a, b = sorted((stated * (1 + lo), stated * (1 + hi)))
        return Region(a, b, contain=False)
    if stated is not None:
        raise ValueError(f"verbal: {phrase!r} takes no stated figure")
    strict = phrase in _OPEN_ZERO
    return Region(lo, hi, True, lo_open=strict and lo >= 0, hi_open=strict and hi <= 0)


def judge(region: Region, iv: Interval | None) -> str:
    """The verdict of one claim (``region``) against our figure (``iv``; None: not attempted)."""
    if iv is None or any(math.isnan(x) for x in (iv.lo, iv.hi, iv.estimate)):
        return NOT_ATTEMPTED
    if region.contains(iv) if region.contain else region.overlaps(iv):
        return MATCH
    return NEAR_V if region.widened().overlaps(iv) else DIFFERS


def category_verdict(paper, ours, scale: Sequence | None = None) -> str:
    """Equal: match; one step apart on the ordered ``scale`` (if given): near; else differs."""
    if ours is None:
        return NOT_ATTEMPTED
    if ours == paper:
        return MATCH
    if scale is not None and paper in scale and ours in scale:
        if abs(list(scale).index(paper) - list(scale).index(ours)) == 1:
            return NEAR_V
    return DIFFERS


def worst(verdicts: Iterable[str]) -> str:
    """The verdict of a claim made of parts: differs, then near, then not attempted, then match."""
    vs = list(verdicts)
    if not vs:
        return NOT_ATTEMPTED
    for v in vs:
        if v not in _SEVERITY:
            raise ValueError(f"worst: unknown verdict {v!r}")
    return max(vs, key=_SEVERITY.__getitem__)


STARS = ("", "*", "**", "***")


def stars(p: float) -> str:
    """Significance marks as the papers print them: * p < 0.1, ** p < 0.05, *** p < 0.01."""
    return "***" if p < 0.01 else "**" if p < 0.05 else "*" if p < 0.1 else ""


# ------------------------------------------------------------------------------ claim lists
@dataclass
class Claim:
    where: str
    claim: str
    paper: str
    ours: str
    verdict: str
    note: str = ""

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"Claim {self.where!r}: unknown verdict {self.verdict!r}")


@dataclass
class Claims:
    """A report's list of claims; ``ours=True``: comparisons we added, listed apart and never counted."""

    title: str = "The paper's claims"
    ours: bool = False
    rows: list[Claim] = field(default_factory=list)

    def add(self, where: str, claim: str, paper: str, ours: str, verdict: str, note: str = "") -> str:
        self.rows.append(Claim(where, claim, paper, ours, verdict, note))
        return verdict

    def check(self, where: str, claim: str, paper: str, region: Region, iv: Interval | None, fmt: str = ".3g",
              unit: str = "", note: str = "") -> str:
        """Judge ``iv`` against ``region`` and add the row (our figure printed with its interval)."""
        return self.add(where, claim, paper, iv.text(fmt, unit) if iv is not None else "-", judge(region, iv), note)

    def not_attempted(self, where: str, claim: str, paper: str, why: str) -> str:
        return self.add(where, claim, paper, "-", NOT_ATTEMPTED, why)

    def counts(self) -> dict[str, int]:
        return {v: sum(r.verdict == v for r in self.rows) for v in VERDICTS}

    def frame(self):
        import pandas as pd

        return pd.DataFrame([vars(r) for r in self.rows], columns=["where", "claim", "paper", "ours", "verdict", "note"])


def counts_text(counts: dict[str, int]) -> str:
    n = sum(counts.values())
    return (f"{n} claims: {counts.get(MATCH, 0)} match, {counts.get(NEAR_V, 0)} near, "
            f"{counts.get(DIFFERS, 0)} differ, {counts.get(NOT_ATTEMPTED, 0)} not attempted")


def rule_markdown() -> str:
    """The rule as printed in ``docs/reproductions/README.md`` (generated, so it cannot drift)."""
    lines = [
        f"* **Intervals.** Every figure we compare carries a {CONFIDENCE:.0%} interval: a Student-t interval "
        "over independent runs (seeds, books, random groups), the t-interval of paired differences where the "
        f"runs are paired (common random numbers), a percentile bootstrap ({BOOTSTRAP_RESAMPLES} resamples, "
        f"seed {BOOTSTRAP_SEED}) for ratios and shares, a Wilson interval for counts, the least-squares interval "
        "for a fitted slope, +- the tolerance of a numerical method, none for exact computations. A figure from "
        "one run is marked \"(1 run)\" and is judged as a point.",
        "* **Printed numbers.** *match* when our interval overlaps the paper's value +- half a unit of its last "
        "printed digit (\"1.07\" is [1.065, 1.075]).",
        "* **Bounds, orderings, verbal claims.** *match* only when our whole interval lies inside the claimed "
        "region: \">= 0.90\" needs the lower end >= 0.895; \"A above B\" needs the interval of the paired "
        "difference A - B above 0.",
        f"* **near**: not a match, but our interval overlaps the claimed region widened by {NEAR:.0%} of the "
        "magnitude of each finite end (a printed 1.07 widens to [1.012, 1.129]; an ordering, whose end is 0, "
        "is near when the interval straddles 0). **differs**: neither. **not attempted**: we have no figure.",
        "* **Categories** (equilibria, significance stars, a best cell): *match* when equal, *near* when one "
        "step apart on an ordered scale (*, **, ***; the beta grid with the same algorithm), *differs* otherwise.",
        "* **Claims with parts** (\"for every m\") take the worst verdict of their parts: differs, near, "
        "not attempted, match.",
        "* **Our own comparisons** (paired variants, sensitivity runs) are listed apart and never counted.",
        "",
        "Tolerances of the papers' verbal claims (fixed before the runs, the same for every report):",
        "",
        "| phrase | judged on | region |",
        "|---|---|---|",
    ]
    judged = {"value": "the figure", "relative": "(A - B) / |B|, paired", "share": "a share of cases"}
    for phrase, (kind, _, _, desc) in VERBAL.items():
        lines.append(f"| {phrase} | {judged[kind]} | {desc} |")
    return "\n".join(lines)
