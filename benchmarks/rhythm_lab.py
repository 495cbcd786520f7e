"""The weekly-rhythm lab (issue 41, part 5): does the periodic check take a weekly pattern for regressions, and does
it still see a step on a Monday peak?

Run with `make bench-rhythm` (or `.venv/bin/python benchmarks/rhythm_lab.py [--seeds 2]`). It starts an embedded
PostgreSQL 18 as the warehouse and, for each seed, stores three weeks of generated counters (radar_pipeline.lab.rhythm:
a weekday business-hours peak ramping up at 08:30 and down at 17:30, quiet weekends, a sharp nightly batch at 02:00
on a third of the statements, each statement's latency rising with the load by its own sensitivity, a slow 3% wander,
one-minute scrapes) twice, as two targets: one checked by today's rule (each hour against the hour before) and one
with weekly levels. The nightly job's sums are computed for every day (steps.noise.update_noise: the noise priors and
the hourly sums), then the periodic check (steps.periodic_check.analyse_period, as the Dagster asset runs it) runs
for every hour of the third week on both targets. `--steps` statements of each seed step ×1.5 at 09:00 on the third
Monday, mid-ramp; the others are unchanged.

Prints, per rule: false detections (detections of unchanged statements) and false reports (alerts: a detection that
opened an episode) over the third week, per day; and how many of the stepped statements the check of 08:00–10:00
detected.

`--cost N`, instead: what the levels cost a history update (steps.rhythm.point_levels, which query_history runs for
every deploy's points): N statements with four weeks and a half of hourly sums (N × 756 rows of radar.statement_hour,
COPY), then point_levels for all N over a one-hour span, `--repeat` times: the median and largest seconds, and this
process's peak memory.
"""

from __future__ import annotations

import argparse
import io
import resource
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import pandas as pd
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from radar_pipeline.defs.resources import AnalysisResource  # noqa: E402
from radar_pipeline.demo.local_postgres import LocalPostgres  # noqa: E402
from radar_pipeline.lab.rhythm import MONDAY, weekly_counters  # noqa: E402
from radar_pipeline.pgss_model import COUNTERS, KEY  # noqa: E402
from radar_pipeline.steps.decide import AnalysisRun  # noqa: E402
from radar_pipeline.steps.noise import update_noise  # noqa: E402
from radar_pipeline.steps.periodic_check import analyse_period  # noqa: E402
from radar_pipeline.steps.rhythm import point_levels  # noqa: E402
from radar_pipeline.warehouse import migrations  # noqa: E402
from radar_pipeline.warehouse.database import driver, make_engine  # noqa: E402

WEEKS = 3
STEP = 1.5
STEP_AT = MONDAY + pd.Timedelta(weeks=WEEKS - 1, hours=9)
COPIED = [
    "target",
    "captured_at",
    *KEY,
    *(c for c in COUNTERS if c != "stddev_exec_time"),
    "reset_before",
    "fingerprint",
]


def store(engine: sa.Engine, target: str, frame: pd.DataFrame) -> None:
    """COPY the counters (queryid, captured_at, calls, total_exec_time) as the collector's rows of `target`."""
    times = sorted(frame["captured_at"].unique())
    with engine.begin() as conn:
        conn.execute(
            sa.text("SELECT radar.ensure_pgss_snapshot_partitions(CAST(:d AS date), :n)"),
            {"d": MONDAY.date(), "n": WEEKS * 7 + 2},
        )
        with driver(conn).cursor() as cur:
            with cur.copy("COPY radar.pgss_info_snapshot FROM STDIN") as copy:
                for at in times:
                    copy.write_row((target, pd.Timestamp(at).to_pydatetime(), 0, None, 180000, "1.12", 1, 1))
            buffer = io.StringIO()
            for r in frame.itertuples(index=False):
                buffer.write(
                    f"{target}\t{r.captured_at.isoformat()}\t5\t10\t{r.queryid}\tt\t{r.calls}\t{r.total_exec_time!r}"
                    f"\t0\t0\t0\t0\t0\tf\t{r.queryid}\n"
                )
            buffer.seek(0)
            with cur.copy(f"COPY radar.pgss_snapshot ({', '.join(COPIED)}) FROM STDIN") as copy:
                while chunk := buffer.read(1 << 20):
                    copy.write(chunk)
            cur.execute(
                "INSERT INTO radar.query SELECT %s, 5, 10, q, true, q, 'SELECT statement ' || q, %s, %s, 0, 0, NULL, "
                "NULL FROM unnest(%s::bigint[]) q",
                (target, times[0], times[-1], sorted(int(q) for q in frame["queryid"].unique())),
            )


def check_week(engine: sa.Engine, target: str, rhythms: bool) -> pd.DataFrame:
    """The periodic check of every hour of the last week on `target`; its verdicts' detections (queryid, period
    end, report)."""
    analysis = AnalysisResource()
    run = AnalysisRun(engine, analysis.periodic_settings(), rhythms=rhythms)
    found = []
    for hour in range(7 * 24):
        end = MONDAY + pd.Timedelta(weeks=WEEKS - 1, hours=hour + 1)
        key = f"{target}:{(end - pd.Timedelta(hours=1)).strftime('%Y-%m-%d-%H:%M')}"
        done, failed = analyse_period(run, key, end.to_pydatetime(), analysis.settings().tolerance)
        if failed:
            raise RuntimeError(f"{target} {end}: {failed}")
        for result in done:
            if result.target != target:
                continue
            detected = result.verdicts[result.verdicts["verdict"] == "detected"]
            found += [(int(q), end, r) for q, r in zip(detected["queryid"], detected["report"], strict=True)]
    return pd.DataFrame(found, columns=["queryid", "end", "report"])


def cost(engine: sa.Engine, statements: int, repeat: int) -> None:
    """Time point_levels for `statements` statements over a one-hour span with 4½ weeks of hourly sums (see the
    module docstring)."""
    span_end = MONDAY + pd.Timedelta(weeks=5, hours=10)
    hours = pd.date_range(span_end - pd.Timedelta(weeks=4, hours=84), span_end, freq="h", inclusive="left")
    started = time.perf_counter()
    with engine.begin() as conn, driver(conn).cursor() as cur:
        with cur.copy("COPY radar.statement_hour FROM STDIN") as copy:
            for hour in hours:
                at = hour.isoformat()
                copy.write("".join(f"cost\t{at}\t5\t10\t{q}\tt\t60\t{30 + q % 7}\n" for q in range(statements)))
        cur.execute("ANALYZE radar.statement_hour")
    rows = statements * len(hours)
    print(f"stored {rows:,} hourly rows ({statements:,} statements) in {time.perf_counter() - started:.0f} s")
    points = pd.DataFrame({"dbid": 5, "userid": 10, "queryid": range(statements), "toplevel": True})
    took = []
    for _ in range(repeat):
        started = time.perf_counter()
        with engine.connect() as conn:
            levels = point_levels(conn, "cost", points, span_end - timedelta(hours=1), span_end)
        took.append(time.perf_counter() - started)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"point_levels, {statements:,} statements, one-hour span: median {statistics.median(took):.2f} s, largest "
        f"{max(took):.2f} s over {repeat}; {int(levels.notna().sum()):,} levels; peak RSS {peak:.0f} MiB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--statements", type=int, default=40, help="unchanged statements per seed")
    parser.add_argument("--steps", type=int, default=20, help="statements per seed stepping ×1.5 on the third Monday")
    parser.add_argument("--rules", default="today,rhythm", help="the rules checked: today, rhythm, or both")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--cost", type=int, metavar="N", help="instead: point_levels' cost at N statements")
    parser.add_argument("--repeat", type=int, default=5, help="with --cost: how many times")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="radar-rhythm-lab-"))
    server = LocalPostgres(root / "warehouse", settings={"shared_buffers": "256MB"}).start()
    try:
        url = server.url(driver="postgresql+psycopg")
        migrations.upgrade(url)
        engine = make_engine(url)
        if args.cost:
            cost(engine, args.cost, args.repeat)
            return
        started = time.perf_counter()
        stepped = {}
        rules = args.rules.split(",")
        seeds = range(args.first_seed, args.first_seed + args.seeds)
        for seed in seeds:
            total = args.statements + args.steps
            steps = {q: (STEP_AT, STEP) for q in range(args.statements + 1, total + 1)}
            stepped[seed] = set(steps)
            frame = weekly_counters(total, WEEKS, every=pd.Timedelta(minutes=1), seed=seed, steps=steps)
            for rule in rules:
                store(engine, f"s{seed}-{rule}", frame)
        print(f"stored {args.seeds} × {len(rules)} targets of {WEEKS} weeks in {time.perf_counter() - started:.0f} s")
        started = time.perf_counter()
        days = update_noise(engine, days=(pd.Timestamp.now(tz="UTC") - MONDAY).days + 1)
        print(f"nightly sums of {len(days)} target-days in {time.perf_counter() - started:.0f} s")
        for rule in rules:
            started = time.perf_counter()
            false_det = false_rep = found_steps = trials = 0
            for seed in seeds:
                found = check_week(engine, f"s{seed}-{rule}", rhythms=rule == "rhythm")
                null = found[~found["queryid"].isin(stepped[seed])]
                false_det += len(null)
                false_rep += int((null["report"] == "reported").sum())
                at_step = found[
                    (found["end"] == STEP_AT + pd.Timedelta(hours=1)) & found["queryid"].isin(stepped[seed])
                ]
                found_steps += at_step["queryid"].nunique()
                trials += len(stepped[seed])
            days_checked = 7 * args.seeds
            print(
                f"{rule}: {false_det} false detections ({false_det / days_checked:.2f} a day), {false_rep} reported "
                f"({false_rep / days_checked:.2f} a day) over {days_checked} checked days of {args.statements} "
                f"unchanged statements; ×{STEP} Monday-peak step detected in {found_steps} of {trials} "
                f"({found_steps / trials:.0%}); {time.perf_counter() - started:.0f} s"
            )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
