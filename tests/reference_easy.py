"""A deliberately plain FCFS / EASY backfilling (tests only): the textbook rules, re-scanned in full.

Lifka (1995); Mu'alem & Feitelson (2001), section 2: at every scheduling point

1. start jobs from the head of the queue (submission order) while the head fits;
2. for the first job that does not fit (the head), the *shadow time* is the earliest time at
   which enough processors are free, walking the running jobs by estimated end; the *extra*
   processors are those free at the shadow time beyond what the head needs, counting every
   running job whose estimated end is at or before the shadow time;
3. scan the rest of the queue in order and start every job that fits now and either ends (by
   its estimate) by the shadow time or uses no more than the extra processors (it then uses
   them up).

It keeps its own event loop and shares no code with the engine, so agreement is evidence for
both. The rules where a trace replay needs a decision are those of the "Conformance" section
of ``docs/engine.md``:

* a scheduling point is a time stamp: completions at ``t`` (end = start + run time) free their
  processors, jobs submitted at ``t`` join the queue, then one pass runs;
* a running job's estimated end is ``max(start + estimate, t)``: a job that has overrun its
  estimate is expected to end now;
* a missing estimate (NaN) is the job's run time;
* a job of run time 0 started at ``t`` ends at ``t``; its processors are free for the next pass,
  which runs at the same time stamp ``t``.

Each pass costs O(queue x running): fine for tests and for one comparison on a full trace.
"""

import math

from hypothesis import strategies as st


def simulate(submit, runtime, procs, capacity, estimate=None, backfill=True):
    """First start time of every job under EASY (``backfill=True``) or FCFS."""
    n = len(submit)
    est = [runtime[j] if estimate is None or estimate[j] != estimate[j] else estimate[j] for j in range(n)]
    start = [math.nan] * n
    running: list[int] = []
    queue: list[int] = []
    free = capacity
    i = 0
    while i < n or queue or running:
        t = min([submit[i] if i < n else math.inf] + [start[j] + runtime[j] for j in running])
        for j in [j for j in running if start[j] + runtime[j] <= t]:
            running.remove(j)
            free += procs[j]
        while i < n and submit[i] <= t:
            queue.append(i)
            i += 1
        # one scheduling pass at t
        while queue and procs[queue[0]] <= free:
            j = queue.pop(0)
            start[j] = t
            running.append(j)
            free -= procs[j]
        if not backfill or not queue:
            continue
        head = procs[queue[0]]
        expected = sorted((max(start[j] + est[j], t), j) for j in running)
        avail = free
        shadow = math.inf  # cannot stay inf: the head fits on an empty machine
        for e, j in expected:
            avail += procs[j]
            if avail >= head:
                shadow = e
                break
        extra = free + sum(procs[j] for e, j in expected if e <= shadow) - head
        for j in list(queue[1:]):
            if procs[j] <= free and (t + est[j] <= shadow or procs[j] <= extra):
                queue.remove(j)
                start[j] = t
                running.append(j)
                free -= procs[j]
                if t + est[j] > shadow:
                    extra -= procs[j]
    return start


@st.composite
def parallel_instances(draw, max_jobs=40):
    """Random parallel workloads with ties: integer submit times on a short horizon (many jobs
    arrive together), run times and estimates from a few values (tied estimated ends), estimates
    that are mostly too short (overruns), sometimes too long or missing, and run times of 0. In
    a quarter of the instances the estimates are the run times."""
    n = draw(st.integers(1, max_jobs))
    cap = draw(st.integers(1, 8))
    submit = sorted(draw(st.lists(st.integers(0, 30), min_size=n, max_size=n)))
    runtime = draw(st.lists(st.sampled_from([0, 2, 5, 10, 20, 40]), min_size=n, max_size=n))
    procs = draw(st.lists(st.integers(1, cap), min_size=n, max_size=n))
    estimate = draw(st.lists(st.sampled_from([0.0, 1.0, 2.0, 5.0, 10.0, math.nan]), min_size=n, max_size=n))
    exact = draw(st.integers(0, 3)) == 0
    return submit, runtime, procs, cap, ([float(r) for r in runtime] if exact else estimate)
