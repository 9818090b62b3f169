"""Empirical designer-vs-aggressive-users games and their pure Nash equilibria
(Shudler et al. 2010, section V).

Source: Shudler et al. (2010), section V "Game-theoretic analysis", Tables II and III.

The game is one-shot, two players, pure strategies, with payoffs measured by simulation:

* the **mechanism designer** picks an allocation algorithm (a row: HB, NPHB, WSPT), one table
  per payment scheme (first, k-th price);
* the **aggregate risk-aggressive consumer** picks one shading parameter beta (a column:
  5, 25, 50, 60, 70, 80, 90%) for every aggressive job (SRG model, conservative jobs keep 10%).

Payoffs (group C, the longest third of the jobs by actual run time):

* designer: revenue / total weighted flow time, ``sum_i p_i / sum_j w_j phi_j``;
* users: the average utility ``u_i = -w_i phi_i - p_i`` of the aggressive jobs in group C.

Pure Nash equilibrium (:func:`pure_nash`): a cell where the designer's payoff is the maximum
of its column (the designer best-responds to beta) and the users' payoff the maximum of its
row (the users best-respond to the algorithm). Plain best-response scan, all equilibria.

Decisions (documented here because the paper leaves them open):

* **Designer scope.** The paper says the tables are for group C but also "i, j are for all
  jobs". Default ``designer_scope="all"``: revenue and TWFT of every job (only the users'
  payoff is restricted to group C); ``"group"`` uses the group-C jobs only. Evidence for the
  default: on LPC-EGEE (seed 1) the all-jobs variant reproduces the paper's designer column
  (first price, NPHB/HB 0.864 vs the paper's 0.862; k-th price NPHB 0.637 vs 0.636), the
  group-C variant does not (0.938 and 0.692).
* **Normalisation.** Both tables share one normalisation per player (the paper's 1.000 cells
  are HB/first/5% for the designer and HB/k-th/5% for the users, one in each table). Designer:
  ``d / max d`` over both tables. Users: utilities are negative, so the paper's "1.000 = best"
  can only be ``u_best / u`` (``u_best`` the largest, i.e. least negative, utility over both
  tables); it is <= 1 and increases with ``u``. Both maps are increasing, so they never change
  a best response or an equilibrium.
* **Seeds.** Per-seed payoffs are averaged over seeds before normalising (each seed is one
  simulated history); the spread over seeds is kept for confidence intervals.
* **Ties.** A payoff within ``atol`` of the maximum counts as a best response (default 0:
  exact ties only).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

#: The paper's strategy sets (section V).
PAPER_ALGORITHMS = ("hb", "nphb", "wspt")
PAPER_BETAS = (0.05, 0.25, 0.5, 0.6, 0.7, 0.8, 0.9)
LABELS = {"hb": "HB", "nphb": "NPHB", "wspt": "WSPT", "wsept": "WSEPT"}


@dataclass
class PayoffGame:
    """A bimatrix game: rows are the designer's algorithms, columns the users' betas."""

    rows: list
    cols: list
    designer: np.ndarray
    users: np.ndarray
    title: str = ""
    notes: list[str] = field(default_factory=list)

    def __post_init__(self):
        self.rows, self.cols = list(self.rows), list(self.cols)
        self.designer = np.asarray(self.designer, dtype=np.float64)
        self.users = np.asarray(self.users, dtype=np.float64)
        shape = (len(self.rows), len(self.cols))
        for name in ("designer", "users"):
            arr = getattr(self, name)
            if arr.shape != shape:
                raise ValueError(f"PayoffGame {self.title!r}: {name} payoffs have shape {arr.shape}, "
                                 f"expected {shape} (rows {self.rows}, columns {self.cols})")
            if np.isnan(arr).any():
                i, j = np.argwhere(np.isnan(arr))[0]
                raise ValueError(f"PayoffGame {self.title!r}: {name} payoff at ({self.rows[i]}, {self.cols[j]}) is NaN")

    def equilibria(self, atol: float = 0.0) -> list[tuple]:
        """All pure Nash equilibria as (row label, column label)."""
        return [(self.rows[i], self.cols[j]) for i, j in pure_nash(self.designer, self.users, atol)]

    def without(self, *rows) -> PayoffGame:
        """The game with some designer strategies removed (e.g. k-th price without WSPT)."""
        missing = [r for r in rows if r not in self.rows]
        if missing:
            raise ValueError(f"PayoffGame {self.title!r}: no row {missing[0]!r} (rows {self.rows})")
        keep = [i for i, r in enumerate(self.rows) if r not in rows]
        return PayoffGame([self.rows[i] for i in keep], self.cols, self.designer[keep], self.users[keep],
                          title=f"{self.title} without {', '.join(map(str, rows))}", notes=list(self.notes))

    def to_frame(self, digits: int = 3, mark_equilibria: bool = True):
        """The table in the paper's layout: one row per algorithm, cells "designer, users"."""
        import pandas as pd

        ne = set(pure_nash(self.designer, self.users)) if mark_equilibria else set()
        data = {"Alg": [LABELS.get(r, str(r)) for r in self.rows]}
        for j, c in enumerate(self.cols):
            data[_col_label(c)] = [
                f"{self.designer[i, j]:.{digits}f}, {self.users[i, j]:.{digits}f}" + (" *" if (i, j) in ne else "")
                for i in range(len(self.rows))
            ]
        return pd.DataFrame(data)

    def to_markdown(self, digits: int = 3) -> str:
        df = self.to_frame(digits)
        lines = ["| " + " | ".join(df.columns) + " |", "|" + "|".join("---" for _ in df.columns) + "|"]
        lines += ["| " + " | ".join(map(str, r)) + " |" for r in df.itertuples(index=False, name=None)]
        return "\n".join(lines)


def _col_label(c) -> str:
    if isinstance(c, (float, np.floating)) and 0 <= c <= 1:
        return f"{100 * c:g}%"
    return str(c)


def pure_nash(designer, users, atol: float = 0.0) -> list[tuple[int, int]]:
    """All pure Nash equilibria ``(i, j)`` of a bimatrix game, by a best-response scan.

    The row player (designer) best-responds within a column, the column player (users) within
    a row. Steps: (1) column maxima of ``designer``; (2) row maxima of ``users``; (3) keep the
    cells that attain both (within ``atol``), in row-major order.
    """
    d = np.asarray(designer, dtype=np.float64)
    u = np.asarray(users, dtype=np.float64)
    if d.ndim != 2 or d.shape != u.shape or d.size == 0:
        raise ValueError(f"pure_nash: need two non-empty payoff matrices of one shape, got {d.shape} and {u.shape}")
    if np.isnan(d).any() or np.isnan(u).any():
        raise ValueError("pure_nash: payoff matrices contain NaN")
    if atol < 0:
        raise ValueError(f"pure_nash: atol = {atol} is negative")
    d_best = d >= d.max(axis=0, keepdims=True) - atol
    u_best = u >= u.max(axis=1, keepdims=True) - atol
    return [(int(i), int(j)) for i, j in np.argwhere(d_best & u_best)]


def normalise(games: dict, designer: bool = True, users: bool = True) -> dict:
    """Normalise several tables jointly, as the paper does across Tables II and III.

    Designer payoffs become ``d / max d`` (max over all tables, must be > 0); user payoffs
    (average utilities, <= 0) become ``u_best / u`` with ``u_best`` the largest over all tables.
    Returns new :class:`PayoffGame` objects with the same keys.
    """
    d_max = max(float(g.designer.max()) for g in games.values())
    u_best = max(float(g.users.max()) for g in games.values())
    if designer and d_max <= 0:
        raise ValueError(f"normalise: the largest designer payoff is {d_max}, not positive")
    if users:
        if any((g.users >= 0).any() for g in games.values()):
            raise ValueError("normalise: user payoffs must be negative utilities for u_best / u")
    out = {}
    for k, g in games.items():
        out[k] = PayoffGame(g.rows, g.cols, g.designer / d_max if designer else g.designer,
                            u_best / g.users if users else g.users, title=g.title,
                            notes=g.notes + [f"normalised jointly: designer / {d_max:.6g}, users {u_best:.6g} / u"])
    return out


# ---------------------------------------------------------------------------------- from results
def per_seed_payoffs(results, group: str = "C", designer_scope: str = "all",
                     algorithms=PAPER_ALGORITHMS, betas=PAPER_BETAS, behaviour: str = "srg", **where):
    """Raw (un-normalised) payoffs per seed from a runner results table.

    ``results``: the tidy table of :mod:`marketsched.experiments.runner` (one row per cell and
    group, with the sums ``sum_payment``, ``sum_wflow``, ``sum_utility``, ``completed``).
    ``where``: equality filters on cell columns (e.g. ``trace=..., capacity=0.75``).
    Returns a DataFrame indexed by (pricing, mechanism, beta, seed) with columns ``designer``
    and ``users``.
    """
    if designer_scope not in ("group", "all"):
        raise ValueError(f"designer_scope must be 'group' or 'all', got {designer_scope!r}")
    df = results
    for col, val in where.items():
        if col not in df:
            raise ValueError(f"results table has no column {col!r} to filter on")
        df = df[df[col] == val]
    df = df[(df["behaviour"] == behaviour) & df["mechanism"].isin(list(algorithms))]
    df = df[np.isclose(df["beta"].to_numpy()[:, None], np.asarray(betas)[None, :]).any(axis=1)]
    if df.empty:
        raise ValueError(f"results table has no {behaviour!r} cells for algorithms {algorithms} and betas {betas} "
                         f"with filters {where}")
    keys = ["pricing", "mechanism", "beta", "seed"]
    in_group = df["runtime_group"] == group
    scope = df[in_group] if designer_scope == "group" else df
    d = scope.groupby(keys)[["sum_payment", "sum_wflow"]].sum()
    aggr = df[in_group & (df["bidder"] == "aggressive")].groupby(keys)[["sum_utility", "completed"]].sum()
    out = d["sum_payment"].div(d["sum_wflow"]).rename("designer").to_frame()
    out["users"] = aggr["sum_utility"] / aggr["completed"]
    return out


def games_from_results(results, pricings=("first", "kth"), confidence: float = 0.95, **kwargs):
    """Build one normalised :class:`PayoffGame` per pricing from a results table.

    Steps: (1) per-seed raw payoffs (:func:`per_seed_payoffs`); (2) mean over seeds per
    (pricing, algorithm, beta); (3) joint normalisation over the pricings (:func:`normalise`).
    Returns ``(games, raw)``: ``raw`` holds the means, the seed count and the half-width of a
    Student-t confidence interval of each raw payoff.
    """
    from scipy import stats

    per_seed = per_seed_payoffs(results, **kwargs)
    g = per_seed.groupby(level=["pricing", "mechanism", "beta"])
    raw = g.mean()
    n = g.size()
    raw["seeds"] = n
    t = stats.t.ppf(0.5 + confidence / 2, np.maximum(n - 1, 1))
    for col in ("designer", "users"):
        raw[f"{col}_ci"] = np.where(n > 1, t * g[col].std(ddof=1) / np.sqrt(n), np.nan)
    algorithms = list(kwargs.get("algorithms", PAPER_ALGORITHMS))
    games = {}
    for p in pricings:
        if p not in raw.index.get_level_values("pricing"):
            raise ValueError(f"results table has no {p!r} cells")
        sub = raw.xs(p, level="pricing")
        rows = [a for a in algorithms if a in sub.index.get_level_values("mechanism")]
        cols = sorted(sub.index.get_level_values("beta").unique())
        dm = sub["designer"].unstack("beta").reindex(index=rows, columns=cols)
        um = sub["users"].unstack("beta").reindex(index=rows, columns=cols)
        games[p] = PayoffGame(rows, cols, dm.to_numpy(), um.to_numpy(), title=f"{p} price")
    return normalise(games), raw


# ---------------------------------------------------------------------------------- the paper's tables
#: Table II (first price) and Table III (k-th price) of Shudler et al. (2010), group C, as printed
#: (designer, users); columns are PAPER_BETAS, rows PAPER_ALGORITHMS.
PAPER_TABLE_II = {
    "hb": [(1.000, 0.833), (0.990, 0.842), (0.976, 0.845), (0.970, 0.838), (0.963, 0.824), (0.955, 0.802), (0.945, 0.777)],
    "nphb": [(0.862, 0.801), (0.853, 0.810), (0.841, 0.813), (0.836, 0.809), (0.831, 0.799), (0.824, 0.785), (0.816, 0.767)],
    "wspt": [(0.904, 0.827), (0.895, 0.842), (0.883, 0.860), (0.878, 0.863), (0.873, 0.863), (0.868, 0.867), (0.863, 0.861)],
}
PAPER_TABLE_III = {
    "hb": [(0.306, 1.000), (0.303, 0.988), (0.296, 0.961), (0.292, 0.940), (0.287, 0.913), (0.281, 0.882), (0.274, 0.846)],
    "nphb": [(0.636, 0.854), (0.629, 0.858), (0.619, 0.847), (0.614, 0.839), (0.609, 0.827), (0.603, 0.810), (0.597, 0.790)],
    "wspt": [(0.774, 0.855), (0.765, 0.869), (0.755, 0.879), (0.751, 0.884), (0.746, 0.886), (0.741, 0.881), (0.736, 0.879)],
}


def paper_game(table: str) -> PayoffGame:
    """The paper's Table II (``"first"``) or Table III (``"kth"``) as a :class:`PayoffGame`."""
    src = {"first": PAPER_TABLE_II, "kth": PAPER_TABLE_III}.get(table)
    if src is None:
        raise ValueError(f"paper_game: table must be 'first' (Table II) or 'kth' (Table III), got {table!r}")
    rows = list(src)
    arr = np.array([src[r] for r in rows])
    name = {"first": "Table II (first price)", "kth": "Table III (k-th price)"}[table]
    return PayoffGame(rows, list(PAPER_BETAS), arr[:, :, 0], arr[:, :, 1], title=f"paper {name}")
