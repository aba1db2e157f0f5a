"""Products whose value does not depend on the machine's BLAS kernel, for numbers that decide something.

numpy's ``a @ b`` goes to OpenBLAS, which picks a kernel per CPU (or per ``OPENBLAS_CORETYPE``): Haswell,
SkylakeX, Zen and Sandybridge kernels block and fuse the same sum differently, so the last bits of a product
differ between two machines running the same code on the same data. Where such a number only gets reported,
that is a stated tolerance (``docs/determinism.md``); where it decides who is available, selected or
aggregated, a last-bit difference could change a cohort. Every such product goes through this module:

* :func:`ordered_matmul` sums the inner dimension in index order with numpy's elementwise multiply and add
  (IEEE operations whose order this code fixes), for the small products that decide availability and labels;
* :func:`cosine_similarity` quantises unit vectors to integers so that every partial sum of their dot
  products is an integer below 2**53, which float64 arithmetic represents exactly: the BLAS result is then
  the exact integer whatever the kernel's order, and the fast kernel can still be used.
"""

from __future__ import annotations

import numpy as np

#: Bytes of the temporary ``rows × inner × cols`` product :func:`ordered_matmul` builds per chunk.
CHUNK_BYTES = 16 << 20
#: Unit vectors are scaled by ``2**UNIT_BITS`` and rounded: products stay at most 2**52 and, by Cauchy–Schwarz, every
#: partial sum of a dot product at most ``(2**26 + sqrt(dim)/2)**2 < 2**53`` for any dimension below 10**15.
UNIT_BITS = 26


def ordered_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` in float64 with the inner dimension summed in index order (``b`` a matrix or a vector).

    Each output entry is ``((a[i,0]·b[0,j] + a[i,1]·b[1,j]) + a[i,2]·b[2,j]) + …``: one multiply and one add per
    step, both correctly rounded, in an order no library chooses. It costs ``rows × inner × cols`` flops without
    blocking, so it is meant for the small products that decide something (class mixes, label rules), not for
    model-sized work.
    """
    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    vector = y.ndim == 1
    y2 = y[:, None] if vector else y
    if x.ndim != 2 or y2.ndim != 2 or x.shape[1] != y2.shape[0]:
        raise ValueError(f"shapes {x.shape} and {y.shape} do not multiply")
    rows, inner = x.shape
    cols = y2.shape[1]
    out = np.zeros((rows, cols))
    step = max(1, CHUNK_BYTES // max(1, 8 * inner * cols))
    for lo in range(0, rows, step):
        block = x[lo:lo + step]
        acc = out[lo:lo + step]
        for k in range(inner):  # one rank-1 update per inner index: the summation order is k = 0, 1, 2, …
            acc += block[:, k:k + 1] * y2[k]
    return out[:, 0] if vector else out


def cosine_similarity(features: np.ndarray) -> np.ndarray:
    """``cos(u_i, u_j)`` for every pair of rows, float64 ``(n, n)``, identical on every BLAS kernel.

    Rows are normalised (zero rows stay zero), scaled by ``2**UNIT_BITS`` and rounded to integers, so the Gram
    matrix is a sum of exactly representable integer products; any summation order gives the same integer, and
    the result is that integer over ``2**(2·UNIT_BITS)``. The rounding moves a cosine by at most about
    ``sqrt(dim)·2**-26`` — far below anything a similarity threshold resolves — and moves it the same way on
    every machine.
    """
    u = np.asarray(features, dtype=np.float64)
    u = u.reshape(len(u), -1)
    norms = np.sqrt((u * u).sum(axis=1))  # numpy's own pairwise sum, not BLAS
    unit = np.divide(u, norms[:, None], out=np.zeros_like(u), where=norms[:, None] > 0)
    q = np.rint(unit * float(2 ** UNIT_BITS))
    v = (q @ q.T) / float(2 ** (2 * UNIT_BITS))
    np.clip(v, -1.0, 1.0, out=v)
    return v
