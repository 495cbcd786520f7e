"""The anchor of run_cost_bench.py: a Dagster job with one op that does nothing."""

import dagster as dg


@dg.op
def nothing() -> None:
    pass


@dg.job
def trivial() -> None:
    nothing()
