"""Empirical designer-vs-users games (Shudler et al. 2010, section V): pure Nash equilibria and payoffs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from marketsched.analysis.games import (
    PAPER_BETAS,
    PayoffGame,
    games_from_results,
    normalise,
    paper_game,
    per_seed_payoffs,
    pure_nash,
)


def naive_nash(d, u):
    out = []
    for i in range(d.shape[0]):
        for j in range(d.shape[1]):
            if all(d[i, j] >= d[k, j] for k in range(d.shape[0])) and all(u[i, j] >= u[i, k] for k in range(d.shape[1])):
                out.append((i, j))
    return out


def test_prisoners_dilemma_has_one_equilibrium():
    # row player payoffs, column player payoffs; strategies (cooperate, defect)
    d = np.array([[3, 0], [5, 1]])
    u = np.array([[3, 5], [0, 1]])
    assert pure_nash(d, u) == [(1, 1)]


def test_matching_pennies_has_none_and_coordination_has_two():
    d = np.array([[1, -1], [-1, 1]])
    assert pure_nash(d, -d) == []
    c = np.array([[2, 0], [0, 1]])
    assert pure_nash(c, c) == [(0, 0), (1, 1)]


def test_ties_and_tolerance():
    d = np.array([[1.0, 0.0], [1.0, 0.0]])
    u = np.array([[1.0, 0.5], [1.0, 0.5]])
    assert pure_nash(d, u) == [(0, 0), (1, 0)]  # exact ties: both rows best-respond
    d2 = np.array([[1.0, 0.0], [0.999, 0.0]])
    assert pure_nash(d2, u) == [(0, 0)]
    assert pure_nash(d2, u, atol=0.002) == [(0, 0), (1, 0)]


def test_paper_table_ii_first_price_equilibrium():
    assert paper_game("first").equilibria() == [("hb", 0.5)]


def test_paper_table_iii_kth_price_equilibria():
    g = paper_game("kth")
    assert g.equilibria() == [("wspt", 0.7)]
    assert g.without("wspt").equilibria() == [("nphb", 0.25)]


def test_paper_tables_combined_have_one_equilibrium():
    """Both tables share a normalisation, so they form one 6x7 game (section V)."""
    first, kth = paper_game("first"), paper_game("kth")
    d = np.vstack([first.designer, kth.designer])
    u = np.vstack([first.users, kth.users])
    assert pure_nash(d, u) == [(0, 2)]  # HB + first price, beta 50%


def test_paper_layout_marks_the_equilibrium():
    df = paper_game("first").to_frame()
    assert list(df.columns) == ["Alg", "5%", "25%", "50%", "60%", "70%", "80%", "90%"]
    assert df.loc[0, "50%"] == "0.976, 0.845 *"
    assert df.loc[0, "5%"] == "1.000, 0.833"
    assert sum(cell.endswith("*") for cell in df.iloc[:, 1:].to_numpy().ravel()) == 1
    assert "| HB | 1.000, 0.833 |" in paper_game("first").to_markdown()


@settings(max_examples=150, deadline=None)
@given(
    shape=st.tuples(st.integers(1, 5), st.integers(1, 6)),
    data=st.data(),
)
def test_scan_matches_naive_definition_and_is_invariant_under_normalisation(shape, data):
    vals = st.integers(-5, 5).map(float)  # small integers: plenty of ties
    d = data.draw(arrays(np.float64, shape, elements=vals))
    u = data.draw(arrays(np.float64, shape, elements=vals))
    assert pure_nash(d, u) == naive_nash(d, u)
    # the joint normalisation (d / max d, u_best / u) is increasing: same equilibria
    g = PayoffGame(range(shape[0]), range(shape[1]), d + 11.0, u - 11.0)  # d > 0, u < 0
    n = normalise({"g": g})["g"]
    assert n.designer.max() == pytest.approx(1.0) and n.users.max() == pytest.approx(1.0)
    assert (n.users <= 1.0 + 1e-12).all()
    assert pure_nash(n.designer, n.users) == naive_nash(d, u)


def test_bad_input():
    with pytest.raises(ValueError, match="shape"):
        pure_nash(np.ones((2, 2)), np.ones((2, 3)))
    with pytest.raises(ValueError, match="NaN"):
        PayoffGame(["a"], [0.5], [[np.nan]], [[1.0]])
    with pytest.raises(ValueError, match="expected"):
        PayoffGame(["a", "b"], [0.5], [[1.0]], [[1.0]])
    with pytest.raises(ValueError, match="no row 'x'"):
        paper_game("first").without("x")
    with pytest.raises(ValueError, match="negative utilities"):
        normalise({"g": PayoffGame(["a"], [1], [[1.0]], [[0.5]])})
    with pytest.raises(ValueError, match="Table II"):
        paper_game("second")


def _fake_results():
    """A hand-made results table: 2 seeds, 2 algorithms, 2 betas, 2 pricings, groups B and C."""
    rows = []
    rng = np.random.default_rng(0)
    for seed in (1, 2):
        for pricing in ("first", "kth"):
            for mech in ("hb", "nphb"):
                for beta in (0.05, 0.5):
                    for group in ("B", "C"):
                        for bidder in ("aggressive", "conservative"):
                            rows.append(dict(trace="t", seed=seed, pricing=pricing, mechanism=mech, beta=beta,
                                             behaviour="srg", runtime_group=group, bidder=bidder,
                                             completed=int(rng.integers(1, 10)),
                                             sum_payment=float(rng.uniform(1, 10)),
                                             sum_wflow=float(rng.uniform(10, 20)),
                                             sum_utility=-float(rng.uniform(10, 30))))
    return pd.DataFrame(rows)


def test_payoffs_from_a_results_table():
    df = _fake_results()
    ps = per_seed_payoffs(df, algorithms=("hb", "nphb"), betas=(0.05, 0.5), designer_scope="group")
    # recompute one cell by hand
    sel = df[(df.seed == 2) & (df.pricing == "kth") & (df.mechanism == "nphb") & (df.beta == 0.5)]
    c = sel[sel.runtime_group == "C"]
    a = c[c.bidder == "aggressive"]
    assert ps.loc[("kth", "nphb", 0.5, 2), "designer"] == pytest.approx(c.sum_payment.sum() / c.sum_wflow.sum())
    assert ps.loc[("kth", "nphb", 0.5, 2), "users"] == pytest.approx(a.sum_utility.sum() / a.completed.sum())
    ps_all = per_seed_payoffs(df, algorithms=("hb", "nphb"), betas=(0.05, 0.5))  # default: all jobs
    assert ps_all.loc[("kth", "nphb", 0.5, 2), "designer"] == pytest.approx(sel.sum_payment.sum() / sel.sum_wflow.sum())

    games, raw = games_from_results(df, algorithms=("hb", "nphb"), betas=(0.05, 0.5), designer_scope="group")
    assert set(games) == {"first", "kth"}
    assert max(g.designer.max() for g in games.values()) == pytest.approx(1.0)
    assert max(g.users.max() for g in games.values()) == pytest.approx(1.0)
    mean = ps.xs(("first", "hb", 0.5), level=("pricing", "mechanism", "beta"))["users"].mean()
    assert raw.loc[("first", "hb", 0.5), "users"] == pytest.approx(mean)
    assert raw.loc[("first", "hb", 0.5), "seeds"] == 2
    assert np.isfinite(raw["users_ci"]).all()
    # equilibria of the normalised game equal those of the raw means
    g = games["kth"]
    rawk = raw.xs("kth", level="pricing")
    d = rawk["designer"].unstack("beta").reindex(index=g.rows).to_numpy()
    u = rawk["users"].unstack("beta").reindex(index=g.rows).to_numpy()
    assert g.equilibria() == [(g.rows[i], g.cols[j]) for i, j in pure_nash(d, u)]


def test_payoffs_bad_filters():
    df = _fake_results()
    with pytest.raises(ValueError, match="no column 'nodes'"):
        per_seed_payoffs(df, nodes=3)
    with pytest.raises(ValueError, match="no 'srg' cells"):
        per_seed_payoffs(df, trace="other")
    with pytest.raises(ValueError, match="designer_scope"):
        per_seed_payoffs(df, designer_scope="some")


def test_paper_betas():
    assert paper_game("kth").cols == list(PAPER_BETAS)
