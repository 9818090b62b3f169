"""How the Mutz (2008) report reads its payoff curves: peaks keep their ties, curve claims go declaration by
declaration (``marketsched.experiments.mutz``)."""

from __future__ import annotations

import numpy as np

from marketsched.analysis import verdicts as V
from marketsched.experiments.mutz import _curve_verdict, _peak

DECLARED = np.array([0.0, 100.0, 200.0, 300.0, 400.0, 470.0, 500.0, 600.0])


def _plateau(groups: int = 30) -> np.ndarray:
    """Payoffs piecewise constant in the declaration, highest on 300-500 (the truth 470 inside), other groups
    shifted by a common group effect (common random numbers)."""
    level = np.array([-5.0, -5.0, -5.0, 2.0, 2.0, 2.0, 2.0, -1.0])
    effect = np.random.default_rng(7).normal(0.0, 3.0, groups)
    return level[:, None] + effect[None, :]


def test_a_tied_peak_is_reported_as_its_range_not_as_one_declaration():
    iv, text = _peak(DECLARED, _plateau())
    assert "tied 300-500" in text
    assert iv.lo == 300.0 and iv.hi == 500.0


def test_a_single_peak_is_its_declaration():
    pay = _plateau()
    pay[3] += 1.0  # 300 alone on top
    iv, text = _peak(DECLARED, pay)
    assert text.startswith("peak 300;")
    assert iv.lo == iv.hi == 300.0


def test_a_tie_with_the_truth_does_not_establish_a_peak_away_from_it():
    pay = _plateau()
    diff = V.t_interval(pay[3] - pay[5])  # payoff at 300 minus at the truth 470: exactly 0 in every group
    assert V.judge(V.ordering(">"), diff) == V.DIFFERS


def test_curve_claim_takes_the_worst_declaration():
    pay = _plateau()
    lower = (DECLARED, pay, 470.0, None)
    verdict, ours, why = _curve_verdict(lower, V.ordering("<"), select=lambda x, t: x < 300)
    assert verdict == V.MATCH and "declarations: 3 match" in why
    pay_up = pay.copy()
    pay_up[1] += 10.0  # declaring 100 now beats the truth in every group
    verdict, ours, _ = _curve_verdict((DECLARED, pay_up, 470.0, None), V.ordering("<"), select=lambda x, t: x < 300)
    assert verdict == V.DIFFERS and ours.startswith("declared 100:")
