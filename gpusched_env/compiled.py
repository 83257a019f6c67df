"""Small compiled (numba) helpers shared by the env's kernels and the heuristics' placement kernels."""

from __future__ import annotations

from numba import njit


@njit(cache=True, nogil=True)
def sort_head(out, n):  # pragma: no cover (compiled)
    """Sort ``out[:n]`` ascending in place (insertion sort: the few GPU ids of one placement)."""
    for i in range(1, n):
        x = out[i]
        j = i
        while j > 0 and out[j - 1] > x:
            out[j] = out[j - 1]
            j -= 1
        out[j] = x
