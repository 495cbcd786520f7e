"""One snapshot of pg_stat_statements per target, from the watched server into the warehouse.

This joins the collector (which reads watched servers) and the warehouse (which stores) without either knowing the
other. Targets are scraped concurrently; a failing target is reported by name and never stops the others.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta

import sqlalchemy as sa

from radar_pipeline.collector import catalog, pgss, session, waits
from radar_pipeline.collector.fingerprint import fingerprint
from radar_pipeline.config import Target, target_failure
from radar_pipeline.config.settings import CATALOG_INTERVAL
from radar_pipeline.pgss_model import Key
from radar_pipeline.warehouse import catalog as catalog_store
from radar_pipeline.warehouse import snapshots
from radar_pipeline.warehouse import waits as wait_store

MAX_PARALLEL_TARGETS = 8


@dataclass
class TargetOutcome:
    """A target's snapshot: what it stored, or the error that stopped it, and how long it took."""

    target: str
    seconds: float
    result: snapshots.StoreResult | None = None
    error: str | None = None


TEXT_ROUNDS = 3  # the first finds which texts are wanted, the second usually writes; a third for a writer between


def snapshot_target(
    target: Target,
    warehouse: sa.Engine,
    exclude_role: str | None = None,
    catalog_interval: timedelta = CATALOG_INTERVAL,
) -> snapshots.StoreResult:
    """Scrape one target and write what moved, in one warehouse transaction; the catalog's facts too, when they were
    last read `catalog_interval` ago or before a deploy recorded since.

    Statement texts are read from the watched server outside that transaction: when, under the target's lock, the
    write wants texts not read yet (statements new to the catalogue or back in the view), the transaction is left
    unwritten, those texts are read, and it starts again. A scrape with nothing new (the usual one) reads the catalogue
    once; after TEXT_ROUNDS (other writers of the target coming between) it writes with what it has: a new statement
    without its text waits for the next scrape, as one that left the view before its text was read."""
    with session.connect(target) as conn:
        ext = pgss.read_extension(conn, target)
        scrape = pgss.scrape(conn, target, ext, exclude_role)
        texts: dict[Key, str] = {}
        read: set[Key] = set()
        unread: set[Key] = set()
        for round_ in range(1, TEXT_ROUNDS + 1):
            if unread:
                texts.update(pgss.fetch_texts(conn, target, ext, sorted({k[2] for k in unread})))
                read.update(unread)
            with warehouse.begin() as wconn:
                state = snapshots.lock_and_load_state(wconn, target.name, scrape.statements)
                plan = snapshots.plan_snapshot(state, scrape.statements, scrape.info.stats_reset, scrape.info.dealloc)
                wanted = plan.new_keys + plan.reappeared_keys
                unread = {k for k in wanted if k not in read}
                if unread and round_ < TEXT_ROUNDS:
                    continue  # nothing was written; the lock goes with the transaction
                chosen = {k: texts[k] for k in wanted if k in texts}
                ignored = {
                    k: reason for k in plan.new_keys if k in chosen and (reason := pgss.own_statement_reason(chosen[k]))
                }
                fingerprints = {k: fingerprint(text) for k, text in chosen.items() if k not in ignored}
                result = snapshots.write_snapshot(wconn, scrape.info, state, plan, chosen, fingerprints, ignored)
                break
        try:  # the catalog's facts: their failure is reported, and never fails the scrape stored above
            result.catalog_changes = collect_catalog(conn, target, warehouse, catalog_interval)
        except Exception as exc:
            result.catalog_error = target_failure(exc, target)
        try:  # what its statements wait on: the same, never failing the scrape
            result.wait_rows = collect_waits(conn, target, warehouse)
        except Exception as exc:
            result.wait_error = target_failure(exc, target)
        return result
    raise AssertionError("unreachable: the last round always writes")


def collect_catalog(
    conn: session.BoundedConnection, target: Target, warehouse: sa.Engine, interval: timedelta | None = None
) -> int:
    """Read the target's catalog and settings facts (collector/catalog.py) in the scrape's session, only the kinds
    whose digest changed, and store what changed (warehouse/catalog.py); returns the versions stored. With an
    `interval`, only when the catalog is due (warehouse/catalog.py `due`: at that interval, and after a deploy)."""
    if interval is not None:
        with warehouse.connect() as wconn:
            if not catalog_store.due(wconn, target.name, interval):
                return 0
    digests = catalog.read_digests(conn, target)
    capture = (target.name, digests.captured_at, digests.dbid, digests.digests)
    with warehouse.begin() as wconn:
        kinds = catalog_store.kinds_to_read(wconn, target.name, digests.dbid, digests.digests, digests.server)
        if not kinds:  # the usual capture: nothing changed, only the capture is stored
            return catalog_store.write_capture(wconn, *capture, [], [], server=digests.server)
    facts = catalog.read_facts(conn, target, kinds)  # no warehouse transaction waits on the watched server
    with warehouse.begin() as wconn:
        return catalog_store.write_capture(wconn, *capture, kinds, [vars(f) for f in facts], server=digests.server)


def collect_waits(conn: session.BoundedConnection, target: Target, warehouse: sa.Engine) -> int:
    """Sample what the target's active sessions wait on (collector/waits.py: several instants), in the scrape's
    session, and store them (warehouse/waits.py); returns the rows stored. A server that cannot say which statement
    a session runs stores nothing, not even the capture: no sample there is no evidence of no wait."""
    readings = [(r.captured_at, [vars(s) for s in r.samples]) for r in waits.read_waits(conn, target) if r.sampled]
    with warehouse.begin() as wconn:
        return wait_store.write_waits(wconn, target.name, readings)


def snapshot_targets(
    targets: list[Target],
    warehouse: sa.Engine,
    exclude_role: str | None = None,
    catalog_interval: timedelta = CATALOG_INTERVAL,
) -> list[TargetOutcome]:
    """Snapshot every target concurrently (snapshot_target); each outcome holds a result or a password-free error."""

    def one(target: Target) -> TargetOutcome:
        started = time.perf_counter()
        try:
            result = snapshot_target(target, warehouse, exclude_role, catalog_interval)
            return TargetOutcome(target.name, time.perf_counter() - started, result=result)
        except Exception as exc:  # one failing target must never stop the others
            message = target_failure(exc, target)
            return TargetOutcome(target.name, time.perf_counter() - started, error=message)

    with ThreadPoolExecutor(max_workers=max(1, min(MAX_PARALLEL_TARGETS, len(targets)))) as pool:
        return list(pool.map(one, targets))
