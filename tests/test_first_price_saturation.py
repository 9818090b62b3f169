"""The first-price revenue decomposition of the Shudler et al. (2010) reproduction (its stored variant)."""

import numpy as np
import pytest

from marketsched.experiments.runner import Cell, evaluate_batch
from marketsched.experiments.shudler2010 import Setting, first_price_saturation

SYNTHETIC = Setting("synthetic:400:8", "synthetic", 1.0, False, 1, "syn")


def test_the_variant_reproduces_the_grid_cells_and_decomposes_their_revenue():
    sat = first_price_saturation(seeds=(1,), setting=SYNTHETIC)
    assert len(sat) == 7 * 3 and (sat.completed == sat.jobs).all()
    for r in sat.itertuples():
        cell = Cell(SYNTHETIC.trace, 1.0, False, mechanism=r.mechanism, pricing="first", behaviour="srg", beta=r.beta,
                    seed=1)
        rows, failures, _ = evaluate_batch([cell])
        assert not failures
        assert r.revenue == pytest.approx(rows.sum_payment.sum(), rel=1e-12)  # the grid's own cell
        # first price: bid per unit of time while full, 1 otherwise
        assert r.revenue == pytest.approx(r.run_time + r.bid_full_time - r.full_time, rel=1e-12)
        assert r.run_time == pytest.approx(rows.sum_runtime.sum(), rel=1e-12)  # every job ran its whole run time
        assert 0 <= r.full_time <= r.run_time
    # had every running job paid its bid, the revenue would not depend on the algorithm
    by_beta = sat.pivot(index="beta", columns="mechanism", values="always_pays")
    assert np.allclose(by_beta.to_numpy(), by_beta[["hb"]].to_numpy(), rtol=1e-12)
