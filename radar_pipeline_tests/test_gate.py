"""`radar gate`, `radar deploys` and `radar status` on the embedded PostgreSQL, with deploys analysed for real (the
counters and plans of test_deploy_state: st-pass passes, st-fail fails, st-unsure is inconclusive, st-heavy passes
with its heavy statement bounded within the gate factor).

One warehouse serves the module; the tests that analyse a deploy while the gate waits have a deploy each (st-late,
st-away), pending until then. st-open's window is still open; st-ghost went to a target never scraped.
"""

from __future__ import annotations

import os
import queue
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from radar_pipeline.cli import main
from radar_pipeline.demo.local_postgres import free_port
from radar_pipeline.steps.deploy_analysis import AnalysisRun, analyse_deploy
from radar_pipeline.warehouse import deploys
from radar_pipeline.warehouse.database import make_engine

from .helpers import store_counters
from .silent_proxy import close_all, pipe
from .test_deploy_state import PLANS, SETTINGS, TEXTS, _counters

RADAR = str(Path(sys.executable).parent / "radar")
# The st-fail statement's text, longer than any terminal: a table printed to a pipe shows it whole.
LONG_TEXT = (
    "SELECT o.id, o.customer_id, o.created_at, o.total, c.name, c.email, c.country FROM orders o JOIN customers c "
    "ON c.id = o.customer_id WHERE o.customer_id = $1 AND o.created_at > now() - interval '30 days' AND o.status "
    "IN ('paid', 'shipped', 'delivered') ORDER BY o.created_at DESC LIMIT 50 /* the end of a long statement */"
)
# The times the daemon would have: the window the analyses used, scrapes every 10 s.
TIMES = {"RADAR_WINDOW_SECONDS": "200", "RADAR_SCRAPE_INTERVAL_SECONDS": "10"}
DEADLINE_S = 120.0


@pytest.fixture(scope="module")
def gate_url(pg18, warehouse_template) -> Iterator[str]:
    """A warehouse with st-pass, st-fail and st-unsure analysed; st-late and st-away recorded on st-pass's target at
    the same time, not analysed; st-open deployed just now; st-ghost, recorded an hour ago, to a target never
    scraped."""
    name = pg18.new_database("gate", template=warehouse_template)
    url = pg18.pg.url(name, driver="postgresql+psycopg")
    engine = make_engine(url)
    at = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    rng = np.random.default_rng(24)
    for deploy_id, plan in PLANS.items():
        texts = {q: LONG_TEXT if (deploy_id, q) == ("st-fail", 1) else TEXTS[q] for q in plan}
        store_counters(engine, deploy_id, _counters(at, plan, rng), texts)
        deploys.record(engine, deploys.DeployEvent(deploy_id, deploy_id, at, service="shop", version="v2"))
        analyse_deploy(AnalysisRun(engine, SETTINGS), deploy_id)
    for deploy_id in ("st-late", "st-away"):
        deploys.record(engine, deploys.DeployEvent(deploy_id, "st-pass", at))
    deploys.record(engine, deploys.DeployEvent("st-open", "st-pass", datetime.now(UTC) - timedelta(seconds=5)))
    deploys.record(engine, deploys.DeployEvent("st-ghost", "ghost", at), configured_targets=["ghost"])
    with engine.begin() as conn:  # recorded an hour ago, and never analysed since: as with no daemon running
        conn.execute(sa.text("UPDATE radar.deploy_event SET received_at = deployed_at WHERE deploy_id = 'st-ghost'"))
    engine.dispose()
    yield url
    make_engine(url).dispose()
    pg18.drop_database(name)


def _radar(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """The real console script, its output a pipe (as in a CI job, where COLUMNS is not set)."""
    base = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    return subprocess.run(
        [RADAR, *args], capture_output=True, text=True, timeout=300, env={**base, **TIMES, **(env or {})}
    )


def _invoke(args: list[str], env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(main, args, env={"COLUMNS": None, **TIMES, **(env or {})})


def test_gate_exit_codes_and_answers_through_the_console_script(gate_url):
    fail = _radar(["gate", "st-fail", "--warehouse", gate_url])
    assert fail.returncode == 1, fail.stderr
    lines = fail.stdout.splitlines()
    assert lines, fail.stderr
    # the state first; a failed deploy's detections decide it, so no margins (a pass's line has them, below)
    assert lines[0] == "deploy st-fail: fail", lines[0]
    assert "target st-fail" in lines[1] and "service shop" in lines[1] and "analysed" in lines[1]
    assert lines[2] == "  verdicts: 1 detected, 1 no_regression, 1 inconclusive, 0 insufficient_data"
    shares = r"  execution time after the deploy: [\d.]+% cleared, [\d.]+% inconclusive, [\d.]+% detected"
    assert re.fullmatch(shares, lines[3]), lines[3]
    assert lines[4] == "detections (1):"
    detection = r"  ×[23]\.\d\d \[×\d\.\d\d, ×\d\.\d\d\] cause \w+, queryid 1: "
    assert re.fullmatch(detection + re.escape(LONG_TEXT), lines[5]), lines[5]

    ok = _invoke(["gate", "st-pass", "--warehouse", gate_url])
    assert ok.exit_code == 0 and ok.stdout.startswith("deploy st-pass: pass (open statements may add 0."), ok.output
    assert "detections" not in ok.stdout

    pending = _radar(["gate", "st-open", "--wait", "1s", "--poll", "0.2s", "--warehouse", gate_url])
    assert pending.returncode == 4, pending.stderr
    assert pending.stdout.startswith("deploy st-open: pending\n")
    progress = r"st-open: pending: the window after the deploy closes in \dm\d\ds \(at .* UTC\), its verdict is due"
    stale = r"; target st-pass was last scraped (5\dm\d\ds|1h\d\dm) ago\n"  # the fixture's counters stop an hour ago
    assert re.search(progress + r" at [-\d]+ [:\d]+ UTC" + stale, pending.stderr), pending.stderr
    assert pending.stderr.splitlines()[-1] == "Error: deploy 'st-open' is still pending at the deadline"

    unknown = _invoke(["gate", "nope-1", "--warehouse", gate_url])
    assert unknown.exit_code == 2 and unknown.stdout == ""
    assert unknown.stderr.strip() == (
        "Error: deploy 'nope-1' is not recorded (`radar deploy` records it; `radar deploys` lists the recent ones)"
    )


def test_gate_inconclusive_and_json(gate_url):
    unsure = _invoke(["gate", "st-unsure", "--warehouse", gate_url])
    assert unsure.exit_code == 3 and unsure.stdout.startswith("deploy st-unsure: inconclusive ("), unsure.output
    assert _invoke(["gate", "st-unsure", "--inconclusive-ok", "--warehouse", gate_url]).exit_code == 0
    assert _invoke(["gate", "st-fail", "--inconclusive-ok", "--warehouse", gate_url]).exit_code == 1

    import json

    answer = json.loads(_invoke(["gate", "st-fail", "--format", "json", "--warehouse", gate_url]).stdout)
    assert answer["state"] == "fail" and answer["exit_code"] == 1
    assert answer["counts"] == {"detected": 1, "no_regression": 1, "inconclusive": 1, "insufficient_data": 0}
    assert abs(sum(v for v in answer["shares"].values()) - 1) < 1e-9 and answer["pass_share"] == 0.9
    [found] = answer["detections"]
    assert found["queryid"] == 1 and found["query"] == LONG_TEXT and found["cause"]
    assert found["factor_low"] < found["factor_at_change"] < found["factor_high"] and found["change_factor"] > 2
    assert answer["deploy"]["target"] == "st-fail" and answer["deploy"]["version"] == "v2"
    closes = datetime.fromisoformat(answer["deploy"]["window_closes_at"])
    assert closes - datetime.fromisoformat(answer["deploy"]["deployed_at"]) == timedelta(seconds=200)
    unsure = json.loads(_invoke(["gate", "st-unsure", "--format", "json", "--warehouse", gate_url]).stdout)
    assert unsure["state"] == "inconclusive" and 0.5 < unsure["shares"]["inconclusive"] < 0.8


def test_a_pass_names_the_heavy_statement_left_open_within_the_gate_factor(gate_url):
    heavy = _invoke(["gate", "st-heavy", "--warehouse", gate_url])
    assert heavy.exit_code == 0 and heavy.stdout.startswith("deploy st-heavy: pass ("), heavy.output
    within = r"; 1 heavier statement open within ×1\.4 \(bound up to ×1\.\d\d, adding up to [\d.]+%; counted together\)"
    assert re.search(within, heavy.stdout), heavy.output
    import json

    margins = json.loads(_invoke(["gate", "st-heavy", "--format", "json", "--warehouse", gate_url]).stdout)["margins"]
    assert margins["bounded_open"] == 1 and margins["gate_factor"] == 1.4
    assert 1.2 < margins["largest_bounded_factor"] <= 1.4 and margins["largest_bounded_excess_share"] > 0.01


@pytest.mark.parametrize("wait", ["10x", "-5m", "m", "1h-5m", ""])
def test_gate_refuses_a_malformed_or_negative_duration(gate_url, wait):
    result = _invoke(["gate", "st-pass", "--wait", wait, "--warehouse", gate_url])
    assert result.exit_code == 2 and "Invalid value for '--wait'" in result.stderr, result.output
    assert "is not a duration such as 90s, 10m, 1h or 1h30m" in result.stderr
    if wait.startswith("-"):
        assert "a deadline in the past" in result.stderr


def test_a_target_never_scraped_is_said_while_waiting(gate_url):
    result = _invoke(["gate", "st-ghost", "--wait", "1s", "--poll", "0.2s", "--warehouse", gate_url])
    assert result.exit_code == 4
    assert re.search(r"^deploy st-ghost: pending: .*; \ds left to wait$", result.stderr, re.MULTILINE), result.stderr
    assert "target ghost has no snapshots at all: nothing scrapes it" in result.stderr
    assert "after it was due: is the Dagster daemon running (deploy_event_sensor)?" in result.stderr


def test_warehouse_down_is_exit_5_in_one_line_without_the_password(pg18):
    url = f"postgresql://radar:Hid%2Fden9@127.0.0.1:{free_port()}/radar"
    at_once = _invoke(["gate", "st-pass", "--warehouse", url])
    assert at_once.exit_code == 5 and at_once.stdout == ""
    assert at_once.stderr.startswith("Error: the warehouse did not answer: OperationalError: ")
    assert len(at_once.stderr.strip().splitlines()) == 1 and "Hid" not in at_once.output
    started = time.monotonic()
    retried = _invoke(["gate", "st-pass", "--wait", "2s", "--poll", "0.3s", "--warehouse", url])
    assert retried.exit_code == 5 and time.monotonic() - started >= 2
    assert "retrying (" in retried.stderr and "Hid" not in retried.output
    assert _invoke(["gate", "st-pass", "--warehouse", "mysql://x@h/db"]).exit_code == 5
    no_schema = _invoke(["gate", "st-pass", "--wait", "1h", "--warehouse", pg18.pg.url(driver="postgresql+psycopg")])
    assert no_schema.exit_code == 5 and "radar.deploy_event" in no_schema.stderr  # not retried for an hour


class _Switch:
    """A loopback TCP proxy to the warehouse that can be switched off (every connection cut, new ones refused) and
    on again at the same port: a warehouse restarted, or a network gone for a while."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port, self.port = upstream_port, free_port()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self.on()

    def on(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._serve, args=(self._listener,), daemon=True).start()

    def off(self) -> None:
        with self._lock:
            sockets, self._sockets = [self._listener, *self._sockets], []
        close_all(sockets)

    def _serve(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=60)
            with self._lock:
                self._sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=pipe, args=(source, sink), daemon=True).start()


class _Gate:
    """`radar gate` running as a CI job runs it, its stderr lines collected as they come."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [RADAR, "gate", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or TIMES)},
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.put(line)

    def wait_for(self, text: str) -> None:
        """Until a stderr line holds `text` (the test fails after DEADLINE_S)."""
        deadline = time.monotonic() + DEADLINE_S
        while not any(text in line for line in self.seen):
            assert time.monotonic() < deadline, f"no {text!r} on stderr: {self.seen}"
            try:
                self.seen.append(self.lines.get(timeout=1))
            except queue.Empty:
                assert self.proc.poll() is None, f"the gate ended early: {self.seen}"

    def finish(self) -> tuple[int, str]:
        out, _ = self.proc.communicate(timeout=DEADLINE_S)
        return self.proc.returncode, out

    def all_lines(self) -> list[str]:
        """Every stderr line so far (after finish: every one)."""
        while True:
            try:
                self.seen.append(self.lines.get_nowait())
            except queue.Empty:
                return self.seen


def test_the_gate_waits_for_an_analysis_made_while_it_waits(gate_url):
    gate = _Gate(["st-late", "--wait", "10m", "--poll", "0.2s", "--warehouse", gate_url])
    try:
        gate.wait_for("st-late: pending: ")
        engine = make_engine(gate_url)
        analysed: list[object] = []
        analysing = threading.Thread(
            target=lambda: analysed.append(analyse_deploy(AnalysisRun(engine, SETTINGS), "st-late"))
        )
        analysing.start()
        analysing.join(DEADLINE_S)
        engine.dispose()
        code, out = gate.finish()
    finally:
        gate.proc.kill()
    assert analysed and code == 0 and out.startswith("deploy st-late: pass ("), (out, gate.seen)


def test_the_gate_rides_out_a_warehouse_that_goes_away(gate_url, pg18):
    switch = _Switch(pg18.pg.port)
    through = sa.make_url(gate_url).set(password="Hid9", port=switch.port).render_as_string(hide_password=False)
    gate = _Gate(["st-away", "--wait", "10m", "--poll", "0.2s", "--warehouse", through])
    try:
        gate.wait_for("st-away: pending: ")
        switch.off()
        gate.wait_for("the warehouse did not answer")
        engine = make_engine(gate_url)
        analyse_deploy(AnalysisRun(engine, SETTINGS), "st-away")  # decided while the gate cannot see the warehouse
        engine.dispose()
        switch.on()
        code, out = gate.finish()
    finally:
        gate.proc.kill()
        switch.off()
    assert code == 0 and out.startswith("deploy st-away: pass ("), (out, gate.seen)
    assert not any("Hid9" in line for line in gate.seen) and "Hid9" not in out


def test_radar_deploy_says_when_the_verdict_is_due(gate_url):
    with make_engine(gate_url).connect() as conn:
        known_before = conn.execute(sa.text("SELECT count(*) FROM radar.deploy_event")).scalar_one()
    elsewhere = {"RADAR_WINDOW_SECONDS": "2520", "RADAR_SCRAPE_INTERVAL_SECONDS": "60"}
    for deploy_id, env in (("due-1", TIMES), ("due-2", {"RADAR_SCRAPE_INTERVAL_SECONDS": "10"}), ("due-3", elsewhere)):
        # due-2: the window is not in this environment; the one the target's last analysis used is (200 s). due-3: this
        # environment says other times than the target's; the target's, as stored, are the ones its verdict is due by
        # (its latest analysis's window, 200 s; its scrapes, 10 s apart).
        result = CliRunner().invoke(
            main, ["deploy", "--target", "st-pass", "--id", deploy_id, "--warehouse", gate_url], env=env
        )
        assert result.exit_code == 0, result.output
        with make_engine(gate_url).connect() as conn:
            at = conn.execute(
                sa.text("SELECT deployed_at FROM radar.deploy_event WHERE deploy_id = :d"), {"d": deploy_id}
            ).scalar_one()
        due = (at + timedelta(seconds=210)).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        assert result.stdout.splitlines()[1] == f"verdict due at {due}; `radar gate {deploy_id} --wait 9m`"
    with make_engine(gate_url).begin() as conn:
        conn.execute(sa.text("DELETE FROM radar.deploy_event WHERE deploy_id LIKE 'due-%'"))
        assert conn.execute(sa.text("SELECT count(*) FROM radar.deploy_event")).scalar_one() == known_before


def test_a_first_deploy_is_due_by_the_times_the_sensor_waits_by(warehouse_url):
    """A target's first deploy (scraped, never analysed), told from an environment without the times: its verdict is
    due by the window and settle deploy_event_sensor records as it evaluates (420 s and 60 s: 8 minutes), not by the
    default 30-minute window the CLI's own environment gives (which said 31 minutes before the sensor recorded)."""
    import dagster as dg

    from radar_pipeline.defs.deploys.deploy_verdicts import deploy_event_sensor
    from radar_pipeline.defs.resources import AnalysisResource, WarehouseResource

    engine = make_engine(warehouse_url)
    at = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=30)
    store_counters(engine, "st-first", _counters(at, PLANS["st-pass"], np.random.default_rng(7)), TEXTS)
    bare = {"RADAR_WINDOW_SECONDS": None, "RADAR_SCRAPE_INTERVAL_SECONDS": None}

    def told(deploy_id: str) -> tuple[str, datetime]:
        result = CliRunner().invoke(
            main, ["deploy", "--target", "st-first", "--id", deploy_id, "--warehouse", warehouse_url], env=bare
        )
        assert result.exit_code == 0, result.output
        with engine.connect() as conn:
            deployed = conn.execute(
                sa.text("SELECT deployed_at FROM radar.deploy_event WHERE deploy_id = :d"), {"d": deploy_id}
            ).scalar_one()
        return result.stdout.splitlines()[1], deployed

    line, deployed = told("first-0")  # no sensor has run on this warehouse: this environment's defaults
    said = datetime.strptime(line.split("verdict due at ")[1].split(";")[0], "%Y-%m-%d %H:%M:%S UTC")
    assert 1800 <= (said.replace(tzinfo=UTC) - deployed).total_seconds() <= 1800 + 60, line
    resources = {
        "warehouse": WarehouseResource(url=warehouse_url),
        "analysis": AnalysisResource(window_seconds=420, scrape_interval_seconds=60),
    }
    with dg.instance_for_test() as instance:
        deploy_event_sensor(dg.build_sensor_context(instance=instance, resources=resources))
    line, deployed = told("first-1")
    due = (deployed + timedelta(seconds=480)).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    assert line == f"verdict due at {due}; `radar gate first-1 --wait 13m`"
    engine.dispose()


def _rows(printed: str, key: int) -> dict[str, list[str]]:
    """A rich table's body rows (not its header), each a list of its cells, by the cell in column `key`."""
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in printed.splitlines() if line.startswith("│")]
    return {row[key]: row for row in rows}


def test_radar_deploys_lists_states_and_counts(gate_url):
    table = _invoke(["deploys", "--warehouse", gate_url])  # not a terminal: every column, however many
    assert table.exit_code == 0, table.output
    rows = _rows(table.stdout, key=1)
    assert rows["st-fail"][3:8] == ["fail", "1", "1", "1", "0"]
    assert rows["st-pass"][3] == "pass" and rows["st-unsure"][3] == "inconclusive"
    assert rows["st-open"][3] == "pending" and rows["st-open"][4:8] == ["", "", "", ""]
    assert rows["st-fail"][-2:] == ["shop", "v2"]
    assert list(rows)[0] == "st-open"  # newest first

    import json

    only = json.loads(_invoke(["deploys", "--target", "st-fail", "--format", "json", "--warehouse", gate_url]).stdout)
    assert [(d["deploy_id"], d["state"], d["detected"]) for d in only] == [("st-fail", "fail", 1)]
    assert len(_rows(_invoke(["deploys", "--limit", "2", "--warehouse", gate_url]).stdout, key=1)) == 2
    assert _invoke(["deploys", "--target", "nowhere", "--warehouse", gate_url]).stdout == (
        "no deploys recorded for target 'nowhere'\n"
    )


def test_radar_status_says_what_each_target_shows(gate_url, pg18):
    database = pg18.new_database("seen")
    try:
        pg18.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements", database)
        pg18.execute("DO $$ BEGIN CREATE ROLE gate_blind LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$")
        configured = " ".join(
            [
                f"st-pass={pg18.pg.url(database)}",
                f"blind={pg18.pg.url(database, user='gate_blind')}",
                f"gone=postgresql://radar:Hid9@127.0.0.1:{free_port()}/x",
            ]
        )
        result = _invoke(["status", "--warehouse", gate_url], {"RADAR_TARGETS": configured})
    finally:
        pg18.drop_database(database)
    assert result.exit_code == 0, result.output
    rows = _rows(result.stdout.split("\nrealised false alerts")[0], key=0)  # the targets' table, not the rates'
    assert set(rows) == {"st-pass", "st-fail", "st-unsure", "st-heavy", "blind", "gone"}
    # st-pass: last scraped an hour ago (the fixture's counters), so late; asked now, it shows every statement.
    late = r"late: no scrape for (5\dm\d\ds|1h\d\dm), one expected every 10s \(are the snapshot runs scheduled\?"
    assert re.match(late, rows["st-pass"][4]), rows["st-pass"]
    assert rows["st-pass"][3] == "3" and "shows every statement (pg_stat_statements 1." in rows["st-pass"][5]
    assert rows["st-fail"][5] == "not in RADAR_TARGETS here: not asked"
    assert rows["blind"][1] == "never" and rows["blind"][4].startswith("never scraped")
    assert "role 'gate_blind' lacks pg_read_all_stats" in rows["blind"][5]
    assert "cannot connect" in rows["gone"][5] and "Hid9" not in result.output


def test_a_table_printed_to_a_pipe_is_whole(gate_url):
    piped = _radar(["verdicts", "st-fail", "--warehouse", gate_url])  # no COLUMNS: not a terminal, so not 80 wide
    assert piped.returncode == 0, piped.stderr
    assert LONG_TEXT in piped.stdout and "…" not in piped.stdout
    header = next(line for line in piped.stdout.splitlines() if "verdict" in line and "query" in line)
    for column in ("reason", "cause", "before ms", "history", "bound", "confidence", "change"):
        assert f" {column} " in header, header
    asked = _invoke(["verdicts", "st-fail", "--warehouse", gate_url], {"COLUMNS": "100"})  # a width asked for is kept
    assert max(len(line) for line in asked.stdout.splitlines()) <= 100 and "…" in asked.stdout


# A statement's text with what must not reach a terminal: an escape sequence and a right-to-left override.
HOSTILE_TEXT = "SELECT report(\x1b[31m$1\u202e) /* <!channel> */"


@pytest.fixture(scope="module")
def tiered(gate_url) -> str:
    """st-tiers: a deploy on st-pass's target at st-pass's time, analysed, then its rows marked as an engine with tiers
    would mark them: statements 1 and 2 improved, 3 (the sparse one, under 1% of the time) probably slower, whose
    text is made hostile (no other test shows it)."""
    engine = make_engine(gate_url)
    with engine.begin() as conn:
        at = conn.execute(
            sa.text("SELECT deployed_at FROM radar.deploy_event WHERE deploy_id = 'st-pass'")
        ).scalar_one()
        conn.execute(
            sa.text("UPDATE radar.query SET query = :q WHERE target = 'st-pass' AND queryid = 3"), {"q": HOSTILE_TEXT}
        )
    deploys.record(engine, deploys.DeployEvent("st-tiers", "st-pass", at))
    analyse_deploy(AnalysisRun(engine, SETTINGS), "st-tiers")
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE radar.verdict SET tier = CASE WHEN queryid = 3 THEN 'probably_slower' ELSE 'improved' END, "
                "factor_low = CASE WHEN queryid = 3 THEN 1.72 ELSE factor_low END, "
                "factor_high = CASE WHEN queryid = 3 THEN 6.52 ELSE factor_high END WHERE deploy_id = 'st-tiers'"
            )
        )
    engine.dispose()
    return "st-tiers"


def test_the_gate_warns_of_probably_slower_statements_and_says_what_got_faster(gate_url, tiered):
    result = _radar(["gate", tiered, "--warehouse", gate_url])
    assert result.returncode == 0, result.stderr  # a warning: the exit code stays the state's
    lines = result.stdout.splitlines()
    assert lines[0].startswith("deploy st-tiers: pass (open statements may add 0.") and "% cleared)" in lines[0]
    [warning] = [line for line in lines if line.startswith("WARNING:")]
    assert re.fullmatch(
        # engine 2.7.2 gives an open statement whose means rose beyond θ its cause: none in this one's counters
        r"WARNING: probably slower ×\d+\.\d\d \[×1\.72, ×6\.52\], 0\.\d% of the time after the deploy, queryid 3, "
        r"cause: unexplained: "
        r"SELECT report\(\S*\$1\S*\) /\* <!channel> \*/",
        warning,
    ), warning
    assert "\x1b" not in result.stdout and "\u202e" not in result.stdout
    faster = lines.index(next(line for line in lines if "statements faster:" in line))
    assert re.fullmatch(r"2 statements faster: ×\d\.\d\d, ×\d\.\d\d", lines[faster]), lines[faster]
    assert re.match(
        r"  ×\d\.\d\d \[×\d\.\d\d, ×\d\.\d\d\], \d+\.\d% of the time after the deploy, queryid 1: ", lines[faster + 1]
    )

    import json

    answer = json.loads(_invoke(["gate", tiered, "--format", "json", "--warehouse", gate_url]).stdout)
    assert answer["exit_code"] == 0 and answer["state"] == "pass"
    assert [r["queryid"] for r in answer["improved"]] == [1, 2]  # the busiest first
    [slower] = answer["probably_slower"]
    assert slower["queryid"] == 3 and slower["factor_low"] == 1.72 and 0 < slower["share"] < 0.01
    assert slower["query"] == " ".join(HOSTILE_TEXT.split())  # raw in JSON (ASCII-escaped there)
    assert answer["tier_counts"] == {"improved": 2, "probably_slower": 1, "groups_probably_slower": 0}
    margins = answer["margins"]
    assert margins["max_open_excess"] == 0.01 and 0 <= margins["largest_excess_share"] < 0.01
    assert margins["max_total_excess"] == 0.03 and 0 <= margins["open_excess_share"] < 0.03
    assert margins["cleared_share"] > 0.99 and 0 < margins["largest_open_share"] < 0.01

    table = _radar(["verdicts", tiered, "--warehouse", gate_url])
    header = next(line for line in table.stdout.splitlines() if " verdict " in line and " query" in line)
    assert " tier " in header
    assert "statements 2 improved, 1 probably slower" in table.stdout
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in table.stdout.splitlines() if line.startswith("│")]
    tier = [c.strip() for c in header.split("┃")[1:-1]].index("tier")
    assert sorted(row[tier] for row in cells if row[tier]) == ["improved", "improved", "probably slower"], cells
    csv = _invoke(["verdicts", tiered, "--format", "csv", "--warehouse", gate_url]).stdout
    assert "tier" in csv.splitlines()[0].split(",") and csv.count("improved") == 2


def _transactions(url: str) -> int:
    """The warehouse database's transactions so far (committed and rolled back): each of the gate's polls adds some."""
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT pg_stat_clear_snapshot()"))
            return conn.execute(
                sa.text("SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()")
            ).scalar_one()
    finally:
        engine.dispose()


def _polls_pass(url: str, gate: _Gate, transactions: int = 40) -> None:
    """Until the gate has polled many times more (the warehouse counts its transactions), the gate still waiting."""
    start, deadline = _transactions(url), time.monotonic() + DEADLINE_S
    while _transactions(url) < start + transactions:
        assert time.monotonic() < deadline and gate.proc.poll() is None, gate.all_lines()
        time.sleep(0.2)  # between looks at the counter; what is waited for is the count


def _copy_analysis(conn: sa.Connection, source: str, deploy_id: str, columns: dict[str, str] | None = None) -> None:
    """Store deploy `source`'s analysis and verdicts as deploy_id's (`columns`: SQL for some columns instead)."""
    for table in ("analysis", "verdict"):
        names = list(
            conn.execute(
                sa.text(
                    "SELECT column_name FROM information_schema.columns WHERE table_schema = 'radar' "
                    "AND table_name = :t AND is_generated = 'NEVER' AND column_name <> 'deploy_id' "
                    "ORDER BY ordinal_position"
                ),
                {"t": table},
            ).scalars()
        )
        values = ", ".join((columns or {}).get(name, name) for name in names)
        conn.execute(
            sa.text(
                f"INSERT INTO radar.{table} (deploy_id, {', '.join(names)}) SELECT :d, {values} "
                f"FROM radar.{table} WHERE deploy_id = :s"
            ),
            {"d": deploy_id, "s": source},
        )


def test_through_looks_the_gate_waits_for_a_later_look_that_may_decide_it(gate_url):
    """An inconclusive deploy (st-unsure's verdicts, deployed 250 s ago with a 200 s window: look 1 falls due 2W plus
    a scrape after it): without --through-looks the gate answers 3 at once and says when look 1 falls due; with it,
    while that is before the deadline, it waits, saying so once, and answers with the state look 1 leaves."""
    from radar_pipeline.steps.looks import look_span
    from radar_pipeline.warehouse import looks

    engine = make_engine(gate_url)
    with engine.begin() as conn:
        target = conn.execute(sa.text("SELECT target FROM radar.deploy_event WHERE deploy_id = 'st-unsure'")).scalar()
    deploys.record(engine, deploys.DeployEvent("st-looks", target, datetime.now(UTC) - timedelta(seconds=250)))
    try:
        with engine.begin() as conn:
            _copy_analysis(conn, "st-unsure", "st-looks", {"analysed_at": "now()"})
            at, basis = conn.execute(
                sa.text(
                    "SELECT d.deployed_at, a.analysed_at FROM radar.deploy_event d JOIN radar.analysis a "
                    "USING (deploy_id) WHERE deploy_id = 'st-looks'"
                )
            ).one()
        due = (at + timedelta(seconds=2 * 200 + 10)).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        now = _radar(["gate", "st-looks", "--warehouse", gate_url])
        assert now.returncode == 3 and now.stdout.startswith("deploy st-looks: inconclusive ("), now
        assert f"look 1 falls due at {due}: `radar gate st-looks --wait " in now.stderr, now.stderr
        assert "--through-looks` waits for it" in now.stderr
        short = _radar(["gate", "st-looks", "--wait", "1m", "--through-looks", "--warehouse", gate_url])
        assert short.returncode == 3 and "left to wait" not in short.stderr, short  # due after the deadline

        gate = _Gate(["st-looks", "--wait", "10m", "--poll", "0.1s", "--through-looks", "--warehouse", gate_url])
        try:
            gate.wait_for("st-looks: inconclusive after its first verdict; look 1 falls due in ")
            _polls_pass(gate_url, gate)  # many polls, nothing new: no line
            # Look 1 runs: it clears what was open (its rows as steps.looks stores them, with its deploy_look row).
            with engine.begin() as conn:
                conn.execute(
                    sa.text(
                        "UPDATE radar.verdict SET verdict = 'no_regression', reason = 'below_threshold', look = 1, "
                        "factor_bound = 1.05, look_end = :end WHERE deploy_id = 'st-looks' "
                        "AND verdict IN ('inconclusive', 'insufficient_data')"
                    ),
                    {"end": at + timedelta(seconds=400)},
                )
                span = look_span(SETTINGS, 1, at)
                written = pd.read_sql(
                    sa.text("SELECT verdict FROM radar.verdict WHERE deploy_id = 'st-looks' AND look = 1"), conn
                )
                looks.record_look(conn, "st-looks", target, 1, "done", span, basis, len(written), written, None)
            code, out = gate.finish()
        finally:
            gate.proc.kill()
    finally:
        with engine.begin() as conn:
            for table in ("deploy_look", "verdict", "analysis", "deploy_event"):
                conn.execute(sa.text(f"DELETE FROM radar.{table} WHERE deploy_id = 'st-looks'"))
        engine.dispose()
    assert code == 0 and out.startswith("deploy st-looks: pass ("), (out, gate.all_lines())
    waiting = [line for line in gate.all_lines() if "st-looks: inconclusive after" in line]
    assert len(waiting) == 1 and f"(at {due})" in waiting[0], waiting


def test_the_gate_waiting_says_the_target_s_times_once_per_change(gate_url):
    # The environment says other times than the target's (a CI job with the default window): the progress line says
    # the target's, as the warehouse stores them (its latest analysis's 200 s window, its scrapes 10 s apart).
    engine = make_engine(gate_url)
    deploys.record(engine, deploys.DeployEvent("st-steps", "st-pass", datetime.now(UTC) - timedelta(seconds=5)))
    with engine.connect() as conn:
        at = conn.execute(
            sa.text("SELECT deployed_at FROM radar.deploy_event WHERE deploy_id = 'st-steps'")
        ).scalar_one()
    elsewhere = {"RADAR_WINDOW_SECONDS": "2520", "RADAR_SCRAPE_INTERVAL_SECONDS": "60"}
    gate = _Gate(["st-steps", "--wait", "10m", "--poll", "0.1s", "--warehouse", gate_url], env=elsewhere)
    try:
        gate.wait_for("st-steps: pending: the window after the deploy closes in")

        def clock(seconds: int) -> str:
            return (at + timedelta(seconds=seconds)).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")

        [first] = [line for line in gate.all_lines() if "st-steps: pending" in line]
        assert f"(at {clock(200)}), its verdict is due at {clock(210)}" in first, first
        _polls_pass(gate_url, gate)  # many polls, nothing new: no line
        # The window closes (its deploy moved back in time: the rows say so, not a clock).
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "UPDATE radar.deploy_event SET deployed_at = now() - interval '205 seconds', "
                    "received_at = now() - interval '205 seconds' WHERE deploy_id = 'st-steps'"
                )
            )
        gate.wait_for("st-steps: pending: the window closed; waiting for the analysis")
        _polls_pass(gate_url, gate)
        # Its analysis starts (a run holds the deploy's mark, as deploy_verdicts does), then is stored: st-pass's
        # verdicts, written for it.
        with deploys.analysing(engine, "st-steps"):
            gate.wait_for("st-steps: pending: the window closed; the analysis is running")
            _polls_pass(gate_url, gate)
            with engine.begin() as conn:
                _copy_analysis(conn, "st-pass", "st-steps")
            code, out = gate.finish()
        with engine.connect() as conn:
            assert not deploys.analysis_running(conn, "st-steps")  # the mark goes with the run
    finally:
        gate.proc.kill()
        with engine.begin() as conn:  # the module's other deploys stay the newest
            for table in ("verdict", "analysis", "deploy_event"):
                conn.execute(sa.text(f"DELETE FROM radar.{table} WHERE deploy_id = 'st-steps'"))
        engine.dispose()
    assert code == 0 and out.startswith("deploy st-steps: pass ("), (out, gate.all_lines())
    progress = [line for line in gate.all_lines() if "st-steps: pending" in line]
    assert len(progress) == 3, progress  # one per change, not one per poll
    assert "the window closed; waiting for the analysis" in progress[1]
    assert "the window closed; the analysis is running" in progress[2]
