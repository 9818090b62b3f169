"""A deliberately naive reference for DLGM and P-DLGM (tests only): Steps 1-3 of Stößer 2009,
sections 5.3-5.4, with explicit per-node lists and every transfer booked. It shares no code with
the mechanism. Its arithmetic is that of its inputs: floats (the mechanism's own numbers on data
whose sums are exact) or fractions.Fraction (exact sums on any data); ratios are compared as the
mechanism compares them, as IEEE divisions.
"""

import math

from hypothesis import strategies as st


def reference(submit, runtime, bid, m, preemptive, force=None, choice=None, start_rule="immediate", cancel=None):
    """Steps 1-3 of sections 5.3/5.4 with explicit per-node lists; every transfer booked.

    Same documented choices as the mechanism: node ties to the lowest index, queue ties to the
    lower job index, completions before arrivals in a batch, arrivals in job order. A job picks
    the node that maximises ``-c_j e^_j(n) - p^_j(n)`` with ``c`` = ``choice`` (the weights it
    chooses by; default its report). ``start_rule``: "immediate" (an idle node starts an arriving
    job at once, and a freed node its best waiting job) or "after-arrivals" (nodes without a
    running job start their best waiting job once every arrival of the time stamp is placed).
    A job's ``start`` is the first time stamp after which it runs; a preemption is counted when
    a job that was running before the time stamp is displaced. A zero-length job starts and ends
    at its release date without holding or joining a node (the zero-run-time rule).
    ``cancel``: ``{job: (time, after)}``, a waiting job leaves its queue at that time (after the
    time stamp's completions and the arrivals of jobs below ``after``; it ends then and keeps what
    it received); one that is not waiting then is listed in ``out["skipped"]``.
    """
    n = len(submit)
    force = force or {}
    choice = bid if choice is None else choice

    def ratio(v, d):  # the mechanism's ratios: IEEE divisions (its documented decision)
        return float(v) / float(d) if d > 0 else math.inf

    def start_best(q):
        queue[q].sort(key=lambda x: (-x[0], x[1]))
        run[q] = queue[q].pop(0)[1]

    run = [None] * m
    rem = list(runtime)
    queue = [[] for _ in range(m)]  # (ratio, job)
    out = {k: [None] * n for k in ("tent_e", "tent_p", "node", "end")}
    out["recv"] = [0] * n
    out["start"] = [math.nan] * n
    out["preempt"] = [0] * n
    out["skipped"] = []
    cancels = sorted(((float(tc), a, j) for j, (tc, a) in (cancel or {}).items()), reverse=True)

    def cancel_due(before):
        while cancels and cancels[-1][0] <= t and cancels[-1][1] <= before:
            j = cancels.pop()[2]
            where = [q for q in range(m) if any(kk == j for _, kk in queue[q])]
            if where:
                queue[where[0]] = [x for x in queue[where[0]] if x[1] != j]
                out["end"][j] = t
            else:
                out["skipped"].append(j)
    was_running = set()  # jobs running at the end of the previous time stamp
    t, i = 0, 0
    while True:
        nxt = submit[i] if i < n else math.inf
        fin = min([t + rem[run[q]] for q in range(m) if run[q] is not None], default=math.inf)
        tn = min(nxt, fin, cancels[-1][0] if cancels else math.inf)
        if tn == math.inf:
            break
        for q in range(m):
            if run[q] is not None:
                rem[run[q]] -= tn - t
        t = tn
        for q in range(m):  # completions; the freed node starts its best waiting job
            k = run[q]
            if k is not None and rem[k] <= 0:
                out["end"][k] = t
                run[q] = None
                if queue[q] and start_rule == "immediate":
                    start_best(q)
        while i < n and submit[i] <= t:
            j = i
            i += 1
            cancel_due(j)
            v, d = bid[j], runtime[j]
            if d == 0:  # the zero-run-time rule: it ends on the spot, never holds or queues on a node
                out["node"][j] = force.get(j, 0)  # every node offers (t, 0): the lowest index
                out["tent_e"][j], out["tent_p"][j], out["start"][j], out["end"][j] = t, 0.0, t, t
                continue
            rho = ratio(v, d)
            offers = []
            for q in range(m):
                ahead = behind = 0
                run_ahead = False
                k = run[q]
                if k is not None:
                    if not preemptive or ratio(bid[k], rem[k]) >= rho:
                        ahead += rem[k]
                        run_ahead = True
                    else:
                        behind += bid[k]
                for r, kk in queue[q]:
                    if r >= rho:
                        ahead += rem[kk]
                    else:
                        behind += bid[kk]
                offers.append((t + d + ahead, d * behind, run_ahead))
            c = choice[j]
            q = force.get(j, min(range(m), key=lambda q: (c * offers[q][0] + offers[q][1], q)))
            out["node"][j], out["tent_e"][j], out["tent_p"][j] = q, offers[q][0], offers[q][1]
            k = run[q]
            if k is None and start_rule == "immediate":
                run[q] = j
                continue
            for r, kk in queue[q]:
                if r < rho:
                    out["recv"][kk] += bid[kk] * d
            if k is not None and preemptive and not offers[q][2]:
                out["recv"][k] += bid[k] * d
                if k in was_running:
                    out["preempt"][k] += 1
                queue[q].append((ratio(bid[k], rem[k]), k))
                run[q] = j
            else:
                queue[q].append((rho, j))
        cancel_due(math.inf)
        for q in range(m):
            if run[q] is None and queue[q]:  # "after-arrivals" (under "immediate" every such queue is empty)
                start_best(q)
        was_running = {k for k in run if k is not None}
        for k in was_running:
            if math.isnan(out["start"][k]):
                out["start"][k] = t
    return out


@st.composite
def wide_instances(draw):
    """Small instances on wide spreads: weights 10^0..10^16 (and 0, 0.1, 0.2, 0.3, 1/3), run times
    0 and 2^-8..2^40, submit times up to 2^40 + 0.75, many equal values; every time and sum of
    times is exact in floating point (the schedule is the same in exact arithmetic), the weight
    sums are not. ``(submit, runtime, bid, nodes)``."""
    n = draw(st.integers(2, 9))
    nodes = draw(st.integers(1, 3))
    submit = sorted(draw(st.lists(st.sampled_from([0, 0, 0.5, 1, 2.0**20, 2.0**40, 2.0**40 + 0.75]),
                                  min_size=n, max_size=n)))
    runtime = draw(st.lists(st.sampled_from([0, 2.0**-8, 0.75, 1, 3, 2.0**20 + 1, 2.0**30, 2.0**40]),
                            min_size=n, max_size=n))
    bid = draw(st.lists(st.integers(0, 16).map(lambda e: 10.0**e) | st.sampled_from([0.0, 0.1, 0.2, 0.3, 1 / 3]),
                        min_size=n, max_size=n))
    return [float(x) for x in submit], [float(x) for x in runtime], bid, nodes
