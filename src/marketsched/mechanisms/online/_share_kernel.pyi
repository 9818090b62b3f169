# The share market's rounds with ZIC bidders (_share_kernel.c); called by ShareMarketPolicy only.
# Arrays are contiguous: float64 (uniforms, top, cpus, Gauss table, outputs), int64 (rows, pieces).
from numpy import ndarray

def run(uniforms: ndarray, top: ndarray, cpus: ndarray, rows: ndarray, piece_len: ndarray, piece_n: ndarray,
        piece_offset: ndarray, capacity: float, sh: bool, total: bool, gauss_s: ndarray, gauss_w: ndarray,
        received: ndarray, bidsum: ndarray) -> None: ...
