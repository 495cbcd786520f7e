"""Runs inside an anchor's own virtual environment: loops one library's E-divisive statistic over every series.

Usage: python anchor_runner.py {otava|spa} SERIES.npy  → prints JSON {"seconds": ..., "series": ..., "checksum": ...}.
Only the statistic and its best split are computed (no permutation test), the same work the engine's step 4 does.
"""

import json
import sys
import time

import numpy as np


def otava_loop(matrix):
    from otava.change_point_divisive.calculator import PairDistanceCalculator

    best = []
    for row in matrix:
        series = row.tolist()  # Otava's entry points take a Python sequence
        calc = PairDistanceCalculator(np.array(series, dtype=float))
        best.append(calc.get_candidate_change_point(slice(0, len(series))).index)
    return best


def spa_loop(matrix):
    from signal_processing_algorithms.energy_statistics.cext_calculator import (
        calculate_distance_matrix,
        calculate_t_values,
    )

    best = []
    for row in matrix:
        distances = calculate_distance_matrix(np.ascontiguousarray(row, dtype=np.float64))
        best.append(int(np.argmax(calculate_t_values(distances))))
    return best


def main():
    which, path = sys.argv[1], sys.argv[2]
    matrix = np.load(path)
    loop = {"otava": otava_loop, "spa": spa_loop}[which]
    loop(matrix[:10])  # warm-up: imports and first-call costs
    started = time.perf_counter()
    best = loop(matrix)
    seconds = time.perf_counter() - started
    print(json.dumps({"seconds": seconds, "series": len(matrix), "checksum": int(sum(best))}))


if __name__ == "__main__":
    main()
