"""Small compiled (numba) helpers shared by the env's kernels and the heuristics' placement kernels."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from numba import njit, typeof


def entry_point(dispatcher: Any, args: tuple[Any, ...]) -> Callable[..., Any]:
    """The compiled function ``dispatcher`` holds for the types of ``args`` (compiled already),
    callable without the dispatcher's type look-up of every argument (a caller that passes
    arguments of the same types each time saves it); the dispatcher itself when it holds none."""
    cres = dispatcher.overloads.get(tuple(typeof(a) for a in args))
    fn = getattr(cres, "entry_point", None)
    return fn if fn is not None else dispatcher


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
