"""The anchor of run_cost_bench.py: a Dagster job with one op that does nothing, run in the run's own process as
pgss_snapshot_job is (in_process_executor), so the two differ only by radar's code."""

import dagster as dg


@dg.op
def nothing() -> None:
    pass


@dg.job(executor_def=dg.in_process_executor)
def trivial() -> None:
    nothing()
