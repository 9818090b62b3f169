# The C kernel of GREEDEX's critical values (_greedex_kernel.c); called by greedex._scan_compiled
# only. Arrays are contiguous float64 (reserve, capacities, job cpu/mem/value, top, best) or int64.
from numpy import ndarray

def critical_values(T: int, N: int, reserve: ndarray, cpu0: ndarray, mem0: ndarray, release: ndarray,
                    end: ndarray, K: ndarray, cpu: ndarray, mem: ndarray, value: ndarray, ranking: ndarray,
                    assign: ndarray, jobs: ndarray, fork_at: ndarray, top: ndarray, best: ndarray) -> None: ...
