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

**Verdicts** (:func:`judge`, rule v2), with ``I`` our interval, ``e`` our estimate, ``R`` the
claim's region and ``B`` its *near band*, ``R`` widened by :data:`NEAR` (5%) of the magnitude of
each finite end (an end at 0 stays at 0):

* ``I`` is *too wide* when it is wider than ``B`` (a region with an infinite end has no limit:
  it is matched only from inside); a too-wide interval is never a match nor near;
* a printed number is a *match* when ``I`` overlaps ``R`` (the paper's value lies in our
  interval, or within its printed precision of it); every other claim (bound, ordering,
  verbal) is a *match* only when ``I`` lies inside ``R``: the claim is established by our
  interval, not merely compatible with it (an ordering is confirmed only if the interval of the
  paired difference excludes 0);
* *near* when it is not a match, ``I`` is not too wide and ``e`` lies in ``B``: close to the
  paper, or on the claim's side of it when we cannot establish it;
* *inconclusive* when it is neither but ``I`` meets ``R``: our runs neither establish the claim
  nor reject it (too wide, or the estimate points away from the claim);
* *differs* when ``I`` misses ``R``;
* *not refuted* for a claim about all instances checked on random ones (``instances=n``): the
  worst case over them (``e``) lies in ``R``, counted apart from matches; *differs* when it does
  not (a counterexample);
* *not attempted* when we have no figure (not run, or no counterpart).

A category is a *match* when ours equals the paper's, *near* when one step apart on a
:class:`Scale` whose classes state what the levels mean (a truthful level is never near an
untruthful one; no significance mark is never near one), *differs* otherwise. A claim made of
several parts (a floor "for every m") takes the worst verdict of its parts, in the order
differs, inconclusive, near, not attempted, not refuted, match (:func:`worst`). Inputs that the
paper states (a trace's size, a machine's CPUs) are *settings*, not claims: listed in a
:class:`Claims` with ``settings=True`` and not counted.

**Rule v1**, the rule before v2, stays available (``rule="v1"``) so the scoreboard can show both
counts: it had no width limit, called *near* every interval overlapping ``B`` (for an ordering:
every interval straddling 0, whatever the estimate), called categories near when one step apart on
any grid, and counted bounds for all instances as matches and settings as claims. Without
``rule``, :func:`judge` and :func:`category_verdict` return a :class:`Verdict`: the v2 verdict as
a string that carries v1's (``.v1``), which :class:`Claims` stores in ``verdict_v1``.

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
INCONCLUSIVE, NOT_REFUTED = "inconclusive", "not refuted"
VERDICTS = (MATCH, NEAR_V, DIFFERS, INCONCLUSIVE, NOT_REFUTED, NOT_ATTEMPTED)
V1_VERDICTS = (MATCH, NEAR_V, DIFFERS, NOT_ATTEMPTED)  # rule v1 knew only these
RULES = ("v1", "v2")
_SEVERITY = {MATCH: 0, NOT_REFUTED: 1, NOT_ATTEMPTED: 2, NEAR_V: 3, INCONCLUSIVE: 4, DIFFERS: 5}


class Verdict(str):
    """A verdict of the current rule (v2) that also carries the verdict rule v1 gives the same claim
    (``.v1``), so that a report counts both from one call. It is the v2 verdict as a string: compare
    it with :data:`MATCH` and the others as usual."""

    v1: str

    def __new__(cls, v2: str, v1: str | None = None) -> Verdict:
        out = super().__new__(cls, v2)
        out.v1 = str(v2 if v1 is None else v1)
        return out


def v1_of(verdict: str) -> str:
    """The verdict rule v1 gives (a plain string: the same under both rules)."""
    return getattr(verdict, "v1", str(verdict))

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


def loglog_slope(x: Iterable[float], y: Iterable[float], confidence: float = CONFIDENCE) -> Interval | None:
    """Scaling exponent: the least-squares slope of log y on log x with its t-interval (n - 2 degrees of
    freedom), over the points with x > 0 and y > 0. With two points (or one x repeated) the slope is a
    point without interval; with fewer, or all x equal, None (nothing to fit)."""
    from scipy import stats

    xs, ys = np.asarray(list(x), float), np.asarray(list(y), float)
    keep = (xs > 0) & (ys > 0)
    lx, ly = np.log(xs[keep]), np.log(ys[keep])
    if lx.size < 2 or np.ptp(lx) == 0:
        return None
    if lx.size < 3:
        s = float(np.polyfit(lx, ly, 1)[0])
        return Interval(s, s, s, int(lx.size), "fit")
    dx = lx - lx.mean()
    sxx = float(dx @ dx)
    slope = float(dx @ (ly - ly.mean())) / sxx
    resid = ly - ly.mean() - slope * dx
    stderr = math.sqrt(float(resid @ resid) / (lx.size - 2) / sxx)  # defined for a constant y too (0)
    half = float(stats.t.ppf(0.5 + confidence / 2, lx.size - 2)) * stderr
    return Interval(slope, slope - half, slope + half, int(lx.size), "fit")


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


def _judge_v1(region: Region, iv: Interval) -> str:
    """Rule v1: match as below; near when ``iv`` overlaps the region widened by :data:`NEAR`; else differs."""
    if region.contains(iv) if region.contain else region.overlaps(iv):
        return MATCH
    return NEAR_V if region.widened().overlaps(iv) else DIFFERS


def _judge_v2(region: Region, iv: Interval) -> str:
    """Rule v2. Steps, with ``B`` the near band (the region widened by :data:`NEAR`):

    1. *too wide*: ``iv`` is wider than ``B`` (the figures the rule calls close to the claim); a
       region with an infinite end has no width limit (it is matched only from inside);
    2. *match*: as in v1 and not too wide;
    3. *near*: not too wide and our estimate lies in ``B`` (on the claim's side of an end at 0);
    4. *inconclusive*: otherwise, when ``iv`` still meets the claim's region (our runs do not reject it);
    5. *differs*: ``iv`` misses the region.
    """
    band = region.widened()
    too_wide = iv.hi - iv.lo > band.hi - band.lo
    if not too_wide and (region.contains(iv) if region.contain else region.overlaps(iv)):
        return MATCH
    if not too_wide and band._above_lo(iv.estimate) and band._below_hi(iv.estimate):
        return NEAR_V
    return INCONCLUSIVE if region.overlaps(iv) else DIFFERS


def judge(region: Region, iv: Interval | None, rule: str | None = None, instances: int | None = None) -> str:
    """The verdict of one claim (``region``) against our figure (``iv``; None: not attempted).

    ``rule``: "v1" or "v2" for that rule's verdict as a plain string; None (the default) for the v2
    verdict as a :class:`Verdict` carrying v1's. ``instances``: the claim holds for *all* instances
    and ``iv``'s estimate is its worst case over this many random ones (the largest ratio, the share
    of violations): v2 calls it *not refuted* when that estimate lies in the region and *differs*
    when it does not (a counterexample); v1 judged ``iv`` as any other figure.
    """
    if rule not in (None, *RULES):
        raise ValueError(f"judge: unknown rule {rule!r}; use one of {', '.join(RULES)}")
    if iv is None or any(math.isnan(x) for x in (iv.lo, iv.hi, iv.estimate)):
        return NOT_ATTEMPTED if rule else Verdict(NOT_ATTEMPTED)
    v1 = _judge_v1(region, iv)
    if rule == "v1":
        return v1
    if instances is not None:
        if instances < 1:
            raise ValueError(f"judge: a claim for all instances checked on {instances} instances")
        v2 = NOT_REFUTED if region._above_lo(iv.estimate) and region._below_hi(iv.estimate) else DIFFERS
    else:
        v2 = _judge_v2(region, iv)
    return v2 if rule else Verdict(v2, v1)


@dataclass(frozen=True)
class Scale:
    """An ordered scale of categories with the distance the claim's meaning defines (rule v2).

    ``levels``: the categories in order; ``classes``: for each level, what it means for the
    paper's conclusion (say "truthful" and "untruthful"). Two levels are ``distance`` steps apart
    along the scale when they share a class, and infinitely far apart when they do not: a truthful
    level is never near an untruthful one, however close on the grid."""

    levels: tuple
    classes: tuple | None = None

    def __post_init__(self):
        if self.classes is not None and len(self.classes) != len(self.levels):
            raise ValueError(f"Scale: {len(self.classes)} classes for {len(self.levels)} levels")

    def distance(self, a, b) -> float:
        if a not in self.levels or b not in self.levels:
            return math.inf
        i, j = self.levels.index(a), self.levels.index(b)
        if self.classes is not None and self.classes[i] != self.classes[j]:
            return math.inf
        return float(abs(i - j))


def category_verdict(paper, ours, scale: Scale | Sequence | None = None, rule: str | None = None) -> str:
    """Equal: match; else near when one step apart, else differs.

    Rule v1: one step apart on the ordered ``scale``'s levels, whatever they mean. Rule v2: one step
    by :meth:`Scale.distance` (a plain sequence is an error under v2: the distance must be stated).
    ``rule`` as in :func:`judge`.
    """
    if rule not in (None, *RULES):
        raise ValueError(f"category_verdict: unknown rule {rule!r}; use one of {', '.join(RULES)}")
    if ours is None or ours == paper:
        v = NOT_ATTEMPTED if ours is None else MATCH
        return v if rule else Verdict(v)
    levels = tuple(scale.levels if isinstance(scale, Scale) else scale) if scale is not None else ()
    v1 = NEAR_V if paper in levels and ours in levels and abs(levels.index(paper) - levels.index(ours)) == 1 \
        else DIFFERS
    if rule == "v1":
        return v1
    if scale is not None and not isinstance(scale, Scale):
        raise TypeError("category_verdict: rule v2 needs a Scale (the distance the claim's meaning defines), "
                        f"not the bare levels {tuple(scale)!r}")
    v2 = NEAR_V if scale is not None and scale.distance(paper, ours) == 1 else DIFFERS
    return v2 if rule else Verdict(v2, v1)


def worst(verdicts: Iterable[str]) -> str:
    """The verdict of a claim made of parts: differs, inconclusive, near, not attempted, not refuted,
    match (the first of these among the parts). On :class:`Verdict` parts, v1's verdicts alike."""
    vs = list(verdicts)
    if not vs:
        return Verdict(NOT_ATTEMPTED)
    for v in vs:
        if v not in _SEVERITY:
            raise ValueError(f"worst: unknown verdict {v!r}")
    v2 = max(vs, key=_SEVERITY.__getitem__)
    if not any(isinstance(v, Verdict) for v in vs):
        return v2
    return Verdict(v2, max((v1_of(v) for v in vs), key=_SEVERITY.__getitem__))


STARS = ("", "*", "**", "***")
#: significance marks: one step apart, except that no mark (not significant) is never near a mark
STARS_SCALE = Scale(STARS, ("not significant", "significant", "significant", "significant"))


def stars(p: float) -> str:
    """Significance marks as the papers print them: * p < 0.1, ** p < 0.05, *** p < 0.01."""
    return "***" if p < 0.01 else "**" if p < 0.05 else "*" if p < 0.1 else ""


# ------------------------------------------------------------------------------ claim lists
@dataclass
class Claim:
    """One row: ``verdict`` by rule v2 and ``verdict_v1`` by rule v1 (taken from a :class:`Verdict`;
    a plain string is the same under both rules)."""

    where: str
    claim: str
    paper: str
    ours: str
    verdict: str
    note: str = ""
    verdict_v1: str = ""

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"Claim {self.where!r}: unknown verdict {self.verdict!r}")
        self.verdict_v1 = self.verdict_v1 or v1_of(self.verdict)
        self.verdict = str(self.verdict)
        if self.verdict_v1 not in V1_VERDICTS:
            raise ValueError(f"Claim {self.where!r}: {self.verdict_v1!r} is no verdict of rule v1")


@dataclass
class Claims:
    """A report's list of claims; ``ours=True``: comparisons we added, listed apart and never counted;
    ``settings=True``: inputs of the runs compared with the paper's (a trace's size, a machine's
    CPUs): rule v1 counted them as claims, rule v2 does not (they are not results)."""

    title: str = "The paper's claims"
    ours: bool = False
    rows: list[Claim] = field(default_factory=list)
    settings: bool = False

    def counted(self, rule: str = "v2") -> bool:
        """Whether this list's rows count among the paper's claims under ``rule``."""
        if rule not in RULES:
            raise ValueError(f"Claims.counted: unknown rule {rule!r}")
        return not self.ours and not (self.settings and rule == "v2")

    def add(self, where: str, claim: str, paper: str, ours: str, verdict: str, note: str = "") -> str:
        self.rows.append(Claim(where, claim, paper, ours, verdict, note))
        return verdict

    def check(self, where: str, claim: str, paper: str, region: Region, iv: Interval | None, fmt: str = ".3g",
              unit: str = "", note: str = "", instances: int | None = None) -> str:
        """Judge ``iv`` against ``region`` and add the row (our figure printed with its interval).
        ``instances``: a claim for all instances, ``iv`` its worst case over that many (see :func:`judge`)."""
        ours = iv.text(fmt, unit) if iv is not None else "-"
        if iv is not None and instances is not None:
            ours += f" ({instances} instances)"
        return self.add(where, claim, paper, ours, judge(region, iv, instances=instances), note)

    def not_attempted(self, where: str, claim: str, paper: str, why: str) -> str:
        return self.add(where, claim, paper, "-", NOT_ATTEMPTED, why)

    def counts(self, rule: str = "v2") -> dict[str, int]:
        """Rows per verdict of ``rule`` (whether the list is counted at all: :meth:`counted`)."""
        if rule not in RULES:
            raise ValueError(f"Claims.counts: unknown rule {rule!r}")
        key = "verdict" if rule == "v2" else "verdict_v1"
        return {v: sum(getattr(r, key) == v for r in self.rows) for v in (VERDICTS if rule == "v2" else V1_VERDICTS)}

    def frame(self):
        import pandas as pd

        return pd.DataFrame([vars(r) for r in self.rows],
                            columns=["where", "claim", "paper", "ours", "verdict", "note", "verdict_v1"])


def counts_text(counts: dict[str, int]) -> str:
    n = sum(counts.values())
    words = {MATCH: "match", NEAR_V: "near", DIFFERS: "differ", INCONCLUSIVE: "inconclusive",
             NOT_REFUTED: "not refuted", NOT_ATTEMPTED: "not attempted"}
    return f"{n} claims: " + ", ".join(f"{counts.get(v, 0)} {w}" for v, w in words.items()
                                       if v in counts or v in V1_VERDICTS)


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
        f"* **The near band** of a claim is its region widened by {NEAR:.0%} of the magnitude of each finite end "
        "(a printed 1.07 widens to [1.012, 1.129]; an end at 0 stays at 0, an infinite end stays infinite).",
        "* **Too wide.** An interval wider than the claim's near band is never a *match* nor *near*: "
        "\"about 2\" ([1.9, 2.1], band [1.805, 2.205]) is not matched by 1.91 [0.62, 3.20]. A region with an "
        "infinite end has no width limit (it is matched only from inside).",
        "* **near**: not a match, not too wide, and our *estimate* lies in the near band, so on the claim's side "
        "of an end at 0 (an ordering whose interval straddles 0 is near only when the estimate points the "
        "claimed way).",
        "* **inconclusive**: neither, but our interval still meets the claim's region: our runs neither establish "
        "nor reject it. **differs**: our interval misses the region. **not attempted**: we have no figure.",
        "* **For all instances.** A property claimed for every instance (a theorem's bound, \"no profitable "
        "misreport\") and checked on random ones is at best *not refuted* (with the number of instances): its "
        "worst case over them lies in the claimed region. It is counted apart from *match*; a counterexample "
        "*differs*.",
        "* **Categories** (equilibria, significance stars, a best cell): *match* when equal, *near* when one "
        "step apart on a scale whose distance the claim's meaning defines (a truthful level is never near an "
        "untruthful one; no significance mark is never near a mark), *differs* otherwise.",
        "* **Claims with parts** (\"for every m\") take the worst verdict of their parts: differs, inconclusive, "
        "near, not attempted, not refuted, match.",
        "* **Settings are not claims.** Inputs of the runs that the paper states (a trace's size, a machine's "
        "CPUs) are listed with our figure but not counted.",
        "* **Our own comparisons** (paired variants, sensitivity runs) are listed apart and never counted.",
        "* **Rule v1**, the rule before this one, is kept for comparison (`rule=\"v1\"`): no width limit, near "
        "when the *interval* overlaps the near band, categories near when one step apart on any grid, bounds "
        "for all instances counted as matches and settings as claims; the scoreboard shows both.",
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
