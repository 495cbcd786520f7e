"""E-divisive means: where did each series' distribution change? (Matteson & James 2014; Székely & Rizzo 2013.)

For a split of a series into A = x[:k] and B = x[k:n], the energy statistic compares the mean distance across the
split with the mean distances inside each side (within-side distances averaged over unordered pairs):

    Q(k) = na·nb / (na + nb) · (2·D_AB − D_AA − D_BB),   na = k, nb = n − k

evaluated at every admissible split m ≤ k ≤ n − m with m = max(3, ⌊n/10⌋), so that a change is never "found" in the
first or last few points. The best split is the argmax of Q, kept only if Q > 0.

All series are evaluated at once. The pairwise distances are accumulated one diagonal at a time (pairs i, i + d), so
memory stays O(series × length): a [series, n, n] array is never built. Each diagonal adds, for every
point, its distance to the earlier points (rows) and to the later points (columns); prefix sums of those give the
within-side sums for every split in O(1) each.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

MIN_SEGMENT = 3
CHUNK = 512  # series per pass over the diagonals: small enough for the working set to stay in cache
WORKERS = min(4, os.cpu_count() or 1)


def min_segment(n: np.ndarray) -> np.ndarray:
    """m = max(3, ⌊n/10⌋): the fewest points either side of an admissible split."""
    return np.maximum(MIN_SEGMENT, np.asarray(n) // 10)


def split_statistics(x: np.ndarray, n: np.ndarray, workers: int = WORKERS) -> np.ndarray:
    """Q(k) for every split k = 0..L of every row of x ([rows, L], left-aligned, entries past n[row] ignored).

    Inadmissible splits (k < m or k > n − m) hold −inf. Chunks of rows run on up to `workers` threads (1: in the
    caller's thread, for a caller that runs several of these at once).
    """
    x = np.asarray(x, dtype=np.float64)
    n = np.asarray(n, dtype=np.int64)
    rows, length = x.shape
    q = np.empty((rows, length + 1))

    def fill(start: int) -> None:
        stop = min(rows, start + CHUNK)
        q[start:stop] = _chunk_statistics(x[start:stop], n[start:stop]).T

    starts = range(0, rows, CHUNK)
    if len(starts) == 1 or workers <= 1:
        for start in starts:
            fill(start)
    else:  # numpy releases the GIL inside each operation, so chunks run in parallel on the machine's cores
        with ThreadPoolExecutor(max_workers=min(len(starts), workers)) as pool:
            list(pool.map(fill, starts))
    return q


def _chunk_statistics(x: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Q for a chunk of series, computed time-major ([L + 1, chunk]): each diagonal of the pair matrix is then one
    contiguous slice, several times faster than row-wise slices, and the chunk's arrays stay in cache."""
    length = x.shape[1]
    values = np.ascontiguousarray(x.T)
    ragged = bool((n < length).any())
    inside = np.arange(length)[:, None] < n[None, :]
    if ragged:
        values = np.where(inside, values, 0.0)
    to_earlier = np.zeros_like(values)  # r_j = Σ_{i<j} |x_i − x_j|
    to_later = np.zeros_like(values)  # c_i = Σ_{j>i} |x_i − x_j|
    buffer = np.empty_like(values)
    for d in range(1, length):
        dist = buffer[: length - d]
        np.subtract(values[d:], values[:-d], out=dist)
        np.abs(dist, out=dist)
        if ragged:
            dist *= inside[d:]  # the later point must lie inside the series (then the earlier one does too)
        to_earlier[d:] += dist
        to_later[:-d] += dist

    chunk = values.shape[1]
    within_a = np.zeros((length + 1, chunk))
    np.cumsum(to_earlier, axis=0, out=within_a[1:])  # pairs inside x[:k]
    within_b = np.zeros((length + 1, chunk))
    np.cumsum(to_later[::-1], axis=0, out=within_b[-2::-1])  # pairs inside x[k:]
    total = within_a[-1]

    na = np.arange(length + 1, dtype=np.float64)[:, None]
    nb = n[None, :] - na
    m = min_segment(n)[None, :]
    admissible = (na >= m) & (nb >= m)
    with np.errstate(divide="ignore", invalid="ignore"):
        d_aa = within_a / (na * (na - 1) / 2)
        d_bb = within_b / (nb * (nb - 1) / 2)
        d_ab = (total[None, :] - within_a - within_b) / (na * nb)
        q = na * nb / (na + nb) * (2 * d_ab - d_aa - d_bb)
    return np.where(admissible, q, -np.inf)


def best_split(x: np.ndarray, n: np.ndarray, workers: int = WORKERS) -> tuple[np.ndarray, np.ndarray]:
    """The argmax split k and its Q for every row; k = 0 where no split is admissible or the best Q is not > 0. Each
    chunk's argmax is taken on its time-major Q (as split_statistics computes it), so no [rows, L + 1] matrix is
    built."""
    x = np.asarray(x, dtype=np.float64)
    n = np.asarray(n, dtype=np.int64)
    rows = x.shape[0]
    k = np.zeros(rows, dtype=np.int64)
    best = np.empty(rows)

    def fill(start: int) -> None:
        stop = min(rows, start + CHUNK)
        q = _chunk_statistics(x[start:stop], n[start:stop])
        k[start:stop] = np.argmax(q, axis=0)
        best[start:stop] = q[k[start:stop], np.arange(stop - start)]

    starts = range(0, rows, CHUNK)
    if len(starts) <= 1 or workers <= 1:
        for start in starts:
            fill(start)
    else:
        with ThreadPoolExecutor(max_workers=min(len(starts), workers)) as pool:
            list(pool.map(fill, starts))
    found = best > 0
    return np.where(found, k, 0), np.where(found, best, -np.inf)
