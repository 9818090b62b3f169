"""One contract for every online mechanism: a name, typed parameters, a source, what it needs.

Every online mechanism that runs on the engine is a :class:`Mechanism`: a name (``hb``,
``relaxed-ees``, ...), the paper and section it implements, its *kind* (how the CLI groups
it), its parameters (:class:`Param`: typed, with defaults and help), what it needs from the
jobs (:data:`NEEDS`: bids, serial jobs, run-time estimates, deadlines, ...) and a ``build``
function ``build(jobs, **params) -> policy`` that returns a fresh policy for the engine
(:class:`marketsched.engine.simulator.Simulator`) from a :class:`marketsched.scenario.Jobs`.

The built-in mechanisms are declared in :mod:`marketsched.mechanisms.builtin`. Third-party
mechanisms register through the Python entry-point group ``marketsched.mechanisms``: each
entry point names a :class:`Mechanism` (or a function returning one or a list of them), e.g.
in the plugin's ``pyproject.toml``::

    [project.entry-points."marketsched.mechanisms"]
    lowest-bid = "my_package.lowest:MECHANISM"

and ``marketsched mechanisms``, ``simulate``, ``compare`` and the grid runner then know it,
with no change to marketsched (see ``docs/extending.md``).

Steps of :func:`build` (what every command does with a name):

1. look the name up (built-ins first, then plugins; :func:`get`);
2. resolve the parameters: defaults, then the given values parsed to their types (text from
   the command line, or Python values); an unknown key or a bad value is a ``ValueError``
   naming the mechanism, the parameter and what it accepts (:meth:`Mechanism.resolve`);
3. check that the jobs give the mechanism what it needs (:func:`missing`); if not, raise
   :class:`Unfit`, naming what is missing and the option that supplies it;
4. call ``build(jobs, **params)``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

ENTRY_POINT_GROUP = "marketsched.mechanisms"

#: What a mechanism may need from the jobs, and how a user supplies each (shown when missing).
NEEDS = {
    "bids": "a bid per job (from the value model, --values; reports are truthful on the command line)",
    "serial": "serial jobs (one processor each): split parallel jobs with --split "
              "(Python: marketsched.workloads.split_parallel)",
    "estimates": "a run-time estimate per job: choose an estimate model, --estimates exact or --estimates badness "
                 "(Python: WorkloadSpec(estimates=...))",
    "deadlines": "a deadline per job: choose a deadline model, --deadlines patience or --deadlines slack "
                 "(Python: prepare_jobs(..., deadlines=...))",
    "reliability": "a minimum provider reliability per job (optional, 0 without a model): --reliability mix",
    "whole-seconds": "submit and run times in whole seconds (the market bids once a second): round them "
                     "with --whole-seconds (Python: WorkloadSpec(whole_seconds=True)); SWF traces already are",
    "node-choice": "each job's choice of node (optional: every job takes its best node unless told otherwise; "
                   "the audit's node lies, --deviate node:RANK)",
    "values>=1": "true values of at least 1 per CPU-second (ZIC bidders bid on {1, ..., v}): choose a value "
                 "model that gives them, --values uniform",
}

KINDS = {
    "priority market": "jobs ordered by bid (or bid / run time), paying a price per second of running time",
    "compensation market": "jobs pay the jobs they overtake; payments are transfers and sum to zero",
    "queue auction": "the queue head runs or is discarded; every queued job pays its expected externality",
    "share market": "every active job gets a share of the machine each second for its bid (pay as bid)",
    "decentralized auction": "providers post price tables; each job buys the best (provider, completion time)",
    "queue": "no market: no bids, no payments",
}


#: How strong an incentive claim is, and how an audit of ex-post utility on one instance can test it
#: (:func:`marketsched.analysis.audit.claim_verdicts`).
STRENGTHS = {
    "dominant": "no lie pays, whatever the others report: one profitable lie on any instance refutes it",
    "bayes-nash": "the truth maximises expected utility when the others are truthful: single lies may pay on "
                  "one instance; a mean gain significantly above 0 over the focal jobs contradicts it",
    "myopic": "the truth maximises the utility promised at the report (tentative utility); an ex-post audit "
              "cannot refute it, and shows how often a lie pays after the fact",
}


@dataclass(frozen=True)
class Claim:
    """An incentive property a mechanism's paper proves, for :func:`~marketsched.analysis.audit`.

    ``lies``: the audit deviations it covers, each a kind (``value``, ``estimate``, ``delay``),
    optionally bounded: ``"estimate>=1"`` (only over-reports, when the model assumes a job cannot
    claim less than it needs). ``strength``: a key of :data:`STRENGTHS`. ``source``: where it is
    proved, with the assumptions that matter."""

    text: str
    strength: str
    lies: tuple[str, ...]
    source: str

    def __post_init__(self):
        if self.strength not in STRENGTHS:
            raise ValueError(f"claim {self.text!r}: unknown strength {self.strength!r}; known: {', '.join(STRENGTHS)}")
        for lie in self.lies:
            self.bounds(lie)

    @staticmethod
    def bounds(lie: str) -> tuple[str, float, float]:
        """``"estimate>=1"`` -> ``("estimate", 1.0, inf)``; ``"value"`` -> ``("value", -inf, inf)``."""
        for op in (">=", "<="):
            kind, found, amount = lie.partition(op)
            if found:
                try:
                    x = float(amount)
                except ValueError:
                    raise ValueError(f"claim lie {lie!r}: {amount!r} is not a number") from None
                return (kind.strip(), x, math.inf) if op == ">=" else (kind.strip(), -math.inf, x)
        return lie.strip(), -math.inf, math.inf


class Unfit(ValueError):
    """A mechanism cannot run on the given jobs; the message names what is missing and how to get it."""


@dataclass(frozen=True)
class Param:
    """A typed mechanism parameter. ``type`` is ``int``, ``float``, ``str`` or ``bool``."""

    name: str
    type: type
    default: Any
    help: str
    choices: tuple | None = None

    def __post_init__(self):
        if self.type not in (int, float, str, bool):
            raise ValueError(f"parameter {self.name!r}: type must be int, float, str or bool, got {self.type!r}")
        if self.choices is not None and self.default not in self.choices:
            raise ValueError(f"parameter {self.name!r}: default {self.default!r} is not among {self.choices}")

    def parse(self, value, where: str = ""):
        """``value`` (text or a Python value) as this parameter's type; ValueError naming the problem."""
        label = f"{where}parameter {self.name!r}"
        t = self.type
        out: Any
        try:
            if t is bool:
                if isinstance(value, (bool, np.bool_)):
                    out = bool(value)
                elif str(value).strip().lower() in ("1", "true", "yes", "on"):
                    out = True
                elif str(value).strip().lower() in ("0", "false", "no", "off"):
                    out = False
                else:
                    raise ValueError
            elif t is int:
                if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                    raise ValueError
                out = int(str(value).strip()) if isinstance(value, str) else int(value)
            elif t is float:
                if isinstance(value, bool):
                    raise ValueError
                out = float(value)
                if not math.isfinite(out):
                    raise ValueError
            else:
                out = str(value)
        except (ValueError, TypeError):
            kind = {bool: "true or false", int: "a whole number", float: "a finite number", str: "text"}[t]
            raise ValueError(f"{label} must be {kind}, got {value!r}") from None
        if self.choices is not None and out not in self.choices:
            raise ValueError(f"{label} must be one of {', '.join(map(str, self.choices))}; got {value!r}")
        return out


@dataclass(frozen=True)
class Mechanism:
    """One registered online mechanism (see the module docstring).

    ``market``: it takes bids and charges payments (False for FCFS and EASY). ``live``: how
    the live market (``marketsched market serve``) runs it, or why it cannot (shown by
    ``marketsched mechanisms``). ``optional``: inputs it uses when present. ``utility``:
    ``utility(jobs, run) -> per-job array`` in the mechanism's own model (None: the
    quasi-linear ``-w x flow time - payment`` of Shudler et al. (2010), Eq. 3). ``claims``: the
    incentive properties its paper proves (:class:`Claim`), which ``marketsched audit`` gives a
    verdict on. ``form``: ``form(jobs) -> (jobs, name)``, the jobs as its paper states them, used
    when the scenario runs each mechanism in its own form (:func:`marketsched.scenario.in_form`;
    None: split into serial jobs if it needs them, else as given).
    """

    name: str
    title: str
    kind: str
    source: str
    build: Callable[..., Any]
    params: tuple[Param, ...] = ()
    needs: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()
    market: bool = True
    summary: str = ""
    live: str = "no: not wired into the live market"
    utility: Callable[..., Any] | None = None
    origin: str = "python"  # "built-in", "plugin <distribution>", or registered from Python code
    claims: tuple[Claim, ...] = ()
    form: Callable[..., Any] | None = None

    def __post_init__(self):
        if not self.name or self.name != self.name.strip() or " " in self.name or "," in self.name:
            raise ValueError(f"mechanism name {self.name!r} must be non-empty, without spaces or commas")
        for need in (*self.needs, *self.optional):
            if need not in NEEDS:
                raise ValueError(f"mechanism {self.name!r}: unknown need {need!r}; known: {', '.join(NEEDS)}")
        if self.kind not in KINDS:
            raise ValueError(f"mechanism {self.name!r}: unknown kind {self.kind!r}; known: {', '.join(KINDS)}")
        names = [p.name for p in self.params]
        if len(set(names)) != len(names):
            raise ValueError(f"mechanism {self.name!r}: parameter names repeat: {names}")
        if not callable(self.build):
            raise ValueError(f"mechanism {self.name!r}: build must be callable")

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)

    def resolve(self, given: dict | None = None) -> dict:
        """Every parameter's value: defaults updated by ``given`` (text or Python values), checked."""
        return resolve_params(self.name, self.params, given)

    def label(self, params: dict | None = None) -> str:
        """``name``, ``/pricing`` if it has one, and the other parameters that differ from their
        defaults, e.g. ``hb/first`` or ``ees(n_draws=50)``."""
        params = params or {}
        base = self.name + (f"/{params['pricing']}" if "pricing" in params and self.param("pricing") else "")
        defaults = {p.name: p.default for p in self.params}
        changed = {k: v for k, v in params.items() if k != "pricing" and k in defaults and defaults[k] != v}
        return base + ("(" + ",".join(f"{k}={v}" for k, v in sorted(changed.items())) + ")" if changed else "")


def resolve_params(name: str, params: tuple[Param, ...], given: dict | None = None) -> dict:
    """Every parameter's value: defaults updated by ``given`` (text or Python values), checked;
    ``ValueError`` naming ``name``, the parameter and what it accepts."""
    out = {p.name: p.default for p in params}
    by_name = {p.name: p for p in params}
    for key, value in (given or {}).items():
        p = by_name.get(key)
        if p is None:
            known = ", ".join(by_name) or "none"
            raise ValueError(f"mechanism {name!r} has no parameter {key!r}; its parameters: {known}")
        out[key] = p.parse(value, where=f"mechanism {name!r}: ")
    return out


# ---------------------------------------------------------------------------- the registry
_REGISTRY: dict[str, Mechanism] = {}
_loaded = {"builtin": False, "plugins": False}
_entry_points_seen: set[tuple[str, str]] = set()  # (name, value) of the entry points already loaded
#: Entry points that did not load: ``(entry point name, its value, distribution, why)``.
load_errors: list[tuple[str, str, str | None, str]] = []


class PluginWarning(UserWarning):
    """A mechanism plugin that was not loaded (the command line prints it as one line)."""


def register(mechanism: Mechanism, replace: bool = False) -> Mechanism:
    """Add ``mechanism`` to the registry (``ValueError`` if the name is taken, unless ``replace``)."""
    if not isinstance(mechanism, Mechanism):
        raise ValueError(f"register: expected a Mechanism, got {type(mechanism).__name__}")
    old = _REGISTRY.get(mechanism.name)
    if old is not None and not replace:
        raise ValueError(f"mechanism name {mechanism.name!r} is already registered ({old.origin})")
    _REGISTRY[mechanism.name] = mechanism
    return mechanism


def unregister(name: str) -> None:
    _REGISTRY.pop(name, None)


def _ensure_loaded(plugins: bool = True) -> None:
    """Register the built-ins, and the plugins unless ``plugins`` is false (reading the installed
    entry points imports importlib.metadata: tens of milliseconds a command naming a built-in
    mechanism does without)."""
    if not _loaded["builtin"]:
        _loaded["builtin"] = True
        import marketsched.mechanisms.builtin  # noqa: F401 (registers the built-ins)

        for name, m in list(_REGISTRY.items()):
            _REGISTRY[name] = _with_origin(m, "built-in")
    if plugins and not _loaded["plugins"]:
        _loaded["plugins"] = True
        load_plugins()


def load_plugins(reload: bool = False) -> list[str]:
    """Register the mechanisms of every installed entry point of :data:`ENTRY_POINT_GROUP`.

    An entry point may name a :class:`Mechanism`, a list of them, or a function returning
    either. A plugin that fails to load, or whose name is taken, is skipped with a warning
    naming it (the others still load). An entry point already loaded is not loaded again,
    unless ``reload`` (which first drops every plugin's mechanisms). Returns the names registered.
    """
    from importlib import invalidate_caches
    from importlib.metadata import entry_points

    if reload:
        for name in [n for n, m in _REGISTRY.items() if m.origin.startswith("plugin ")]:
            del _REGISTRY[name]
        _entry_points_seen.clear()
        load_errors.clear()
    invalidate_caches()
    names = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if (ep.name, ep.value) in _entry_points_seen:
            continue
        _entry_points_seen.add((ep.name, ep.value))
        dist = getattr(getattr(ep, "dist", None), "name", None)
        try:
            obj = ep.load()
            if isinstance(obj, type):  # a class (a policy, say) is callable but is not a mechanism
                raise ValueError(f"not a mechanism: it names the class {obj.__name__}; an entry point names a "
                                 "marketsched Mechanism, a list of them, or a function returning either")
            if callable(obj) and not isinstance(obj, Mechanism):
                obj = obj()
            items = obj if isinstance(obj, (list, tuple)) else [obj]
            for m in items:
                if not isinstance(m, Mechanism):
                    raise ValueError(f"not a mechanism: expected a marketsched.mechanisms.registry.Mechanism, got "
                                     f"{type(m).__name__}")
            for m in items:
                m = _with_origin(m, f"plugin {dist or ep.value}")
                register(m)
                names.append(m.name)
        except Exception as exc:  # a broken plugin must not break the command line
            why = str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}"
            load_errors.append((ep.name, ep.value, dist, why))
            warnings.warn(f"mechanism plugin {ep.name!r} ({ep.value}{f', from {dist}' if dist else ''}) was not "
                          f"loaded: {why}", PluginWarning, stacklevel=2)
    return names


def _with_origin(m: Mechanism, origin: str) -> Mechanism:
    from dataclasses import replace

    return replace(m, origin=origin)


def get(name: str) -> Mechanism:
    """The mechanism registered as ``name`` (``ValueError`` listing the known names); a name not
    yet known is looked for among the installed plugins (read only then: a built-in name needs
    no plugin)."""
    _ensure_loaded(plugins=False)
    if name not in _REGISTRY:
        _loaded["plugins"] = True
        load_plugins()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown mechanism {name!r}; choose one of {', '.join(_REGISTRY)} "
                         "(`marketsched mechanisms` lists them)") from None


def mechanisms() -> list[Mechanism]:
    """Every registered mechanism: built-ins in declaration order, then plugins."""
    _ensure_loaded()
    return list(_REGISTRY.values())


def names() -> list[str]:
    return [m.name for m in mechanisms()]


# ---------------------------------------------------------------------------- fit and build
def missing(mechanism: Mechanism, jobs) -> list[str]:
    """What ``jobs`` (a :class:`marketsched.scenario.Jobs`) lack for ``mechanism``: one sentence
    per need, naming the problem and how to get it; empty when the mechanism can run."""
    w = jobs.workload
    out = []
    for need in mechanism.needs:
        problem = None
        if need == "serial":
            wide = np.flatnonzero(w.procs != 1)
            if len(wide):
                problem = f"{len(wide):,} jobs are parallel (row {wide[0]} needs {w.procs[wide[0]]} processors)"
        elif need == "estimates":
            nan = np.isnan(w.runtime_estimate)
            if nan.any():
                problem = f"{int(nan.sum()):,} of {len(w):,} jobs have no run-time estimate"
        elif need == "deadlines":
            if jobs.deadline is None:
                problem = "the jobs have no deadlines (deadline model 'none')"
        elif need == "whole-seconds":
            frac = np.flatnonzero((w.submit_time % 1 != 0) | (w.runtime % 1 != 0))
            if len(frac):
                problem = (f"{len(frac):,} jobs have fractional times (row {frac[0]}: submit {w.submit_time[frac[0]]:g} s, "
                           f"run time {w.runtime[frac[0]]:g} s)")
        elif need == "values>=1":
            low = np.flatnonzero(jobs.true_value < 1)
            if len(low):
                problem = f"{len(low):,} jobs have a value below 1 (row {low[0]}: {jobs.true_value[low[0]]:.3g})"
        elif need == "bids" and jobs.bid is None:
            problem = "no bids were given"
        if problem:
            out.append(f"{mechanism.name} needs {NEEDS[need]}; here {problem}")
    return out


def build(name: str, jobs, params: dict | None = None):
    """A fresh policy for mechanism ``name`` on ``jobs`` with ``params`` (see the module docstring).

    Returns ``(policy, resolved_params)``; raises :class:`Unfit` if the jobs lack what the
    mechanism needs, ``ValueError`` for an unknown name or a bad parameter.
    """
    m = get(name)
    resolved = m.resolve(params)
    gaps = missing(m, jobs)
    if gaps:
        raise Unfit("; ".join(gaps))
    return m.build(jobs, **resolved), resolved


def describe(m: Mechanism) -> dict:
    """A plain dict of what ``marketsched mechanisms`` shows for ``m``."""
    return {
        "name": m.name, "title": m.title, "kind": m.kind, "source": m.source, "needs": list(m.needs),
        "optional": list(m.optional), "market": m.market, "origin": m.origin, "live": m.live,
        "params": [{"name": p.name, "type": p.type.__name__, "default": p.default, "help": p.help,
                    **({"choices": list(p.choices)} if p.choices else {})} for p in m.params],
        "summary": m.summary,
        "claims": [{"text": c.text, "strength": c.strength, "lies": list(c.lies), "source": c.source}
                   for c in m.claims],
    }
