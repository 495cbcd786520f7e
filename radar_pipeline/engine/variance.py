"""An interval's own per-call sum of squares, recovered from two cumulative pg_stat_statements rows.

pg_stat_statements keeps, per statement, calls C, total_exec_time T and the population standard deviation σ of the
calls' execution times since the entry began (stddev_exec_time = sqrt(M2 / C), where M2 is the sum of squared
deviations from the mean, updated call by call with Welford's method). Two rows (C1, T1, σ1) and (C2, T2, σ2) of the
same entry describe the calls up to each scrape; the calls in between are a sample of their own with c = C2 − C1
calls, total t = T2 − T1, mean m = t / c. The parallel-variance combination (Chan, Golub & LeVeque 1979)

    M2(2) = M2(1) + S + C1 · c / C2 · (M1 − m)²,      M1 = T1 / C1, M2(k) = Ck · σk²

run backwards gives the interval's sum of squared deviations about its own mean exactly:

    S = C2 · σ2² − C1 · σ1² − C1 · c / C2 · (M1 − m)².

Numerical care. The two cumulative terms grow with the entry's whole history, S only with the interval, so the
subtraction cancels: its absolute rounding error is about a few ulps of C2·σ2² + C1·σ1² + the cross term (σ itself
arrives rounded to double precision, and squaring doubles its relative error). We therefore carry an error bound
err = 8 ε (C2 σ2² + C1 σ1² + cross) with ε the double-precision unit roundoff: a result below −err is inconsistent
(the rows do not belong to one entry: a reset the other counters did not show) and a result whose bound exceeds a
quarter of it is mostly rounding noise; both are reported as unknown (NaN), never clamped into a number. A result in
[−err, 0) is zero within rounding and is set to 0. An interval with one call has S = 0 by definition.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from radar_pipeline.engine.edivisive import WORKERS

EPS = np.finfo(np.float64).eps
CHUNK = 1 << 14
SPAN_CHUNKS = 8  # the fewest chunks worth a thread of their own


def interval_sum_of_squares(
    calls1: np.ndarray,
    total1: np.ndarray,
    stddev1: np.ndarray,
    calls2: np.ndarray,
    total2: np.ndarray,
    stddev2: np.ndarray,
    where: np.ndarray | None = None,
) -> np.ndarray:
    """Σ (x − m)² over the calls made between two cumulative rows (see the module docstring); NaN where unknown.

    All arguments are arrays of the same shape (row 1 is the earlier scrape of the same entry, with calls2 > calls1);
    a NaN stddev on either side gives NaN. calls1 = 0 (the entry began in between) gives C2 · σ2². With `where` (a
    boolean array of that shape), only the pairs it marks, flat, in order.
    """
    args = [np.asarray(v, dtype=np.float64) for v in (calls1, total1, stddev1, calls2, total2, stddev2)]
    args = list(np.broadcast_arrays(*args))
    shape = args[0].shape
    flat = [v.reshape(-1) for v in args]
    size = flat[0].size
    mask = np.broadcast_to(where, shape).reshape(-1) if where is not None else None
    # Element by element, so computed CHUNK values at a time: the dozen temporaries then stay in cache (and, with
    # `where`, each chunk's pairs are picked while they are there). Long inputs are cut into a span per core, each
    # computed on a thread of its own (numpy releases the interpreter's lock inside its operations).
    chunks = -(-size // CHUNK)
    spans = max(1, min(WORKERS, chunks // SPAN_CHUNKS))
    bounds = [CHUNK * (chunks * i // spans) for i in range(spans)] + [size]
    starts = [0] * (spans + 1)
    for i in range(spans):
        starts[i + 1] = starts[i] + (
            int(np.count_nonzero(mask[bounds[i] : bounds[i + 1]])) if mask is not None else bounds[i + 1] - bounds[i]
        )
    out = np.empty(starts[-1])

    def span(i: int) -> None:
        at = starts[i]
        for lo in range(bounds[i], bounds[i + 1], CHUNK):
            hi = min(lo + CHUNK, bounds[i + 1])
            got = _sum_of_squares(*(v[lo:hi] for v in flat))
            if mask is not None:
                got = got[mask[lo:hi]]
            out[at : at + len(got)] = got
            at += len(got)

    if spans == 1:
        span(0)
    else:
        with ThreadPoolExecutor(max_workers=spans) as pool:
            list(pool.map(span, range(spans)))
    if mask is not None:
        return out
    return out.reshape(shape) if shape else out[()]


def _sum_of_squares(
    c1: np.ndarray, t1: np.ndarray, stddev1: np.ndarray, c2: np.ndarray, t2: np.ndarray, stddev2: np.ndarray
) -> np.ndarray:
    m2_1 = c1 * stddev1**2
    m2_2 = c2 * stddev2**2
    c = c2 - c1
    with np.errstate(divide="ignore", invalid="ignore"):
        mean1 = np.where(c1 > 0, t1 / np.where(c1 > 0, c1, 1.0), 0.0)
        mean = (t2 - t1) / c
        cross = np.where(c1 > 0, c1 * c / c2 * (mean1 - mean) ** 2, 0.0)
        s = m2_2 - m2_1 - cross
    err = 8 * EPS * (m2_2 + m2_1 + cross)
    known = (c > 0) & (s >= -err) & ~(err > 0.25 * np.maximum(s, 0.0))
    single = (c == 1) & ~np.isnan(s)
    return np.where(single, 0.0, np.where(known, np.maximum(s, 0.0), np.nan))
