"""A large group's shared-noise estimate: what steps.groups.plan_groups costs at a deploy's first analysis for one
group of 5,000 statements (one shape) with 8 × W of history before the deploy (docs/groups.md, "Shared noise").

5,000 statements × 8 W (W = 30 min) of one-minute scrapes each side of a deploy are loaded (analysis_bench.fill, the
later look's target); the deploy's window (W either side) is read as the first analysis reads it, then plan_groups
(form_groups, and before_noise: the sampled members' before side over 8 W, one read) is timed three times, median.
With `--everyone` every member is read (the sample's cap lifted: what the estimate cost before it was capped).
"""

from __future__ import annotations

import argparse
import inspect
import os
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from analysis_bench import START, fill  # noqa: E402

from radar_pipeline.demo.local_postgres import LocalPostgres  # noqa: E402
from radar_pipeline.engine import EngineSettings  # noqa: E402
from radar_pipeline.steps import groups  # noqa: E402
from radar_pipeline.warehouse import analysis, migrations  # noqa: E402
from radar_pipeline.warehouse.database import make_engine  # noqa: E402


def main() -> None:
    """Load the statements, then time plan_groups for their one group."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--everyone", action="store_true", help="read every member's before side (no cap)")
    args = parser.parse_args()
    if args.everyone:
        import radar_pipeline.engine.groups as engine_groups

        engine_groups.NOISE_SAMPLE = 10**9
    root = Path(tempfile.mkdtemp(prefix="radar-group-noise-bench-"))
    server = LocalPostgres(root / "warehouse", settings={"shared_buffers": "512MB", "work_mem": "64MB"}).start()
    try:
        url = server.url(driver="postgresql+psycopg")
        migrations.upgrade(url)
        engine = make_engine(url)
        settings = EngineSettings()  # W = 30 min
        span = 8 * settings.window
        scrapes = int(2 * span / timedelta(minutes=1)) + 2
        fill(engine, "late", 5000, scrapes, regressed_from=scrapes // 2, seed=3)
        deploy_at = START + timedelta(minutes=scrapes // 2)
        lo, hi = deploy_at - settings.window, deploy_at + settings.window
        with engine.connect() as conn:
            window = analysis.read_window(conn, "late", lo, hi)
        took, read = [], 0
        for _ in range(3):
            with engine.connect() as conn:
                started = time.perf_counter()
                plan = groups.plan_groups(conn, "late", window, lo, hi, settings)
                took.append(time.perf_counter() - started)
        sizes = [len(g.members) for g in plan.groups]
        before = plan.before
        read = 0 if before is None else int(before.notna().to_numpy().sum())
        columns = 0 if before is None else before.shape[1]
        with engine.connect() as conn:
            started = time.perf_counter()
            groups.form_groups(conn, "late", window, lo, hi)
            formed = time.perf_counter() - started
        capped = "calls" in inspect.signature(groups.before_noise).parameters
        print(
            f"plan_groups, one group of {sizes} statements, 8 × W (240 one-minute scrapes) before the deploy, "
            f"{'cap lifted' if args.everyone or not capped else 'capped'}: {statistics.median(took):.3f} s "
            f"(form_groups alone {formed:.3f} s); before side read for {columns} members, {read:,} interval means; "
            f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
        )
        engine.dispose()
    finally:
        server.destroy()


if __name__ == "__main__":
    main()
