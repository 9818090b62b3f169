"""The built-in online mechanisms, registered under their names (imported by the registry).

Each entry only connects a mechanism implemented elsewhere to the common contract of
:mod:`marketsched.mechanisms.registry`: it turns the scenario's jobs
(:class:`marketsched.scenario.Jobs`: workload, true values, bids, deadlines, minimum
reliabilities, seed) into the inputs the mechanism's own module takes. Where a paper does
not say how its inputs arise from a trace, the decision is stated at the entry.

Where each can run (``live`` field): the live market (``marketsched market serve``) runs the
priority markets of Shudler et al. (2010) on real processes (local or Slurm); the others are
simulated only, for the reason given in their entry.
"""

from __future__ import annotations

import numpy as np

from marketsched.mechanisms.registry import Claim, Mechanism, Param, register

PRICING = Param("pricing", str, "kth", "payment per second of running time: k-th price or first price "
                "(Shudler et al. (2010), section IV); kth-uncapped: WSPT's and WSEPT's k-th price "
                "without the cap at the bid (an open choice of section V, for sensitivity runs; not in the live market)", ("kth", "first", "kth-uncapped"))
LIVE_PRIORITY = ("yes: `marketsched market serve --mechanism {name}` (local or Slurm executor); its events and "
                 "payments are the simulator's (same policy object)")


# ---------------------------------------------------------------------------- priority markets
def _priority(rule: str):
    def build(jobs, pricing):
        from marketsched.mechanisms.online.priority import make_priority_mechanism

        return make_priority_mechanism(rule, jobs.workload, jobs.bid, pricing)

    return build


_PRIORITY = [
    ("hb", "Highest-Bid", "Shudler et al. (2010), section II.A, Algorithm 1 (Highest-Bid); payments section IV",
     "preemptive: the highest bids run", LIVE_PRIORITY.format(name="hb")),
    ("nphb", "Non-preemptive Highest-Bid", "Shudler et al. (2010), section III.B (NPHB); k-th price section V",
     "highest queued bid starts when a node frees", LIVE_PRIORITY.format(name="nphb")),
    ("wspt", "Weighted Shortest Processing Time", "Shudler et al. (2010), section III.B (WSPT, Smith's rule); "
     "k-th price section V", "highest bid / actual run time first (clairvoyant)",
     "as WSEPT only: a live job's run time is unknown before it ends, so `--mechanism wspt` orders by the "
     "estimate"),
    ("wsept", "Weighted Shortest Expected Processing Time", "Shudler et al. (2010), section III.B (WSEPT)",
     "highest bid / run-time estimate first (the actual run time where a job has no estimate)",
     LIVE_PRIORITY.format(name="wsept") + "; jobs give an estimate at submission"),
]
for _name, _title, _source, _summary, _live in _PRIORITY:
    register(Mechanism(_name, _title, "priority market", _source, _priority(_name), (PRICING,), ("bids", "serial"),
                       ("estimates",) if _name == "wsept" else (), summary=_summary, live=_live))


# ---------------------------------------------------------------------------- DLGM
def _dlgm(preemptive: bool):
    def build(jobs, node_choice, start_rule):
        from marketsched.mechanisms.online.dlgm import make_dlgm

        return make_dlgm(jobs.workload, jobs.bid, preemptive=preemptive, true_value=jobs.true_value,
                         node_choice=node_choice, start_rule=start_rule, node_rank=jobs.node_rank)

    return build


DLGM_PARAMS = (
    Param("node_choice", str, "true", "the weight a job picks its node with: its true value (its myopic best "
          "response, Stößer (2009), Theorem 1) or its report", ("true", "report")),
    Param("start_rule", str, "immediate", "jobs arriving together: an idle node starts the first at once "
          "(the reading of Stößer (2009), Appendix C), or all join queues before idle nodes start",
          ("immediate", "after-arrivals")),
)


DLGM_CLAIMS = (
    Claim("reporting the true weight (and choosing the best node) is a myopic best response", "myopic",
          ("value", "node"),
          "Stößer (2009), Theorems 1 and 3 (after Heydenreich, Müller & Uetz (2006)); Theorem 5: no payment "
          "scheme makes it truthful in dominant strategies"),
    Claim("with a true weight, reporting the true release time is dominant", "dominant", ("delay",),
          "Stößer (2009), Appendix C (after Heydenreich, Müller & Uetz (2006))"),
)
_DLGM_LIVE = ("live local: `market serve --mechanism dlgm` (pdlgm for P-DLGM), each slot a node with its own queue, "
              "the same policy object as the simulator; jobs submit a weight and a reported run time "
              "(`market submit --bid W --runtime D`, optionally --node), `market quote` shows every node's utility, "
              "compensations are ledger transfers between owners, a job is stopped at its reported run time, "
              "`market cancel` takes a waiting job out (no money moves; a running job is not cancelled), and a "
              "served run replays through the simulator, cancellations included (docs/dlgm.md); live Slurm: "
              "`--executor slurm`, each DLGM node a Slurm node (sbatch -w NODE, P-DLGM preempts with scontrol "
              "suspend/resume)")
register(Mechanism("dlgm", "Decentralized Local Greedy Mechanism", "compensation market",
                   "Stößer (2009), section 5.3 (Heydenreich, Müller & Uetz (2006))", _dlgm(False), DLGM_PARAMS,
                   ("bids", "serial"), ("node-choice",), summary="each job picks the node with the best tentative utility; "
                   "it pays the jobs it overtakes", live=_DLGM_LIVE, claims=DLGM_CLAIMS))
register(Mechanism("pdlgm", "Preemptive DLGM", "compensation market", "Stößer (2009), section 5.4", _dlgm(True),
                   DLGM_PARAMS, ("bids", "serial"), ("node-choice",), summary="DLGM with preemption by remaining-run-time ratio", live=_DLGM_LIVE,
                   claims=DLGM_CLAIMS))


# ---------------------------------------------------------------------------- EES
EES_PARAMS = (
    Param("n_draws", int, 100, "Monte Carlo draws per expectation of the payments (Mutz (2008), eq. 4.4)"),
    Param("estimator", str, "shared", "estimator of the expectations: 'shared' (one set of draws per decision "
          "for every job's expectation; payments balance exactly), 'cached' (independent draws per job; balance "
          "exactly; work grows with the square of the queue) or 'naive' (the thesis's nesting, section 4.1.3)",
          ("shared", "cached", "naive")),
    Param("prior_points", int, 64, "the declared prior: the jobs' values and delay costs summarised by this many "
          "equally likely quantiles"),
)


def equal_quantiles(x, k: int):
    """The prior of the ``k`` equally likely quantile midpoints of ``x`` (an
    :class:`~marketsched.mechanisms.online.ees.EqualPoints`)."""
    from marketsched.mechanisms.online.ees import EqualPoints

    mid = (np.arange(k) + 0.5) / k
    return EqualPoints(tuple(np.quantile(x, mid).tolist()), tuple([1.0 / k] * k))


def ees_types(jobs, prior_points: int = 64):
    """EES inputs from the scenario: ``(value, delay_cost, prior)``, delay costs per second.

    Decision (Mutz (2008) gives types, not traces): a job's delay cost is its value per second
    of waiting, ``d_j = w_j`` (the weight of Shudler et al. (2010), Eq. 2, and of DLGM), and
    the value of running it is what waiting until its deadline would cost,
    ``v_j = w_j x (deadline_j - submit_j)``: a job would rather be discarded than wait past
    its deadline. Reports are truthful (``w`` = the bids). The declared prior (the
    expected-externality payments of Mutz (2008), eq. 4.4, assume types are drawn from it) is
    the jobs' own distribution: ``prior_points`` equally likely quantile midpoints of the v's and of the
    d's (the payments sample one job's v or another job's d, never both of one job, so the
    marginals are all they use).
    """
    from marketsched.mechanisms.online.ees import TypePrior

    if not (isinstance(prior_points, int) and prior_points >= 1):
        raise ValueError(f"EES: prior_points must be a whole number >= 1, got {prior_points!r}")
    w = np.asarray(jobs.bid, dtype=np.float64)
    v = w * (jobs.deadline - jobs.workload.submit_time)
    return v, w, TypePrior(value=equal_quantiles(v, prior_points), delay_cost=equal_quantiles(w, prior_points))


def ees_utility(jobs, run):
    """Realised utility ``v 1{completed} - d x queue time - payment`` with the true types
    (Mutz (2008), eqs. 4.5-4.6 and 6.5-6.6; :func:`ees_types` for v and d)."""
    from marketsched.mechanisms.online.ees_driver import realised_utility

    w = jobs.true_value
    v = w * (jobs.deadline - jobs.workload.submit_time)
    return realised_utility(jobs.workload, run.records, v, w, time_unit=1.0)


def _ees(relaxed: bool):
    def build(jobs, n_draws, estimator, prior_points, compress=True):
        from marketsched.mechanisms.online.ees_driver import EESPolicy, RelaxedEESPolicy

        v, d, prior = ees_types(jobs, prior_points)
        kw = dict(n_draws=n_draws, estimator=estimator, seed=int(jobs.seed), time_unit=1.0)
        if relaxed:
            return RelaxedEESPolicy(v, d, prior, compress=compress, **kw)
        return EESPolicy(v, d, prior, **kw)

    return build


def _whole_machine(jobs):
    from marketsched.scenario import whole_machine

    return whole_machine(jobs), "whole machine"


_EES_LIVE = ("yes: `marketsched market serve --mechanism {name}` (marketsched.live.ees_service) serves it on the "
             "platform's API, page and ledger, and `marketsched market ees JOBS --mechanism {name}` runs a file of "
             "submissions in the foreground; both run the simulator's policy object "
             "(marketsched.live.ees.EESMarket) on this machine's processes: jobs report a value, a delay cost per "
             "second (or a patience) and a run time{cpus} (`market submit --value V --delay-cost D --runtime R`), "
             "each decision's expected-externality payments go on the ledger, discarded jobs are told why "
             "(`market status`), the draws are seeded and recorded, and the run replays through the simulator to the "
             "same decisions and payments; local executor only (docs/mutz_auctions.md)")
register(Mechanism("ees", "Expected Externality Scheduler", "queue auction", "Mutz (2008), chapter 4 (eqs. 4.1-4.6)",
                   _ees(False), EES_PARAMS, ("bids", "deadlines"), ("estimates",),
                   summary="one job at a time holds the whole machine (the built-in workload gives each job the machine "
                           "for its processor-seconds / P; a trace's narrow jobs leave the rest idle and a long queue "
                           "discards most of them); the head runs if its value beats the delay it causes",
                   live=_EES_LIVE.format(name="ees", cpus=" (a job holds every CPU)"), utility=ees_utility,
                   form=_whole_machine,
                   claims=(Claim("reporting the true value is a Bayes-Nash equilibrium", "bayes-nash",
                                 ("value", "deadline"),
                                 "Mutz (2008), section 4 (the expected externality mechanism of d'Aspremont & "
                                 "Gérard-Varet); assumes full-width jobs, a known prior, no collusion"),)))
register(Mechanism("relaxed-ees", "Relaxed EES", "queue auction", "Mutz (2008), chapter 6 (eqs. 6.1-6.6)",
                   _ees(True), EES_PARAMS + (Param("compress", bool, True, "move committed starts up when jobs end "
                                                   "early (conservative-backfilling compression)"),),
                   ("bids", "deadlines"), ("estimates",), summary="EES with node counts and planned starts",
                   live=_EES_LIVE.format(name="relaxed-ees", cpus=" and a CPU count (packed)"), utility=ees_utility))


# ---------------------------------------------------------------------------- share markets
SHARE_PARAMS = (
    Param("bidder", str, "zic", "bidding behaviour each second: ZIC or Q-learning (Stößer (2009), section 6.4.1, "
          "Algorithm 1)", ("zic", "q-learning")),
    Param("pool", float, 0.0, "CPUs the market divides (0: the machine's processors)"),
    Param("basis", str, "total", "bids enter the rule as totals b x c or per CPU b", ("total", "per_cpu")),
)


def share_utility(jobs, run):
    """``v x CPU-seconds received - payment`` (Stößer (2009), section 6.4.1)."""
    return run.policy.utility


def _share(rule: str):
    def build(jobs, bidder, pool, basis):
        from marketsched.behaviour.learning import make_bidder
        from marketsched.mechanisms.online.share import ShareMarketPolicy

        # the bidders bid from the reported values (jobs.bid: the true ones unless a job lies, as
        # under `marketsched audit`); the utilities use the true values
        v, reported = jobs.true_value, np.asarray(jobs.bid, dtype=np.float64)
        policy = ShareMarketPolicy(rule, make_bidder(bidder, reported), v,
                                   capacity=pool or float(jobs.workload.capacity), rng=int(jobs.seed), basis=basis,
                                   reported=reported)
        # the engine's processors are virtual slots: every active request runs (share.run_on_engine)
        policy.engine_capacity = max(1, int(jobs.workload.procs.sum()))
        return policy

    return build


_SHARE_LIVE = ("yes: `marketsched market share --rule {name}` divides one CPU among CPU-bound jobs every period "
               "with the simulator's rule (cgroup CPU weights, Tycoon mode's machinery), or a pool of N CPUs with "
               "--cpus N (each serial job gets min(1, share x N) CPUs, the excess wasted as in the thesis; enforced by "
               "pinning jobs to CPUs, CPU quotas and weights); its page with --serve; fixed bids or the ZIC "
               "or Q-learning bidder, pay-as-bid (booked in a market's ledger with --data, exactly once, bids capped at "
               "balances); the recorded bids replay through the simulator to the same shares and payments")
register(Mechanism("ps", "Proportional Share", "share market", "Stößer (2009), sections 6.2.2 and 6.4.1",
                   _share("ps"), SHARE_PARAMS, ("whole-seconds", "values>=1"),
                   summary="each job gets bid / sum of bids of the CPUs, pays its bid", live=_SHARE_LIVE.format(name="ps"),
                   utility=share_utility))
register(Mechanism("sh", "Sanghavi-Hajek", "share market", "Stößer (2009), section 6.2.3 (Sanghavi & Hajek (2004))",
                   _share("sh"), SHARE_PARAMS, ("whole-seconds", "values>=1"),
                   summary="shares by the Sanghavi-Hajek integral, pay as bid", live=_SHARE_LIVE.format(name="sh"),
                   utility=share_utility))


# ---------------------------------------------------------------------------- Egg
EGG_PARAMS = (
    Param("providers", str, "mixed", "the providers' pricing: the mix of the Kang & Parkes (2007) reproduction, or "
          "all static, capped or load-aware", ("mixed", "static", "capped", "load-aware")),
    Param("price_level", float, 0.5, "providers' price per estimated CPU-second, as a fraction of the jobs' mean "
          "value per second"),
    Param("reprice_every", float, 300.0, "seconds between a load-aware provider's price updates"),
)


def egg_market(jobs, providers: str = "mixed", price_level: float = 0.5, reprice_every: float = 300.0):
    """The Egg market for ``jobs``: ``(market, agents, bids, crash_draws)``.

    Decisions (Kang & Parkes (2007), section 3, leave providers' pricing, scheduling and
    estimators to them): the six providers of the Kang & Parkes (2007)
    reproduction (``marketsched.mechanisms.online.egg.presets.PROVIDERS``: schedulers, pricing kinds,
    relative rates, crash rates), their processors scaled to the machine's (largest
    remainders, at least one each); prices per estimated CPU-second ``price_level x relative
    rate x mean true value per second`` (the operator's calibration, not the reports) (the reproduction's rates are per CPU-hour for its own value
    scale); every provider estimates a job's run time as its request (the description is
    ``(requested time, user)``); each job's bid is the linear schedule from ``w x patience`` at
    submission down to 0 at its deadline (the same patience model as EES's values);
    crash points ``Exp(1)`` per job from the seed's stream 4 (common random numbers).
    """
    from marketsched.mechanisms.online.egg import (
        BidBatch,
        EstimatorStore,
        LinearEstimator,
        Market,
        PriceBook,
        ReliabilityLedger,
    )
    from marketsched.mechanisms.online.egg.presets import DELTA, HORIZON, PROVIDERS, RT_EDGES, SCENARIOS, SLOT
    from marketsched.mechanisms.online.egg.providers import LoadAwarePricing, ProviderAgent, StaticPricing

    w = jobs.workload
    n = len(w)
    preset = [SCENARIOS[providers](p) for p in PROVIDERS][: w.capacity]
    share = np.array([p["capacity"] for p in preset], dtype=np.float64)
    exact = share / share.sum() * w.capacity
    caps = np.maximum(np.floor(exact).astype(np.int64), 1)
    for k in np.argsort(-(exact - np.floor(exact)), kind="stable"):
        if caps.sum() >= w.capacity:
            break
        caps[k] += 1
    while caps.sum() > w.capacity:
        caps[int(np.argmax(caps))] -= 1
    K = len(preset)
    book = PriceBook(K, [RT_EDGES], SLOT, DELTA, HORIZON, float(w.submit_time[0]) if n else 0.0)
    categorical = np.array([False, True])
    estimators = EstimatorStore([LinearEstimator(np.zeros(1), np.array([[1.0, 0.0]]), categorical) for _ in range(K)],
                                DELTA,
                                runtime_dim=0)
    market = Market(book, estimators, ReliabilityLedger(K, alpha=1.0, beta=1.0))
    # calibrated to the jobs' true values, never to their reports: prices that follow the mean bid
    # let a job lower every provider's price by shading (found by ``marketsched audit``); the
    # paper's price tables do not depend on the users' reports
    scale = price_level * float(np.mean(jobs.true_value)) if n else price_level
    agents = []
    for p, c in zip(preset, caps.tolist()):
        rate = p["rate"] * scale
        if p["pricing"] == "static":
            pricing = StaticPricing(rate, 0.1 * 3600.0, 1.0)
        else:
            pricing = LoadAwarePricing(rate, 0.1 * 3600.0, 1.0, p["kappa"] if p["pricing"] == "load" else 0.0)
        agents.append(ProviderAgent(int(c), p["scheduler"], pricing, p["crash"], reprice_every=reprice_every))
    a = w.submit_time
    patience = jobs.deadline - a
    desc = np.column_stack([w.runtime_estimate, np.maximum(w.user_id, 0).astype(np.float64)])
    bids = BidBatch.linear(a, desc, jobs.bid * patience, 0.0, jobs.deadline, min_reliability=jobs.min_reliability)
    crash = np.random.default_rng([int(jobs.seed), 4]).exponential(1.0, n)
    return market, agents, bids, crash


def egg_utility(jobs, run):
    """``w_true(tau*) - price`` for jobs completed by their scheduled time, else 0 (rules R5-R7)."""
    from marketsched.mechanisms.online.egg import BidBatch

    pol = run.policy
    true = BidBatch.linear(pol.bids.arrival, pol.bids.description, jobs.true_value * (jobs.deadline - pol.bids.arrival),
                           0.0, jobs.deadline)
    u = np.zeros(len(jobs.workload))
    idx = np.flatnonzero(pol.paid)
    if len(idx):
        u[idx] = true.take(idx).values(pol.completion[idx]) - pol.price[idx]
    return u


def _egg(jobs, providers, price_level, reprice_every):
    from marketsched.mechanisms.online.egg.providers import EggPolicy

    market, agents, bids, crash = egg_market(jobs, providers, price_level, reprice_every)
    return EggPolicy(market, agents, bids, crash_draws=crash)


register(Mechanism("egg", "Egg decentralized auction", "decentralized auction",
                   "Kang & Parkes (2007), sections 2-3 (equations 3-5, rules R1-R7)", _egg, EGG_PARAMS,
                   ("bids", "serial", "estimates", "deadlines"), ("reliability",),
                   summary="per-bid auctioneer over provider price tables, escrow, reliability",
                   live="yes, on the grid exchange: `marketsched exchange init --mechanism egg` (providers post "
                        "price tables with their tokens, users bid a value and a deadline, the simulator's auctioneer "
                        "picks provider and price per bid, escrow until tau*, reliability from contract outcomes; the "
                        "recorded events replay through the library to the same choices and payments; "
                        "docs/exchange.md, Egg mode)", utility=egg_utility,
                   claims=(Claim("t-strategyproof: no gain from a false value (or deadline), a larger job or a "
                                 "later arrival", "dominant", ("value", "deadline", "estimate>=1", "delay"),
                                 "Kang & Parkes (2007), Theorem 1 (Definition 7); for users with threshold-"
                                 "reliability beliefs, admissible price tables and monotone predictors"),)))


# ---------------------------------------------------------------------------- queues without a market
def _backfilling(backfill: bool):
    def build(jobs):
        from marketsched.mechanisms.online.backfilling import Backfilling

        return Backfilling(backfill=backfill)

    return build


_QUEUE_LIVE = ("no: the live market charges bids; a queue without a market is what Slurm's own scheduler does "
               "(FCFS or EASY backfill), use Slurm directly")
register(Mechanism("fcfs", "First come, first served", "queue", "Lifka (1995); Mu'alem & Feitelson (2001)",
                   _backfilling(False), market=False, summary="submission order, the head blocks the queue",
                   live=_QUEUE_LIVE))
register(Mechanism("easy", "EASY backfilling", "queue", "Lifka (1995); Mu'alem & Feitelson (2001)",
                   _backfilling(True), optional=("estimates",), market=False,
                   summary="FCFS, later jobs start early if they do not delay the head", live=_QUEUE_LIVE))
