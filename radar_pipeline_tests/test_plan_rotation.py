"""Plans for every active statement on real PostgreSQL: the busiest, new statements in the next run, a rotation
through the cheap rest within a count per run; typed literals pg_stat_statements normalised into texts PostgreSQL does
not parse (`date $1`, `interval $1 day`) planned; and, where a detection has no plan from before its change, why in
words (PostgreSQL 15 without pg_store_plans, a statement that cannot be planned, a new one, one not reached yet)."""

from __future__ import annotations

from datetime import timedelta

import pandas as pd
import psycopg
import pytest
import sqlalchemy as sa

from radar_pipeline.collector.plans import parsable
from radar_pipeline.config import Target
from radar_pipeline.engine import EngineSettings
from radar_pipeline.pgss_model import KEY, Key
from radar_pipeline.steps.deploy_analysis import AnalysisRun, analyse_deploy
from radar_pipeline.steps.plan_capture import capture_target
from radar_pipeline.steps.plan_diffs import plan_diffs
from radar_pipeline.warehouse import deploys
from radar_pipeline.warehouse.plans import REPLAN_AFTER, RETRY_SKIPPED_AFTER

from .helpers import collector_target, drive, run, scrape, tolerance_covering, window_covering

BUSY, CHEAP = 10, 50
TOP_N, ROTATION_N = 10, 15


def _keys(warehouse: sa.Engine, target: str, like: str) -> dict[str, Key]:
    """The stored statements whose text matches, by text."""
    with warehouse.connect() as conn:
        rows = conn.execute(
            sa.text(f"SELECT {', '.join(KEY)}, query FROM radar.query WHERE target = :t AND query LIKE :like"),
            {"t": target, "like": like},
        ).fetchall()
    return {r[4]: (int(r[0]), int(r[1]), int(r[2]), bool(r[3])) for r in rows}


def _checked(warehouse: sa.Engine, target: str) -> dict[Key, str]:
    """When each statement was last planned (radar.plan_check), as its shape."""
    with warehouse.connect() as conn:
        rows = conn.execute(
            sa.text(f"SELECT {', '.join(KEY)}, plan_hash FROM radar.plan_check WHERE target = :t"), {"t": target}
        ).fetchall()
    return {(int(r[0]), int(r[1]), int(r[2]), bool(r[3])): r[4] for r in rows}


def _checked_at(warehouse: sa.Engine, target: str) -> dict[Key, object]:
    """When each statement was last planned (radar.plan_check)."""
    with warehouse.connect() as conn:
        rows = conn.execute(
            sa.text(f"SELECT {', '.join(KEY)}, checked_at FROM radar.plan_check WHERE target = :t"), {"t": target}
        ).fetchall()
    return {(int(r[0]), int(r[1]), int(r[2]), bool(r[3])): r[4] for r in rows}


def _now(target: Target):  # type: ignore[no-untyped-def]
    with psycopg.connect(target.dsn, autocommit=True) as conn:
        return conn.execute("SELECT statement_timestamp()").fetchone()[0]  # type: ignore[index]


def _why(warehouse: sa.Engine, target: str, keys: list[Key], at) -> list[str]:  # type: ignore[no-untyped-def]
    """The plan diff's words for each statement with its change at `at` (no watched server reached)."""
    frame = pd.DataFrame(keys, columns=KEY).assign(change_at=pd.Timestamp(at), confidence=1.0)
    return [p.diff.get("unavailable", "") for p in plan_diffs(warehouse, target, frame, None, at)]


@pytest.mark.parametrize("server", ["pg18"], indirect=True)
def test_every_active_statement_gets_a_plan_in_turn_within_the_count_per_run(app_db, warehouse):
    """60 statements, 10 busy and 50 cheap: the busy ones are planned in the first run, the cheap ones in turn (the
    never planned first), at most TOP_N + ROTATION_N per run, so that after a few runs every one has a plan; a
    statement that appears is planned in the next run ahead of the rest; utility statements are remembered and not
    tried again each run; and a detection with no plan from before says why in words."""
    server, target = app_db
    busy = [f"SELECT count(DISTINCT v) FROM b{i} WHERE v LIKE %s" for i in range(BUSY)]
    cheap = [f"SELECT v FROM c{i} WHERE id = %s" for i in range(CHEAP)]
    run(
        target,
        f"DO $$ BEGIN FOR i IN 0..{BUSY - 1} LOOP EXECUTE format('CREATE TABLE b%s AS "
        "SELECT g AS id, md5(g::text) AS v FROM generate_series(1, 20000) g', i); END LOOP; "
        f"FOR i IN 0..{CHEAP - 1} LOOP EXECUTE format('CREATE TABLE c%s (id int PRIMARY KEY, v text)', i); END LOOP; "
        "END $$",
    )
    collector = collector_target(target)
    for text in cheap:
        run(target, text, 1, (1,))
    scrape(target, warehouse)
    for text in busy:
        run(target, text, 3, ("%ab%",))
    for text in cheap:
        run(target, text, 1, (2,))
    scrape(target, warehouse)
    keys = _keys(warehouse, target.name, "SELECT % FROM _% WHERE %")
    busy_keys = {keys[t.replace("%s", "$1")] for t in busy}
    cheap_keys = {keys[t.replace("%s", "$1")] for t in cheap}
    assert len(busy_keys) == BUSY and len(cheap_keys) == CHEAP
    utility = _keys(warehouse, target.name, "DO %") | _keys(warehouse, target.name, "GRANT %")
    assert utility

    first = capture_target(collector, warehouse, TOP_N, rotation_n=ROTATION_N)
    assert first.source == "generic_plan" and first.error is None
    assert first.tried <= TOP_N + ROTATION_N and first.planned["busiest"] == TOP_N
    planned = _checked(warehouse, target.name)
    assert busy_keys <= set(planned)  # in the first run (the busiest, and all new since the first capture)
    assert not set(first.skipped) & (busy_keys | cheap_keys)
    skipped_once = set(first.skipped)
    assert skipped_once & set(utility.values())  # new, so tried first, and not plannable
    assert all(r.startswith("not plannable: ") for k, r in first.skipped.items() if k in utility.values())

    # Not reached yet: the detection's plan diff says so, and why the utility statement has none.
    at = _now(target)
    unreached = sorted(cheap_keys - set(planned))[0]
    utility_key = sorted(skipped_once & set(utility.values()))[0]
    rotation_words, utility_words = _why(warehouse, target.name, [unreached, utility_key], at)
    assert rotation_words.startswith("it was not planned before the change at ")
    assert "had not reached it in their rotation through the statements" in rotation_words
    assert utility_words.startswith("it cannot be planned: not plannable: ") and "last tried" in utility_words

    # A statement that appears now is planned in the next run, ahead of the cheap ones never planned yet (the busy
    # ones, busy again, are the busiest).
    fresh = "SELECT c0.v, c1.v FROM c0 JOIN c1 USING (id) WHERE id = %s"
    run(target, fresh, 1, (3,))
    for text in busy:
        run(target, text, 5, ("%cd%",))
    scrape(target, warehouse)
    (fresh_key,) = _keys(warehouse, target.name, "SELECT c0.v, c1.v FROM c0 JOIN c1%").values()
    (new_words,) = _why(warehouse, target.name, [fresh_key], _now(target))
    assert new_words.startswith("it is new: it first ran at ") and "after the last plan capture before" in new_words

    runs = [first]
    while not (busy_keys | cheap_keys | {fresh_key}) <= set(_checked(warehouse, target.name)):
        assert len(runs) < 6, f"still not planned after {len(runs)} runs"
        runs.append(capture_target(collector, warehouse, TOP_N, rotation_n=ROTATION_N))
        if len(runs) == 2:
            assert fresh_key in _checked(warehouse, target.name) and runs[1].planned["new"] >= 1
        for later in runs[1:]:
            assert later.tried <= TOP_N + ROTATION_N
            assert not set(later.skipped) & skipped_once  # not tried again each run (only after a day)
    with warehouse.connect() as conn:
        recorded = conn.execute(
            sa.text(
                "SELECT source, busiest, new, rotation, stored, skipped FROM radar.plan_capture_run "
                "WHERE target = :t ORDER BY captured_at"
            ),
            {"t": target.name},
        ).fetchall()
    assert [tuple(r) for r in recorded] == [
        (
            "generic_plan",
            c.planned.get("busiest", 0),
            c.planned.get("new", 0),
            c.planned.get("rotation", 0),
            c.stored,
            len(c.skipped),
        )
        for c in runs
    ]
    # Once every statement has a plan recent enough, a run with nothing new or busy plans nothing; as plans age, the
    # rotation goes on with the least recently planned (the first run's), ROTATION_N a run.
    assert capture_target(collector, warehouse, TOP_N, rotation_n=ROTATION_N).tried == 0
    with warehouse.begin() as conn:
        conn.execute(
            sa.text("UPDATE radar.plan_check SET checked_at = checked_at - :age WHERE target = :t"),
            {"t": target.name, "age": REPLAN_AFTER},
        )
    aged = _checked_at(warehouse, target.name)
    again = capture_target(collector, warehouse, TOP_N, rotation_n=ROTATION_N)
    assert again.tried == ROTATION_N and again.planned == {"rotation": ROTATION_N} and again.stored == 0
    now = _checked_at(warehouse, target.name)
    replanned = {k for k in aged if now[k] != aged[k]}
    assert len(replanned) == ROTATION_N
    assert max(aged[k] for k in replanned) <= min(aged[k] for k in set(aged) - replanned)
    # Not forever: a day after, the statements that could not be planned are tried again (and skipped again).
    with warehouse.begin() as conn:
        conn.execute(
            sa.text("UPDATE radar.plan_skip SET skipped_at = skipped_at - :age WHERE target = :t"),
            {"t": target.name, "age": RETRY_SKIPPED_AFTER},
        )
    retried = capture_target(collector, warehouse, TOP_N, rotation_n=len(skipped_once) + ROTATION_N)
    assert skipped_once <= set(retried.skipped)
    # A role plan capture refuses (here the superuser): no plans from then on, and that is what is said.
    refused = capture_target(target, warehouse, TOP_N, rotation_n=ROTATION_N)
    assert refused.source is None and refused.tried == 0
    (refused_words,) = _why(warehouse, target.name, [utility_key], _now(target))
    assert refused_words.startswith("no plans on this target before the change at ")
    assert "plan capture refuses to run as 'postgres', a superuser" in refused_words


# Typed literals as an application writes them; pg_stat_statements shows each as `typename $n` (PostgreSQL 15 and 18
# alike), which PostgreSQL does not parse. One statement of each shape.
TYPED = [
    "SELECT * FROM typed WHERE ts > now() - interval '1 day'",
    "SELECT * FROM typed WHERE i = interval '1' day",
    "SELECT * FROM typed WHERE i = interval '1-2' year to month + interval '3' second(3)",
    "SELECT * FROM typed WHERE i = interval(3) '1 day' * 2",
    "SELECT * FROM typed WHERE d = date '2024-01-01'",
    "SELECT * FROM typed WHERE d < date '2024-01-01' AND ts > timestamp '2024-01-01 00:00'",
    "SELECT * FROM typed WHERE ts = timestamp(3) '2024-01-01'",
    "SELECT * FROM typed WHERE tz = timestamptz '2024-01-01 00:00+00'",
    "SELECT * FROM typed WHERE tz < timestamp with time zone '2024-01-01' AT TIME ZONE 'UTC'",
    "SELECT * FROM typed WHERE ts = timestamp without time zone '2024-01-01'",
    "SELECT * FROM typed WHERE tm = time '10:00'",
    "SELECT * FROM typed WHERE tt = time with time zone '10:00+00'",
    "SELECT * FROM typed WHERE n = numeric '1.5'",
    "SELECT * FROM typed WHERE n = numeric(10,2) '1.5'",
    "SELECT * FROM typed WHERE f = double precision '1'",
    "SELECT * FROM typed WHERE b = bool 't' AND bi = bigint '1'",
    "SELECT * FROM typed WHERE j @> jsonb '{}'",
    "SELECT * FROM typed WHERE u = uuid '00000000-0000-0000-0000-000000000000'",
    "SELECT * FROM typed WHERE x = varchar(10) 'a' OR x = \"char\" 'b'",
    "SELECT * FROM typed WHERE x = pg_catalog.text 'a'",
    "SELECT * FROM typed WHERE ip << inet '10.0.0.0/8'",
    "UPDATE typed SET ts = timestamp '2024-01-01' WHERE d = date '2024-01-02' AND x = 'é'",
    "DELETE FROM typed WHERE ts < now() - interval '30 days'",
]


@pytest.mark.parametrize("server", ["pg18"], indirect=True)
def test_typed_literals_pg_stat_statements_normalised_get_plans(app_db, warehouse):
    """Each shape's normalised text (`interval $1`, `date $1`, ...) is one PostgreSQL rejects as written; each gets a
    plan (rewritten as CAST($n AS type) for EXPLAIN only), and its stored text stays as pg_stat_statements gave it."""
    server, target = app_db
    run(
        target,
        "CREATE TABLE typed (d date, ts timestamp, tz timestamptz, tm time, tt timetz, n numeric, f float8, "
        "i interval, b bool, bi bigint, j jsonb, u uuid, x text, ip inet)",
    )
    run(target, "CREATE INDEX ON typed (ts)")
    collector = collector_target(target)
    for text in TYPED:
        run(target, text)
    scrape(target, warehouse)
    stored = {
        **_keys(warehouse, target.name, "SELECT * FROM typed %"),
        **_keys(warehouse, target.name, "UPDATE typed %"),
        **_keys(warehouse, target.name, "DELETE FROM typed %"),
    }
    assert len(stored) == len(TYPED), sorted(stored)
    with psycopg.connect(target.dsn) as conn:
        for text in stored:  # as written, PostgreSQL does not take it; rewritten, it does
            with pytest.raises(psycopg.errors.SyntaxError):
                conn.execute(f"EXPLAIN (GENERIC_PLAN) {text}")
            conn.rollback()
            conn.execute(f"EXPLAIN (GENERIC_PLAN) {parsable(text)}")
    capture = capture_target(collector, warehouse, 1, rotation_n=len(TYPED) + 20)
    assert not set(capture.skipped) & set(stored.values()), capture.skipped
    assert set(stored.values()) <= set(_checked(warehouse, target.name))
    with warehouse.connect() as conn:
        texts = conn.execute(
            sa.text("SELECT query FROM radar.query WHERE target = :t AND query LIKE '%typed%'"), {"t": target.name}
        ).scalars()
        assert set(stored) <= set(texts)  # stored as pg_stat_statements gave them
    assert "CAST($1 AS interval day)" in parsable("SELECT * FROM typed WHERE i = interval $1 day")
    assert parsable("SELECT $1::date, date($2), 'a'") == "SELECT $1::date, date($2), 'a'"  # nothing to rewrite


def test_postgresql_15_without_pg_store_plans_has_a_plan_from_before(pg15, warehouse):
    """On PostgreSQL 15 without pg_store_plans the generic plan is captured (prepared under force_generic_plan): a
    statement's change has a plan from before it, so its plan diff misses none from before (one after the change is
    another matter); before any capture ran, that is what is said."""
    name = pg15.new_database("words")
    try:
        pg15.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements", name)
        target = Target("words15", pg15.pg.url(name))
        run(target, "CREATE TABLE w (id int PRIMARY KEY)")
        run(target, "SELECT id FROM w WHERE id = %s", 3, (1,))
        scrape(target, warehouse)
        capture = capture_target(collector_target(target), warehouse)
        assert capture.source == "generic_plan" and capture.tried >= 1, capture
        (key,) = _keys(warehouse, target.name, "SELECT id FROM w %").values()
        assert _checked(warehouse, target.name).get(key)  # planned
        (words,) = _why(warehouse, target.name, [key], _now(target))
        assert "before the change" not in words and not words.startswith("no plans on"), words  # one from before
        (never,) = _why(warehouse, "elsewhere", [key], _now(target))
        assert never.endswith("no plan capture is recorded on this target before it")
    finally:
        pg15.drop_database(name)


LOOKUP = "SELECT payload FROM probe WHERE id = %s"
HEAVY = "SELECT count(DISTINCT payload) FROM items WHERE payload > %s"


@pytest.mark.parametrize("server", ["pg18"], indirect=True)
def test_a_cheap_statement_has_a_plan_from_before_an_index_drop_so_its_cause_is_plan_changed(app_db, warehouse):
    """The issue's case: an index dropped at a deploy slows a statement that was cheap before it. With one statement
    planned by execution time per capture (the heavy one), the lookup still gets its plan from before, in turn, so
    its detection has a plan diff and the cause plan_changed (not "no plan was captured before the change")."""
    server, target = app_db
    run(target, "CREATE TABLE probe (id int, payload text)")
    run(target, "INSERT INTO probe SELECT g, md5(g::text) FROM generate_series(1, 50000) g")
    run(target, "CREATE INDEX probe_id_idx ON probe (id)")
    run(target, "ANALYZE probe")
    collector = collector_target(target)
    nominal, scrape_every, samples = 3.0, 0.15, 20

    def work(conn: psycopg.Connection) -> None:
        for i in range(10):
            conn.execute(LOOKUP, (i * 37 + 1,))
        for _ in range(3):
            conn.execute(HEAVY, ("a",))

    for _ in range(4):  # plan captures come every 10 minutes between the scrapes
        drive(target, warehouse, work, scrape_every, 2)
        capture = capture_target(collector, warehouse, 1, rotation_n=3)
        assert capture.tried <= 4
    (lookup,) = _keys(warehouse, target.name, "SELECT payload FROM probe%").values()
    (heavy,) = _keys(warehouse, target.name, "SELECT count(DISTINCT payload)%").values()
    assert {lookup, heavy} <= set(_checked(warehouse, target.name))

    earlier = drive(target, warehouse, work, scrape_every, samples + 3)
    recorded = deploys.record(warehouse, deploys.DeployEvent("drop-cheap", target.name))
    at = recorded.event.deployed_at
    run(target, "DROP INDEX probe_id_idx")
    later = drive(target, warehouse, work, scrape_every, samples + 2)
    window = max(window_covering(earlier, at, samples, nominal), (later[samples] - at).total_seconds())
    drive(target, warehouse, work, scrape_every, 1, until=at + timedelta(seconds=window + scrape_every))
    tolerance = tolerance_covering(earlier, later, at, 1.0)
    settings = EngineSettings(window=timedelta(seconds=window), tolerance_floor=timedelta(seconds=tolerance))
    result = analyse_deploy(AnalysisRun(warehouse, settings, live_targets={target.name: collector}), "drop-cheap")
    row = result.verdicts.set_index("queryid").loc[lookup[2]]
    assert row.verdict == "detected" and row.cause == "plan_changed", (row.cause, row.plan_diff)
    assert row.plan_diff["changes"] == ["Index Scan using probe_id_idx on probe → Seq Scan on probe"]


def _entries(target: Target) -> int:
    with psycopg.connect(target.dsn, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM pg_stat_statements").fetchone()[0]  # type: ignore[index]


def test_plan_capture_leaves_pg_stat_statements_room_for_the_application(tmp_path, warehouse):
    """Each EXPLAIN is an entry of pg_stat_statements of its own (under the collector's role, never stored by radar):
    on a server keeping 100 entries, a capture plans no more statements than leave a fifth of them free (the busiest
    first), says what it held back and why in its outcome and radar.plan_capture_run, and with no room left plans the
    busiest alone (a busy server's view is usually full, and their plans are the ones most needed); where the
    collector's EXPLAINs are not tracked (track_utility off for its role) none is held back. The run's times are the
    watched server's: its skips are stamped with the run's time."""
    from radar_pipeline.demo.local_postgres import LocalPostgres

    with LocalPostgres(tmp_path / "small", settings={"pg_stat_statements.max": "100"}) as pg:
        target = Target("small", pg.url())
        run(target, "CREATE EXTENSION pg_stat_statements")
        run(target, "DO $$ BEGIN FOR i IN 0..79 LOOP EXECUTE format('CREATE TABLE s%s (id int)', i); END LOOP; END $$")
        collector = collector_target(target)
        for i in range(40):
            run(target, f"SELECT id FROM s{i} WHERE id = %s", 1 + (i < 5) * 20, (1,))
        scrape(target, warehouse)
        first = capture_target(collector, warehouse, 5, rotation_n=200)
        assert first.source == "generic_plan" and first.error is None
        assert _entries(target) <= 80
        assert first.planned["busiest"] == 5 and first.held_back > 0 and first.tried >= 5
        assert first.held_back_reason is not None and "pg_stat_statements" in first.held_back_reason
        assert "of its 100 entries" in first.held_back_reason, first.held_back_reason
        with warehouse.connect() as conn:
            recorded = conn.execute(
                sa.text(
                    "SELECT captured_at, held_back, held_back_reason FROM radar.plan_capture_run WHERE target = :t"
                ),
                {"t": target.name},
            ).one()
            skipped_at = set(
                conn.execute(sa.text("SELECT skipped_at FROM radar.plan_skip WHERE target = :t"), {"t": target.name})
                .scalars()
                .all()
            )
        assert tuple(recorded)[1:] == (first.held_back, first.held_back_reason)
        assert skipped_at == {recorded.captured_at}  # one clock: the watched server's
        waiting = set(_keys(warehouse, target.name, "SELECT id FROM s% WHERE %").values()) - set(
            _checked(warehouse, target.name)
        )
        (words,) = _why(warehouse, target.name, sorted(waiting)[:1], _now(target))
        assert "had not reached it in their rotation" in words and first.held_back_reason in words
        # No room at all: the busiest alone are planned, the rest held back.
        for i in range(40, 80):
            run(target, f"SELECT id FROM s{i} WHERE id = %s", 2, (1,))
        scrape(target, warehouse)
        assert _entries(target) > 80
        full = capture_target(collector, warehouse, 5, rotation_n=200)
        assert full.tried == full.planned["busiest"] > 0 and full.held_back > 0
        assert "no room" in (full.held_back_reason or "")
        # The collector's EXPLAINs not tracked: nothing to hold back.
        run(
            target,
            f"ALTER ROLE {collector.dsn.split('//')[1].split('@')[0]} SET pg_stat_statements.track_utility = off",
        )
        untracked = capture_target(collector, warehouse, 5, rotation_n=200)
        assert untracked.held_back == 0 and untracked.tried >= 5 and untracked.held_back_reason is None


def test_a_failed_capture_is_stamped_with_the_watched_servers_clock(warehouse):
    """A capture that cannot reach its server records its failure at the watched server's clock as the target's last
    run that reached it measured it against the warehouse's (here 2 hours ahead), so no_plan_before compares one
    clock with itself."""
    from radar_pipeline.steps.plan_capture import capture_targets

    with warehouse.begin() as conn:
        wnow = conn.execute(sa.text("SELECT now()")).scalar_one()
        conn.execute(
            sa.text(
                "INSERT INTO radar.plan_capture_run (target, captured_at, warehouse_at, source, server_version_num) "
                "VALUES ('gone', :at, :now, 'generic_plan', 180000)"
            ),
            {"at": wnow - timedelta(minutes=10) + timedelta(hours=2), "now": wnow - timedelta(minutes=10)},
        )
    (failed,) = capture_targets([Target("gone", "postgresql://postgres@127.0.0.1:1/none")], warehouse)
    assert failed.error is not None
    with warehouse.connect() as conn:
        stamped, reason = conn.execute(
            sa.text("SELECT captured_at, reason FROM radar.plan_capture_run WHERE target = 'gone' AND source IS NULL")
        ).one()
    assert reason.startswith("the plan capture failed: ")
    assert timedelta(hours=2) - timedelta(minutes=1) < stamped - wnow < timedelta(hours=2) + timedelta(minutes=5)
