"""A small grid and a tiny SWF trace shared by the executor tests (local, Slurm, Ray)."""

from __future__ import annotations

from pathlib import Path

from marketsched.experiments.runner import Grid


def small_grid(*traces: str) -> Grid:
    """Two mechanisms x two pricings x (FT + one SRG beta) x two seeds per trace: 16 cells each."""
    return Grid(traces=list(traces) or ["synthetic:300:16"], capacities=[0.5], mechanisms=["hb", "wspt"],
                pricings=["first", "kth"], behaviours=["ft", "srg"], betas=[0.7], seeds=[1, 2])


def write_mini_trace(path: Path, n: int = 80) -> Path:
    """A serial SWF trace of ``n`` jobs on 8 processors (fixed numbers: the same file every time)."""
    lines = ["; MaxNodes: 8", "; MaxProcs: 8"]
    for j in range(1, n + 1):
        run = 100 + (j * 53) % 900
        lines.append(f"{j} {37 * j} 0 {run} 1 -1 -1 1 {run * 2} -1 1 {1 + j % 5} 1 -1 1 1 -1 -1")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path
