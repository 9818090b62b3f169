"""Bidders for the shared-resource market: ZIC and epsilon-greedy Q-learning (Stößer 2009, ch. 6).

Source: Stößer's thesis, section 6.4.1 ("Modeling the User Strategies", Algorithm 1,
"Dealing with Short Request Runtimes", "Parameterizing the Q-Learning Strategy", Table 6.3)
and appendix D.2-D.4.

Both bidders work on a **batch** of ``B`` independent runs over the same requests (the market
loop :func:`marketsched.mechanisms.online.share.simulate` and the engine policy
:class:`~marketsched.mechanisms.online.share.ShareMarketPolicy` drive them the same way):

* ``reset(values[B, N], cpus[N])`` once per run;
* ``begin(rows)`` when the set of active requests changes (``rows`` in request order);
* ``bid(u)`` each second: ``u[B, n]`` uniforms in ``[0, 1)`` (one per active request, drawn by
  the market from each run's Generator) -> bids per CPU ``[B, n]``;
* ``observe(x, bids)`` each second with the CPUs received;
* ``end()`` before the active set changes.

ZIC (Zero Intelligence Constrained)
-----------------------------------
Each second, request ``j`` bids uniformly on ``{1, 2, ..., v_j}`` (per CPU):
``bid = floor(u v_j) + 1``. It ignores the market, so under pay-as-bid PS and SH must earn the
same revenue (the thesis's sanity check). ``stateful = False``: the market may hand it many
seconds at once (``u[L, B, n]``).

Q-learning (Algorithm 1)
------------------------
* **Users**: the value range ``{low, ..., high}`` is cut into 10 intervals of
  ``(high - low + 1) // 10`` values, the last one taking the remainder (narrow ``{10..60}``:
  ``{10..14}, ..., {50..54}, {55..60}``); each interval is one user with one Q-table shared by
  all its requests (:func:`owner`).
* **States**: the share received in the last round, ``x_jt / c_j``, rounded to a whole percent
  and binned into ``{0%, 1-10%, ..., 91-100%}`` (11 bins, :func:`share_bin`).
* **Actions**: ``(b - b_min) / (v_j - b_min)`` binned the same way (11 bins); 121 Q-entries per
  user, initialised to 0.
* **Choice** (steps 3-6): during the user's first 100 rounds, or when ``beta <= epsilon``,
  explore: ``b = random(0, 1) (v_j - b_min) + b_min``; otherwise exploit:
  ``b = b_min + (k / 10) (v_j - b_min)`` with ``k = argmax_k Q(state, k)``.
* **Learning** (steps 1-2): after the round, ``reward = v_j x_jt - b_jt c_j`` and
  ``Q(s, a) <- (1 - alpha) Q(s, a) + alpha (reward + gamma max_k Q(s', k))``, ``s'`` the bin of the
  share just received, which is also the state of the next round.

Decisions (chapter 6 leaves these open; each one is a constructor argument where it could matter)
-------------------------------------------------------------------------------------------------
* ``b_min = 1`` (``v_min``): the lowest bid of ZIC's action space ``{1, ..., v_j}``.
* **Exploit bid at the bin's upper end** (``bid_point="upper"``: bin ``k`` -> ratio ``k/10``, so
  bin 0 is the minimum bid and bin 10 the true value); Algorithm 1 multiplies the argmax by
  ``v_j - b_min``, which reads as the bin's percentage. ``"centre"`` uses ``(k - 0.5)/10``.
* **Ties in the argmax go to the lowest bin**: with a zero-initialised table an unexplored state
  bids the minimum, which is the "short drop" of the mean bid after a rise in demand that the
  thesis explains this way (section 6.4.1, Figure 6.3).
* **One uniform per request and second** serves both random choices of Algorithm 1: explore iff
  ``u <= epsilon``, and then the exploration ratio is ``u / epsilon``, which is uniform on
  ``[0, 1]`` given ``u <= epsilon`` (in the first 100 rounds the ratio is ``u``). Same
  distribution as two draws, half the random numbers.
* **"First 100 bidding rounds"** are counted per user: a round counts when the user has at least
  one active request in it.
* **A new request starts in state 0** (it has received nothing yet).
* **Several requests of one user in one round** update the shared table one after another in
  request order, each target using the table as left by the previous one (exactly sequential;
  implemented in layers: the k-th request of every user in layer k).
* **Reward** uses the exact share and bid (money), the table indices use the bins.
"""

from __future__ import annotations

import itertools

import numpy as np

N_USERS = 10
N_BINS = 11
#: Bin of a whole percent 0..100: {0%, 1-10%, ..., 91-100%} -> 0..10.
_BIN = (np.arange(101) + 9) // 10
#: Table 6.3: the tested parameter values.
ALPHAS = (0.1, 0.3, 0.5, 0.7)
GAMMAS = (0.3, 0.5, 0.7)
EPSILONS = (0.05, 0.15, 0.25)
#: The combination chosen in section 6.4.1 and used for tables 6.4-6.6.
CHOSEN = {"alpha": 0.3, "gamma": 0.3, "epsilon": 0.05}
#: The two valuation distributions of section 6.4.1 (uniform on the integers, both ends included).
VALUE_RANGES = {"narrow": (10, 60), "wide": (10, 160)}


def parameter_grid() -> list[dict]:
    """The 36 combinations of Table 6.3, in the order of Tables D.1-D.3 (alpha, gamma, epsilon)."""
    return [{"alpha": a, "gamma": g, "epsilon": e} for a, g, e in itertools.product(ALPHAS, GAMMAS, EPSILONS)]


def interval_width(low: int, high: int, n_users: int = N_USERS) -> int:
    """Values per user interval: ``(high - low + 1) // n_users`` (the last interval takes the rest)."""
    if int(low) != low or int(high) != high or high < low:
        raise ValueError(f"interval_width: need whole numbers low <= high, got {low!r}, {high!r}")
    if n_users < 1 or (high - low + 1) < n_users:
        raise ValueError(f"interval_width: {n_users} users need at least as many values in {{{low}..{high}}}")
    return (int(high) - int(low) + 1) // n_users


def value_intervals(low: int, high: int, n_users: int = N_USERS) -> list[tuple[int, int]]:
    """The users' value intervals, e.g. narrow: ``[(10, 14), (15, 19), ..., (55, 60)]``."""
    w = interval_width(low, high, n_users)
    out = [(low + i * w, low + (i + 1) * w - 1) for i in range(n_users)]
    out[-1] = (out[-1][0], int(high))
    return out


def owner(values, low, high, n_users: int = N_USERS) -> np.ndarray:
    """The user (0..n_users-1) owning each value: ``min((v - low) // width, n_users - 1)``.

    ``low`` and ``high`` may be arrays broadcasting against ``values`` (one range per run).
    Values outside ``[low, high]`` raise ``ValueError``.
    """
    v = np.asarray(values, dtype=np.float64)
    lo = np.asarray(low, dtype=np.float64)
    hi = np.asarray(high, dtype=np.float64)
    lo_b, hi_b = np.broadcast_arrays(lo, hi)
    for a, b in zip(lo_b.ravel(), hi_b.ravel()):
        interval_width(a, b, n_users)
    width = np.floor((hi - lo + 1) / n_users)
    bad = (v < lo) | (v > hi)
    if np.any(bad):
        i = np.argwhere(bad)[0]
        raise ValueError(f"owner: value {v[tuple(i)]!r} at {tuple(int(k) for k in i)} is outside its range [{low}, {high}]")
    return np.minimum(np.floor((v - lo) / width), n_users - 1).astype(np.int64)


def share_bin(ratio) -> np.ndarray:
    """Bin of a ratio in [0, 1]: round to a whole percent, then ``{0%, 1-10%, ..., 91-100%}`` -> 0..10.

    Footnote 10: ratios are rounded to whole percents, so a small positive share can be 0%.
    """
    pct = np.floor(np.asarray(ratio, dtype=np.float64) * 100.0 + 0.5).astype(np.int64)
    return (np.clip(pct, 0, 100) + 9) // 10


def _per_run(x, B: int, name: str) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    if a.ndim == 0:
        a = np.full(B, float(a))
    if a.shape != (B,):
        raise ValueError(f"QLearning: {name} must be a number or one per run ({B}), got shape {a.shape}")
    return a


class ZIC:
    """Zero Intelligence Constrained bidder (section 6.4.1): bid uniform on ``{1, ..., v_j}``.

    Non-integer values bid on ``{1, ..., floor(v_j)}``; values below 1 raise ``ValueError``.
    """

    stateful = False

    def reset(self, values, cpus) -> None:
        v = np.asarray(values, dtype=np.float64)
        if np.any(v < 1):
            raise ValueError(f"ZIC: values must be >= 1 (bids are drawn from {{1..v}}); first bad at {np.argwhere(v < 1)[0].tolist()}")
        self.top = np.floor(v)

    def begin(self, rows) -> None:
        self.v = self.top[:, rows]

    def bid(self, u) -> np.ndarray:
        b = np.multiply(u, self.v)  # min(floor(u v) + 1, v), one array for every step
        np.floor(b, out=b)
        b += 1.0
        return np.minimum(b, self.v, out=b)

    def observe(self, x, bids) -> None:
        pass

    def end(self) -> None:
        pass


class QLearning:
    """Epsilon-greedy Q-learning bidders with 10 users owning value intervals (Algorithm 1).

    Parameters may be numbers or one value per run (the parameter grid of Table 6.3 runs as one
    batch): ``alpha`` learning rate, ``gamma`` discount, ``epsilon`` exploration probability,
    ``low``/``high`` the valuation range that is cut into the users' intervals. See the module
    docstring for the steps and decisions.
    """

    stateful = True

    def __init__(self, alpha=0.3, gamma=0.3, epsilon=0.05, *, low=10, high=160, n_users: int = N_USERS,
                 v_min: float = 1.0, explore_rounds: int = 100, bid_point: str = "upper"):
        for name, val, lo, hi in (("alpha", alpha, 0, 1), ("gamma", gamma, 0, 1), ("epsilon", epsilon, 0, 1)):
            arr = np.asarray(val, dtype=np.float64)
            if not np.all((arr > lo) & (arr < hi)):
                raise ValueError(f"QLearning: {name} must lie in (0, 1), got {val!r}")
        if bid_point not in ("upper", "centre"):
            raise ValueError(f"QLearning: bid_point must be 'upper' or 'centre', got {bid_point!r}")
        if int(explore_rounds) != explore_rounds or explore_rounds < 0:
            raise ValueError(f"QLearning: explore_rounds must be a whole number >= 0, got {explore_rounds!r}")
        if not (v_min >= 0):
            raise ValueError(f"QLearning: v_min must be >= 0, got {v_min!r}")
        self.params = {"alpha": alpha, "gamma": gamma, "epsilon": epsilon, "low": low, "high": high}
        self.n_users = int(n_users)
        self.v_min = float(v_min)
        self.explore_rounds = int(explore_rounds)
        self.bid_point = bid_point
        k = np.arange(N_BINS, dtype=np.float64)
        self.ratio_of_bin = k / 10.0 if bid_point == "upper" else np.maximum(k - 0.5, 0.0) / 10.0

    # ------------------------------------------------------------------ run set-up
    def reset(self, values, cpus) -> None:
        v = np.asarray(values, dtype=np.float64)
        B, N = v.shape
        p = {k: _per_run(self.params[k], B, k) for k in self.params}
        if np.any(v < self.v_min):
            raise ValueError(f"QLearning: values must be >= v_min = {self.v_min}")
        self.B, self.N = B, N
        self.values = v
        self.cpus = np.asarray(cpus, dtype=np.float64)
        self.users = owner(v, p["low"][:, None], p["high"][:, None], self.n_users)
        self.alpha = p["alpha"][:, None]
        self.keep = 1.0 - self.alpha
        self.gamma = p["gamma"][:, None]
        self.epsilon = p["epsilon"][:, None]
        n_rows = B * self.n_users * N_BINS  # one row of the table per (run, user, state)
        self.q = np.zeros((n_rows, N_BINS))
        self.vmax = np.zeros(n_rows)  # max_k Q[row, k], kept up to date
        self.amax = np.zeros(n_rows, dtype=np.intp)  # its first argmax (ties: lowest bin)
        self.rounds = np.zeros(B * self.n_users, dtype=np.int64)
        self.state = np.zeros((B, N), dtype=np.intp)
        self._rows = None

    def table(self, run: int, user: int) -> np.ndarray:
        """The 11 x 11 Q-table (state x action) of one user in one run (a view)."""
        base = (run * self.n_users + user) * N_BINS
        return self.q[base:base + N_BINS]

    # ------------------------------------------------------------------ segments
    def begin(self, rows) -> None:
        B = self.B
        rows = np.asarray(rows, dtype=np.int64)
        n = len(rows)
        self._rows = rows
        self.v = self.values[:, rows]
        self.span = self.v - self.v_min
        self.c = self.cpus[rows]
        self.k100 = 100.0 / self.c
        bu = np.arange(B)[:, None] * self.n_users + self.users[:, rows]  # (run, user) index
        self.present = np.unique(bu)
        self.rowbase = bu * N_BINS
        self.r = self.rowbase + self.state[:, rows]  # current table row (run, user, state)
        # forced exploration: the users' first explore_rounds rounds
        self.k = 0
        self.start_rounds = self.rounds[bu]
        self.force_until = self.explore_rounds - int(self.start_rounds.min())
        # layers: the k-th request (in request order) of each (run, user) goes to layer k
        flat = bu.ravel()
        order = np.argsort(flat, kind="stable")
        sf = flat[order]
        start = np.r_[True, sf[1:] != sf[:-1]]
        first_pos = np.maximum.accumulate(np.where(start, np.arange(len(sf)), 0))
        rank = np.empty(len(sf), dtype=np.int64)
        rank[order] = np.arange(len(sf)) - first_pos
        depth = int(rank.max()) + 1 if len(rank) else 0
        self.layers = None if depth <= 1 else [np.flatnonzero(rank == k) for k in range(depth)]
        if self.layers is not None:
            self._keep_f = np.broadcast_to(self.keep, (B, n)).ravel()
            self._alpha_f = np.broadcast_to(self.alpha, (B, n)).ravel()
            self._gamma_f = np.broadcast_to(self.gamma, (B, n)).ravel()

    def end(self) -> None:
        if self._rows is not None:
            self.state[:, self._rows] = self.r - self.rowbase
            self.rounds[self.present] += self.k
            self._rows = None

    # ------------------------------------------------------------------ one second
    def bid(self, u) -> np.ndarray:
        """Algorithm 1, steps 3-6: explore or exploit; returns bids per CPU ``[B, n]``."""
        greedy = self.amax[self.r]
        if self.k < self.force_until:
            forced = self.start_rounds + self.k < self.explore_rounds
            explore = forced | (u <= self.epsilon)
            ratio = np.where(explore, np.where(forced, u, u / self.epsilon), self.ratio_of_bin[greedy])
            self.a = np.where(explore, _BIN[(ratio * 100.0 + 0.5).astype(np.intp)], greedy)
        else:
            explore = u <= self.epsilon
            ratio = self.ratio_of_bin[greedy]
            if explore.any():
                ratio = np.where(explore, u / self.epsilon, ratio)
                self.a = np.where(explore, _BIN[(ratio * 100.0 + 0.5).astype(np.intp)], greedy)
            else:
                self.a = greedy
        self.k += 1
        return self.v_min + ratio * self.span

    def observe(self, x, bids) -> None:
        """Algorithm 1, steps 1-2: reward and Q update; the share received is the next state."""
        reward = self.v * x - bids * self.c
        r_next = self.rowbase + _BIN[(x * self.k100 + 0.5).astype(np.intp)]
        if self.layers is None:
            self._update(self.r, self.a, reward, r_next, self.keep, self.alpha, self.gamma)
        else:
            r, a, rw, rn = self.r.ravel(), self.a.ravel(), reward.ravel(), r_next.ravel()
            for pos in self.layers:
                self._update(r[pos], a[pos], rw[pos], rn[pos], self._keep_f[pos], self._alpha_f[pos], self._gamma_f[pos])
        self.r = r_next

    def _update(self, r, a, reward, r_next, keep, alpha, gamma) -> None:
        """``Q[r, a] <- (1 - alpha) Q[r, a] + alpha (reward + gamma max_k Q[r_next, k])``; rows distinct.

        ``vmax``/``amax`` (row maximum and its first argmax) are kept up to date: a new value at
        or above the maximum takes over (ties to the lower bin), and a row whose maximum fell is
        rescanned.
        """
        q = self.q
        y = keep * q[r, a] + alpha * (reward + gamma * self.vmax[r_next])
        q[r, a] = y
        vm = self.vmax[r]
        am = self.amax[r]
        up = (y > vm) | ((y == vm) & (a < am))
        if up.any():
            ru = r[up]
            self.vmax[ru] = y[up]
            self.amax[ru] = a[up]
        down = (a == am) & (y < vm)
        if down.any():
            rd = r[down]
            rows = q[rd]
            self.vmax[rd] = rows.max(axis=1)
            self.amax[rd] = rows.argmax(axis=1)


BIDDERS = ("zic", "q-learning")


def make_bidder(name: str, values) -> ZIC | QLearning:
    """The share markets' bidder ``name`` ("zic" or "q-learning") for requests with ``values``:
    ZIC, or Q-learning with the chosen parameters (:data:`CHOSEN`) on the value range
    ``floor(min v) .. ceil(max v)`` (Stößer (2009), section 6.4.1); used by the simulated and
    the live share markets alike."""
    if name == "zic":
        return ZIC()
    if name == "q-learning":
        v = np.asarray(values, dtype=np.float64)
        return QLearning(alpha=CHOSEN["alpha"], gamma=CHOSEN["gamma"], epsilon=CHOSEN["epsilon"],
                         low=int(np.floor(v.min())), high=int(np.ceil(v.max())))
    raise ValueError(f"unknown bidder {name!r}; use one of {', '.join(BIDDERS)}")
