"""Static games over matrices.

``fixed_budget`` (Feldman, Lai & Zhang 2005: the Tycoon fixed-budget proportional-share
game), ``best_response`` (sections 4.1-4.3), ``dynamics`` (section 5), ``metrics`` (sections 2, 3,
4.2 and the section 5.1 baselines).
"""

from marketsched.mechanisms.games.best_response import best_response, greedy_step, kkt_violation, local_search
from marketsched.mechanisms.games.dynamics import DynamicsResult, is_equilibrium, regrets, run_dynamics
from marketsched.mechanisms.games.fixed_budget import (
    DEFAULT_RESERVE,
    FixedBudgetGame,
    correlated_game,
    equal_weight_game,
    opposite_weight_game,
    uniform_game,
    weight_proportional_bids,
    worst_case_game,
)
from marketsched.mechanisms.games.metrics import envy_freeness, evaluate, social_optimum, utility_uniformity

__all__ = [
    "DEFAULT_RESERVE", "DynamicsResult", "FixedBudgetGame", "best_response", "correlated_game", "envy_freeness",
    "equal_weight_game", "evaluate", "greedy_step", "is_equilibrium", "kkt_violation", "local_search",
    "opposite_weight_game", "regrets", "run_dynamics", "social_optimum", "uniform_game", "utility_uniformity",
    "weight_proportional_bids", "worst_case_game",
]
