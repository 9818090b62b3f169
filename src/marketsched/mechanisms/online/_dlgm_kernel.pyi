# The C kernel of DLGM / P-DLGM (_dlgm_kernel.c); called by DLGM.compiled_run only. Arrays are
# contiguous: float64 (times, weights, outputs), int32 (bucket, forced, rank), int64, int8.
from numpy import ndarray

def run(submit: ndarray, runtime: ndarray, bid: ndarray, choice: ndarray, bucket: ndarray, lo: ndarray,
        forced: ndarray, rank: ndarray, nodes: int, preemptive: int, immediate: int, all_positive: int,
        first_start: ndarray, end_time: ndarray, preemptions: ndarray, payment: ndarray, state: ndarray,
        tentative_completion: ndarray, tentative_payment: ndarray, received: ndarray, node: ndarray) -> tuple[float, int, int]: ...
