"""The work the Dagster definitions run, free of Dagster: collect (snapshots, plan capture), analyse (a deploy's
window, the periodic check, history bands, plan diffs), tell (alert delivery) and retention. Each module joins the
layers below it (collector, warehouse, engine, alerts) for one step; defs/ calls them, and so do the tests and
benchmarks."""
