"""The compiled per-GPU update of a placement (:meth:`gpusched_env.allocation.ClusterState._place`,
imported on its first compiled call: the state's other users need no numba)."""

from __future__ import annotations

from numba import njit


@njit(cache=True, nogil=True)
def place_k(i, f, b, k, n, dmem, dshare, sign, all_up):  # pragma: no cover (compiled)
    """:meth:`ClusterState._place_plain`'s per-GPU updates for the ``k`` GPUs in the scratch part,
    in order (the same floats). ``i`` = [jobs per GPU | GPUs], ``f`` = [memory held | GPU
    fractions held], ``b`` = [free | up], of ``n`` GPUs. Returns the change of the free count."""
    dfree = 0
    for j in range(k):
        g = i[n + j]
        r = i[g]
        if sign > 0:
            if r == 0:
                if all_up or b[n + g]:
                    dfree -= 1
                b[g] = False
            r += 1
        else:
            r -= 1
            if r == 0 and (all_up or b[n + g]):
                b[g] = True
                dfree += 1
            else:
                b[g] = False
        i[g] = r
        if dmem != 0.0:  # adding 0.0 memory leaves a sum as it is (memory use is never -0.0)
            f[g] += dmem
        f[n + g] += dshare
    return dfree
