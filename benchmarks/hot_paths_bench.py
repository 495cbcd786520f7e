"""Hot paths benchmark (issue 17, part 4): the window read on a warehouse holding several targets, the plan diffs of
one analysis, and retention's verdict check.

Run with `.venv/bin/python benchmarks/hot_paths_bench.py`. It starts an embedded PostgreSQL 18 as the warehouse and
fills it by COPY (analysis_bench.fill) with TARGETS targets of QUERIES statements × SCRAPES one-minute scrapes, then:

1. the window read (warehouse/analysis.read_window, ±60 min) of one target and radar.pgss_intervals over the same
   range: seconds (median of 3) and an EXPLAIN (ANALYZE, BUFFERS) summary, with migration 0012's
   pgss_snapshot_target_time_idx and without it (dropped in a transaction that is rolled back);
2. one deploy analysis of a target whose every statement has a stored plan before the deploy (and half of them one
   after): the statements the plan diffs sent to the warehouse and their seconds, for the detections found;
3. retention's catalogue delete (a statement stays while a verdict shows it) over VERDICTS verdicts, EXPLAIN
   (ANALYZE, BUFFERS) with migration 0012's verdict_statement_idx and without it (rolled back each time).

Run on a tree before migration 0012, the "with" lines show the same plan as "without".
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from analysis_bench import START, fill  # noqa: E402

from radar_pipeline.demo.local_postgres import LocalPostgres  # noqa: E402
from radar_pipeline.engine import EngineSettings  # noqa: E402
from radar_pipeline.steps import deploy_analysis  # noqa: E402
from radar_pipeline.warehouse import analysis, deploys, migrations  # noqa: E402
from radar_pipeline.warehouse.database import driver, make_engine  # noqa: E402

TARGETS, QUERIES, SCRAPES = 8, 1500, 362  # six hours of one day partition per target
WINDOW = timedelta(minutes=60)
DEPLOY_AT = START + timedelta(minutes=SCRAPES - 61)
# A partition's index name holds its columns; the parent's index each stands for.
PARENT_INDEXES = [
    ("_pkey", "pgss_snapshot_pkey"),
    ("target_captured_at", "pgss_snapshot_target_time_idx"),
    ("captured_at", "pgss_snapshot_captured_brin"),
]
VERDICT_DEPLOYS = 60  # analyses per target whose verdicts retention's check looks through


@contextmanager
def without_index(engine: sa.Engine, index: str) -> Iterator[sa.Connection]:
    """A connection in a transaction where `index` (if it exists) is dropped; rolled back after."""
    with engine.connect() as conn:
        conn.execute(sa.text(f"DROP INDEX IF EXISTS radar.{index}"))
        try:
            yield conn
        finally:
            conn.rollback()


def timed(fn: Callable[[], Any], n: int = 3, warm: bool = False) -> float:
    """Median seconds of `n` calls of fn (after one untimed call when `warm`)."""
    if warm:
        fn()
    runs = []
    for _ in range(n):
        started = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - started)
    return statistics.median(runs)


def explain(conn: sa.Connection, query: str, params: dict[str, Any]) -> dict[str, Any]:
    """EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) of a psycopg-style query, in the connection's transaction."""
    with driver(conn).cursor() as cur:
        cur.execute("SET LOCAL work_mem = '64MB'")
        row = cur.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + query, params).fetchone()
    assert row is not None
    plan = row[0] if not isinstance(row[0], str) else json.loads(row[0])
    return plan[0]


def summary(plan: dict[str, Any]) -> str:
    """Execution time, the top node's buffers, and the scans of radar's tables (node, index, rows, loops, buffers)."""
    top = plan["Plan"]
    scans: dict[tuple[str, str], list[int]] = {}

    def walk(node: dict[str, Any]) -> None:
        relation = node.get("Relation Name") or ""
        index = node.get("Index Name", "")
        if "pgss_snapshot" in relation or "pgss_snapshot" in index or relation in ("verdict", "query"):
            name = "pgss_snapshot" if "pgss_snapshot" in relation + index else relation
            if name == "pgss_snapshot" and index:  # a partition's index, named for the parent's
                index = next(i for part, i in PARENT_INDEXES if part in index)
            key = (f"{node['Node Type']} on {name}" if relation else node["Node Type"], index)
            acc = scans.setdefault(key, [0, 0, 0, 0])
            acc[0] += int(node.get("Actual Rows", 0) * node.get("Actual Loops", 1))
            acc[1] += int(node.get("Actual Loops", 1))
            acc[2] += int(node.get("Shared Hit Blocks", 0))
            acc[3] += int(node.get("Shared Read Blocks", 0))
        for child in node.get("Plans", []):
            walk(child)

    walk(top)
    lines = [
        f"    {plan['Execution Time']:.1f} ms; buffers hit {top.get('Shared Hit Blocks', 0):,} "
        f"read {top.get('Shared Read Blocks', 0):,}"
    ]
    for (node, index), (rows, loops, hit, read) in sorted(scans.items()):
        using = f" using {index}" if index else ""
        lines.append(f"    {node}{using}: {rows:,} rows, {loops:,} loops, buffers hit {hit:,} read {read:,}")
    return "\n".join(lines)


def window_read(engine: sa.Engine, target: str) -> None:
    lo, hi = DEPLOY_AT - WINDOW, DEPLOY_AT + WINDOW
    params = {"t": target, "lo": lo, "hi": hi, "recent": lo - analysis.RECENT}
    query = analysis._window_query(restricted=False)
    intervals = "SELECT count(*) FROM radar.pgss_intervals(%(t)s, %(lo)s, %(hi)s)"
    print(f"window read of one target of {TARGETS} ({QUERIES:,} statements each, ±60 min):")
    for label, index in (("with", None), ("without", "pgss_snapshot_target_time_idx")):
        with engine.connect() if index is None else without_index(engine, index) as conn:
            took = timed(lambda: analysis.read_window(conn, target, lo, hi))  # noqa: B023
            took_intervals = timed(lambda: driver(conn).execute(intervals, params).fetchone())  # noqa: B023
            print(
                f"  {label} pgss_snapshot_target_time_idx: read_window {took:.3f} s, "
                f"pgss_intervals {took_intervals:.3f} s"
            )
            print("   EXPLAIN (ANALYZE, BUFFERS) of the window query:")
            print(summary(explain(conn, query, params)))
            print("   EXPLAIN (ANALYZE, BUFFERS) of radar.pgss_intervals:")
            print(summary(explain(conn, intervals, params)))
            conn.rollback()


def store_plans(engine: sa.Engine, target: str) -> None:
    """A plan for every statement of the target before the deploy; for every other one a different shape after it,
    and a look (plan_check) after it for the rest."""
    plan = json.dumps({"Plan": {"Node Type": "Index Scan", "Relation Name": "t", "Index Name": "t_pkey"}})
    seq = json.dumps({"Plan": {"Node Type": "Seq Scan", "Relation Name": "t"}})
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO radar.plan_snapshot SELECT :t, 5, 10, q, true, :before, 'generic_plan', 'h1', "
                "'Index Scan using t_pkey on t', 8, CAST(:plan AS jsonb) FROM generate_series(1000000, :last) q"
            ),
            {"t": target, "before": START, "plan": plan, "last": 1_000_000 + QUERIES - 1},
        )
        conn.execute(
            sa.text(
                "INSERT INTO radar.plan_snapshot SELECT :t, 5, 10, q, true, :after, 'generic_plan', 'h2', "
                "'Seq Scan on t', 900, CAST(:plan AS jsonb) FROM generate_series(1000000, :last, 2) q"
            ),
            {"t": target, "after": DEPLOY_AT + timedelta(minutes=5), "plan": seq, "last": 1_000_000 + QUERIES - 1},
        )
        conn.execute(
            sa.text(
                "INSERT INTO radar.plan_check SELECT :t, 5, 10, q, true, :after, 'h1' "
                "FROM generate_series(1000001, :last, 2) q"
            ),
            {"t": target, "after": DEPLOY_AT + timedelta(minutes=5), "last": 1_000_000 + QUERIES - 1},
        )


def plan_diffs(engine: sa.Engine, target: str) -> None:
    store_plans(engine, target)
    deploys.record(engine, deploys.DeployEvent(f"{target}-deploy", target, DEPLOY_AT))
    counting = {"on": False, "statements": 0}

    def count(*_: Any) -> None:
        if counting["on"]:
            counting["statements"] += 1

    sa.event.listen(engine, "before_cursor_execute", count)
    real = deploy_analysis.plan_diffs

    def counted(*args: Any, **kwargs: Any) -> Any:
        counting["on"] = True
        try:
            return real(*args, **kwargs)
        finally:
            counting["on"] = False

    deploy_analysis.plan_diffs = counted  # type: ignore[assignment]
    runs, statements = [], []
    for _ in range(3):
        counting["statements"] = 0
        result = deploy_analysis.analyse_deploy(
            deploy_analysis.AnalysisRun(engine, EngineSettings(window=WINDOW)), f"{target}-deploy"
        )
        runs.append(result)
        statements.append(counting["statements"])
    deploy_analysis.plan_diffs = real  # type: ignore[assignment]
    sa.event.remove(engine, "before_cursor_execute", count)
    detected = runs[-1].verdicts[runs[-1].verdicts["verdict"] == "detected"]
    changed = sum(bool(d.get("shape_changed")) for d in detected["plan_diff"])
    plans_s = statistics.median(r.seconds.plans for r in runs)
    per_analysis = statistics.median(r.seconds.total for r in runs)
    print(
        f"plan diffs of one analysis ({len(runs[-1].verdicts):,} statements, {len(detected)} detections, "
        f"{changed} with a changed plan): {statistics.median(statements)} statements to the warehouse, "
        f"{plans_s:.3f} s (median of 3); the whole analysis {per_analysis:.3f} s"
    )


def retention_check(engine: sa.Engine) -> None:
    """Verdicts for VERDICT_DEPLOYS analyses of every target, then EXPLAIN of retention's catalogue delete."""
    with engine.begin() as conn:
        for n in range(VERDICT_DEPLOYS):
            conn.execute(
                sa.text(
                    "INSERT INTO radar.deploy_event (deploy_id, target, deployed_at, source) "
                    "SELECT 'v-' || :n || '-' || t, t, :at, 'import' FROM unnest(CAST(:targets AS text[])) t"
                ),
                {"n": n, "at": START, "targets": [f"t{i}" for i in range(TARGETS)]},
            )
        conn.execute(
            sa.text(
                "INSERT INTO radar.analysis (deploy_id, target, settings, engine_version, window_start, window_end, "
                "queries, detected, no_regression, insufficient_data) SELECT deploy_id, target, '{}', 'x', "
                "deployed_at, deployed_at, 0, 0, 0, 0 FROM radar.deploy_event WHERE deploy_id LIKE 'v-%'"
            )
        )
        conn.execute(
            sa.text(
                "INSERT INTO radar.verdict (deploy_id, target, dbid, userid, queryid, toplevel, fingerprint, verdict, "
                "reason, n_before, n_after, calls_before, calls_after) SELECT a.deploy_id, a.target, 5, 10, q, true, "
                "q, 'no_regression', 'not_significant', 60, 60, 100, 100 FROM radar.analysis a "
                "CROSS JOIN generate_series(1000000, :last) q WHERE a.deploy_id LIKE 'v-%'"
            ),
            {"last": 1_000_000 + QUERIES - 1},
        )
        # A tenth of each target's statements were last seen long ago; a few of those (one in 50) have no verdict.
        conn.execute(
            sa.text(
                "UPDATE radar.query SET last_seen = :old WHERE queryid % 10 = 0 AND target = ANY(CAST(:t AS text[]))"
            ),
            {"old": START - timedelta(days=30), "t": [f"t{i}" for i in range(TARGETS)]},
        )
        conn.execute(sa.text("DELETE FROM radar.verdict WHERE queryid % 500 = 0"))
        conn.execute(sa.text("ANALYZE radar.verdict"))
        conn.execute(sa.text("ANALYZE radar.query"))
        verdicts = conn.execute(sa.text("SELECT count(*) FROM radar.verdict")).scalar_one()
    delete = (
        "DELETE FROM radar.query q WHERE q.last_seen < %(cutoff_at)s AND NOT EXISTS (SELECT 1 FROM "
        "radar.verdict v WHERE v.target = q.target AND v.dbid = q.dbid AND v.userid = q.userid "
        "AND v.queryid = q.queryid AND v.toplevel = q.toplevel)"
    )
    params = {"cutoff_at": START - timedelta(days=14)}
    print(f"retention's catalogue delete over {verdicts:,} verdicts (rolled back):")
    for label, index in (("with", None), ("without", "verdict_statement_idx")):
        with engine.connect() if index is None else without_index(engine, index) as conn:
            print(f"  {label} verdict_statement_idx:")
            print(summary(explain(conn, delete, params)))
            conn.rollback()


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="radar-hot-bench-"))
    server = LocalPostgres(root / "warehouse", settings={"shared_buffers": "512MB", "work_mem": "64MB"}).start()
    try:
        url = server.url(driver="postgresql+psycopg")
        migrations.upgrade(url)
        engine = make_engine(url)
        started = time.perf_counter()
        for i in range(TARGETS):
            fill(engine, f"t{i}", QUERIES, SCRAPES, regressed_from=SCRAPES - 61, seed=i + 1)
        with engine.begin() as conn:
            conn.execute(sa.text("ANALYZE radar.pgss_snapshot"))
            size = conn.execute(
                sa.text(
                    "SELECT pg_size_pretty(sum(pg_total_relation_size(c.oid))) FROM pg_class c "
                    "JOIN pg_inherits i ON i.inhrelid = c.oid "
                    "WHERE i.inhparent = 'radar.pgss_snapshot'::regclass"
                )
            ).scalar_one()
            index_bytes = conn.execute(
                sa.text(
                    "SELECT sum(pg_relation_size(i.inhrelid)) FROM pg_inherits i "
                    "WHERE i.inhparent = to_regclass('radar.pgss_snapshot_target_time_idx')"
                )
            ).scalar_one()
        per_row = f"{(index_bytes or 0) / (TARGETS * QUERIES * SCRAPES):.1f}"
        print(
            f"loaded {TARGETS} targets × {QUERIES:,} statements × {SCRAPES} scrapes "
            f"({TARGETS * QUERIES * SCRAPES:,} rows, {size} with indexes; pgss_snapshot_target_time_idx "
            f"{per_row} bytes a row) in {time.perf_counter() - started:.1f} s"
        )
        window_read(engine, "t3")
        plan_diffs(engine, "t5")
        retention_check(engine)
        engine.dispose()
    finally:
        server.destroy()


if __name__ == "__main__":
    main()
