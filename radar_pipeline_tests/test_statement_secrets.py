"""Secrets in statement texts: PostgreSQL does not normalise utility statements, so a CREATE ROLE's password reaches
pg_stat_statements as typed. The collector redacts it before anything is stored, and `radar db upgrade` cleans what
an older version stored."""

from __future__ import annotations

import uuid

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from radar_pipeline.cli import main
from radar_pipeline.collector.fingerprint import fingerprint, redact

from .helpers import run, scrape

SECRET = "hunter2-Secret"


@pytest.mark.parametrize(
    ("text", "redacted"),
    [
        ("CREATE ROLE app LOGIN PASSWORD 'apppw'", "CREATE ROLE app LOGIN PASSWORD '<redacted>'"),
        ("ALTER USER app WITH PASSWORD E'a\\'b' VALID UNTIL 'infinity'", None),
        ("ALTER ROLE app PASSWORD 'SCRAM-SHA-256$4096:c2FsdA==$a:b'", "ALTER ROLE app PASSWORD '<redacted>'"),
        ("CREATE USER MAPPING FOR app SERVER s OPTIONS (user 'u', password 'pw')", None),
        ("CREATE SERVER s FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host 'h', password 'pw')", None),
        ("ALTER SERVER s OPTIONS (SET password 'pw')", "ALTER SERVER s OPTIONS (SET password '<redacted>')"),
        ("DO $body$BEGIN EXECUTE 'ALTER ROLE app PASSWORD ''pw'''; END$body$", "DO '<redacted>'"),
        ("SET app.token = 'pw'", "SET app.token = '<redacted>'"),
        # a parameter's value, quoted or not, whatever sets it
        ("SET my.password = pw7", "SET my.password = '<redacted>'"),
        ("SET my.password TO secretword", "SET my.password TO '<redacted>'"),
        ("ALTER ROLE app SET my.token = plainident", "ALTER ROLE app SET my.token = '<redacted>'"),
        ("SET app.pin = 1234", "SET app.pin = '<redacted>'"),
        (
            "SET LOCAL app.pin = -1234; SET app.key TO pw, 'pw'",
            "SET LOCAL app.pin = '<redacted>'; SET app.key TO '<redacted>', '<redacted>'",
        ),
        ("ALTER SYSTEM SET my.key = pw.x", "ALTER SYSTEM SET my.key = '<redacted>'"),
        ("ALTER DATABASE d SET my.key TO pw8", "ALTER DATABASE d SET my.key TO '<redacted>'"),
        ("ALTER TABLE t ALTER c SET DEFAULT 5", "ALTER TABLE t ALTER c SET DEFAULT 5"),  # no parameter: kept
        # a core setting that changes plans is no secret, and its value is what a reader of the deploy needs (issue
        # 39: `work_mem = '<redacted>'`); a custom one beside it in the same text is still blanked
        ("ALTER ROLE app SET work_mem = '64kB'", "ALTER ROLE app SET work_mem = '64kB'"),
        ("ALTER SYSTEM SET random_page_cost TO 1.1", "ALTER SYSTEM SET random_page_cost TO 1.1"),
        (
            "SET LOCAL enable_seqscan = off; SET app.key = 'pw'; ALTER ROLE app PASSWORD 'pw'",
            "SET LOCAL enable_seqscan = off; SET app.key = '<redacted>'; ALTER ROLE app PASSWORD '<redacted>'",
        ),
        ("SET statement_timeout = '5s'", "SET statement_timeout = '<redacted>'"),  # changes no plan: blanked
        # a text the parser cannot read (newer syntax, a cut text): every quoted literal, closed or not
        ("ALTER ROLE app WITH FUTURE_OPTION PASSWORD 'pw' -- it's", None),
        ("ALTER ROLE app PASSWORD 'pw", "ALTER ROLE app PASSWORD '<redacted>'"),
        ("NEWCOMMAND $x$ pw $x$, $$pw$$, 'p''w', $1", "NEWCOMMAND '<redacted>', '<redacted>', '<redacted>', $1"),
        # read by the scanner, not a regex: a quote in a comment or an E'\'' does not put it out of step
        (
            "-- the app's role\nCREATE ROLE app LOGIN PASSWORD 'hunter2' IN ROLE x, ",
            "-- the app's role\nCREATE ROLE app LOGIN PASSWORD '<redacted>' IN ROLE x, ",
        ),
        (
            "ALTER ROLE app PASSWORD E'it\\'s-hunter3' VALID UNTIL '2030",
            "ALTER ROLE app PASSWORD '<redacted>' VALID UNTIL '<redacted>'",
        ),
        ("ALTER ROLE \"it's\" PASSWORD 'pw' FUTURE \"cut", "ALTER ROLE \"it's\" PASSWORD '<redacted>' FUTURE \"cut"),
        ("SET my.key = pw /* cut", "SET my.key = '<redacted>' /* cut"),
        # plannable statements: pg_stat_statements shows their constants as $n; their text is kept as is
        ("SELECT * FROM orders WHERE note = $1 AND tag = 'x'", "SELECT * FROM orders WHERE note = $1 AND tag = 'x'"),
        ("UPDATE t SET a = $1 WHERE b = $2", "UPDATE t SET a = $1 WHERE b = $2"),
        ("UPDATE t SET a = b WHERE c = $1 AND d = 'pw", "UPDATE t SET a = b WHERE c = $1 AND d = '<redacted>'"),
    ],
)
def test_redaction_blanks_every_literal_of_utility_statements(text, redacted):
    out = redact(text)
    if redacted is not None:
        assert out == redacted
    assert not any(s in out.replace("password", "") for s in ("pw", "hunter", "secret", "plainident", "1234", "SCRAM"))
    assert redact(out) == out  # idempotent: the upgrade may run again
    assert fingerprint(redact(text)) == fingerprint(out)


def test_a_role_password_scraped_by_the_collector_is_stored_redacted(app_db, warehouse, warehouse_url):
    server, target = app_db
    role = f"radar_secret_{uuid.uuid4().hex[:8]}"
    scrape(target, warehouse)  # the baseline
    try:
        run(target, f"CREATE ROLE {role} LOGIN PASSWORD '{SECRET}'")
        run(target, f"ALTER ROLE {role} PASSWORD '{SECRET}-2' VALID UNTIL 'infinity'")
        run(target, f"DO $$BEGIN EXECUTE 'ALTER ROLE {role} PASSWORD ''{SECRET}-3'''; END$$")
        with _raw(target) as conn:  # the watched server stores it as typed
            assert conn.execute(
                "SELECT count(*) FROM pg_stat_statements WHERE query LIKE %s", (f"%{SECRET}%",)
            ).fetchone()[0]
        stored = scrape(target, warehouse)
        assert stored.new_statements > 0
    finally:
        server.execute(f"DROP ROLE IF EXISTS {role}")
    with warehouse.connect() as conn:
        texts = dict(
            conn.execute(
                sa.text("SELECT query, fingerprint FROM radar.query WHERE target = :t AND query LIKE :r"),
                {"t": target.name, "r": f"%{role}%"},
            ).all()
        )
        leaked = conn.execute(
            sa.text("SELECT count(*) FROM radar.query WHERE strpos(query, :s) > 0"), {"s": SECRET}
        ).scalar_one()
    assert f"CREATE ROLE {role} LOGIN PASSWORD '<redacted>'" in texts
    assert f"ALTER ROLE {role} PASSWORD '<redacted>' VALID UNTIL '<redacted>'" in texts
    assert leaked == 0
    assert all(key == fingerprint(text) for text, key in texts.items())  # the key is the redacted text's

    _analysed_with_every_statement(warehouse, target.name)
    for form in ("table", "csv", "json"):
        printed = CliRunner().invoke(
            main, ["verdicts", "s-1", "--all", "--format", form, "--warehouse", warehouse_url], env={"COLUMNS": "400"}
        )
        assert printed.exit_code == 0, printed.output
        assert role in printed.output and "&lt;redacted&gt;" not in printed.output
        assert SECRET not in printed.output


def test_the_upgrade_cleans_texts_an_older_version_stored(warehouse, warehouse_url):
    old = {
        1: f"CREATE ROLE app LOGIN PASSWORD '{SECRET}'",
        2: f"ALTER USER app PASSWORD '{SECRET}'",
        3: "SELECT * FROM orders WHERE id = $1",
        4: f"ALTER ROLE app PASSWORD '{SECRET}" + " x" * 5000,  # cut to the stored length: it keeps its key
    }
    _stored_by_an_older_version(warehouse, old)
    assert fingerprint(old[1]) != fingerprint(redact(old[1]))

    first = CliRunner().invoke(main, ["db", "upgrade", "--warehouse", warehouse_url])
    assert first.exit_code == 0, first.output
    assert "3 statement text(s) redacted" in first.output
    with warehouse.connect() as conn:
        stored = {r.queryid: r for r in conn.execute(sa.text("SELECT queryid, query, fingerprint FROM radar.query"))}
        snapshot = dict(conn.execute(sa.text("SELECT queryid, fingerprint FROM radar.pgss_snapshot")).all())
        leaked = conn.execute(
            sa.text("SELECT count(*) FROM radar.query WHERE strpos(query, :s) > 0"), {"s": SECRET}
        ).scalar_one()
    assert leaked == 0
    assert stored[1].query == "CREATE ROLE app LOGIN PASSWORD '<redacted>'"
    assert stored[2].query == "ALTER USER app PASSWORD '<redacted>'"
    assert stored[3].query == old[3]  # a plannable statement is left as it was
    for queryid in (1, 2, 3):  # each key is its text's, as the collector computes it now, and the snapshots follow
        assert stored[queryid].fingerprint == fingerprint(stored[queryid].query) == snapshot[queryid]
    assert stored[4].fingerprint == fingerprint(old[4]) == snapshot[4]

    again = CliRunner().invoke(main, ["db", "upgrade", "--warehouse", warehouse_url])
    assert again.exit_code == 0 and "redacted" not in again.output  # done once


def test_the_upgrade_cleans_what_the_first_redaction_kept(warehouse, warehouse_url):
    """The first redaction (before key_version 3) read a text the parser rejected with a regex, which a quote in a
    comment or an E'\\'' put out of step: the literal stayed between two '<redacted>'. It left SET values as typed."""
    old = {
        1: "-- the app'<redacted>'hunter2'<redacted>'",  # from "-- the app's role\nCREATE ROLE … 'hunter2' …, "
        2: "ALTER ROLE app PASSWORD E'<redacted>'s-hunter3'<redacted>'2030",  # from "… E'it\\'s-hunter3' … '2030"
        3: "SET my.password = pw7",
        4: "ALTER ROLE app PASSWORD '<redacted>' VALID UNTIL '<redacted>'",  # parsed, redacted right: kept
    }
    _stored_by_an_older_version(warehouse, old)
    with warehouse.begin() as conn:
        conn.execute(sa.text("UPDATE radar.key_version SET version = 2"))  # keys current, texts redacted the first way

    first = CliRunner().invoke(main, ["db", "upgrade", "--warehouse", warehouse_url])
    assert first.exit_code == 0, first.output
    assert "3 statement text(s) redacted" in first.output
    with warehouse.connect() as conn:
        stored = {r.queryid: r for r in conn.execute(sa.text("SELECT queryid, query, fingerprint FROM radar.query"))}
        snapshot = dict(conn.execute(sa.text("SELECT queryid, fingerprint FROM radar.pgss_snapshot")).all())
        assert conn.execute(sa.text("SELECT version FROM radar.key_version")).scalar_one() == 3
    assert {q: r.query for q, r in stored.items()} == {
        1: "-- the app'<redacted>'",
        2: "ALTER ROLE app PASSWORD '<redacted>'",
        3: "SET my.password = '<redacted>'",
        4: old[4],
    }
    assert all(r.fingerprint == fingerprint(r.query) == snapshot[q] for q, r in stored.items())

    # once: what the collector now stores from a text the parser rejects is kept as it is
    _stored_by_an_older_version(warehouse, {5: "NEWCOMMAND '<redacted>', '<redacted>', $1"})
    again = CliRunner().invoke(main, ["db", "upgrade", "--warehouse", warehouse_url])
    assert again.exit_code == 0 and "redacted" not in again.output, again.output


def _stored_by_an_older_version(warehouse, texts: dict[int, str]) -> None:
    """Statements of target 'main' with these texts (by queryid), keyed as stored, each with a snapshot row."""
    with warehouse.begin() as conn:
        conn.execute(sa.text("SELECT radar.ensure_pgss_snapshot_partitions(current_date, 1)"))
        for queryid, text in texts.items():
            key = fingerprint(text)  # as the older version keyed it: a password is part of its tree
            conn.execute(
                sa.text(
                    "INSERT INTO radar.query VALUES ('main', 1, 10, :q, true, :f, :text, now(), now(), 1, 1, NULL, "
                    "NULL)"
                ),
                {"q": queryid, "f": key, "text": text[:8192]},
            )
            conn.execute(
                sa.text(
                    "INSERT INTO radar.pgss_snapshot VALUES ('main', now(), 1, 10, :q, true, 1, 1, 1, 0, 1, 0, 0.0, "
                    "NULL, false, :f)"
                ),
                {"q": queryid, "f": key},
            )


def _raw(target):  # type: ignore[no-untyped-def]
    import psycopg

    return psycopg.connect(target.dsn, autocommit=True)


def _analysed_with_every_statement(warehouse, target: str) -> None:
    """An analysis of deploy s-1 with a verdict for every stored statement of the target, for `radar verdicts`."""
    with warehouse.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO radar.deploy_event (deploy_id, target, deployed_at, source) VALUES ('s-1', :t, now(), "
                "'cli')"
            ),
            {"t": target},
        )
        conn.execute(
            sa.text(
                "INSERT INTO radar.analysis (deploy_id, target, settings, engine_version, window_start, window_end, "
                "queries, detected, no_regression, insufficient_data) VALUES ('s-1', :t, '{}', '1', "
                "now() - interval '1 hour', now(), 1, 1, 0, 0)"
            ),
            {"t": target},
        )
        conn.execute(
            sa.text(
                "INSERT INTO radar.verdict (deploy_id, target, dbid, userid, queryid, toplevel, fingerprint, verdict, "
                "reason, change_at, mean_before_ms, mean_after_ms, change_factor, confidence, n_before, n_after, "
                "calls_before, calls_after, cause) SELECT 's-1', target, dbid, userid, queryid, toplevel, "
                "fingerprint, 'detected', 'significant', now(), 1, 3, 3, 0.99, 30, 30, 300, 300, 'unexplained' "
                "FROM radar.query WHERE target = :t"
            ),
            {"t": target},
        )
