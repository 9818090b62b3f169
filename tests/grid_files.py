"""A plugin mechanism with a parameter and a grid file sweeping it, shared by the grid-file tests
(process executor here, Slurm in test_slurm_grid_file.py)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from executor_grids import write_mini_trace
from test_plugin import build_wheel

SWEEP_PLUGIN = "marketsched-weighted-bid-plugin"

SWEEP_MODULE = textwrap.dedent('''
    import heapq

    from marketsched.mechanisms.registry import Mechanism, Param


    class WeightedBid:
        """Serial queue by bid - alpha x run time, highest first; charges nothing."""

        def __init__(self, bid, runtime, alpha):
            self.key = (alpha * runtime - bid).tolist()

        def bind(self, sim):
            self.sim, self.queue = sim, []

        def step(self, t, arrived, completed):
            for j in arrived:
                heapq.heappush(self.queue, (self.key[j], j))
            while self.sim.free and self.queue:
                self.sim.start(heapq.heappop(self.queue)[1])


    MECHANISM = Mechanism("weighted-bid", "Weighted bid first", "queue", "a test plugin",
                          lambda jobs, alpha: WeightedBid(jobs.bid, jobs.workload.runtime, alpha),
                          params=(Param("alpha", float, 1.0, "weight of the run time"),),
                          needs=("bids", "serial"), market=False)
''')


def sweep_wheel(folder: Path) -> Path:
    return build_wheel(folder, SWEEP_PLUGIN, {"ms_weighted_bid.py": SWEEP_MODULE},
                       "[marketsched.mechanisms]\nweighted-bid = ms_weighted_bid:MECHANISM\n", version="0.3")


def sweep_file(folder: Path, executor: str = "process") -> Path:
    """Two traces (next to the file), two values of the plugin's parameter, three seeds: 12 cells."""
    write_mini_trace(folder / "traces" / "a.swf", 60)
    write_mini_trace(folder / "traces" / "b.swf", 90)
    path = folder / "sweep.toml"
    path.write_text(textwrap.dedent(f'''
        out = "results"
        seeds = [1, 2, 3]
        metrics = ["completed", "mean_wait", "mean_bsd"]
        executor = "{executor}"
        workers = 2

        [[workloads]]
        trace = "traces/a.swf"
        deadlines = "slack:factor=5"

        [[workloads]]
        trace = "traces/b.swf"
        capacity = 0.5

        [[mechanisms]]
        name = "weighted-bid"
        params = {{ alpha = [0.0, 50.0] }}
    '''))
    return path
