"""query_history in any order and at once: a deploy older than every stored point (a re-run of a target's first
deploy) and two updates of one target in parallel give the same histories as the serial, in-order updates."""

from __future__ import annotations

import threading

import pandas as pd
import sqlalchemy as sa

from radar_pipeline.engine.history import HistorySettings
from radar_pipeline.steps.history import update_history

from .test_history import SETTINGS, _points, history  # noqa: F401 - the fixture is used by name


def _update(warehouse, deploy_id: str) -> None:
    with warehouse.begin() as conn:
        update_history(conn, deploy_id, HistorySettings(), SETTINGS.min_calls)


def _comparable(points: pd.DataFrame) -> pd.DataFrame:
    return points.drop(columns=["created_at"], errors="ignore").sort_index()


def test_a_deploy_older_than_every_stored_point(history, warehouse):  # noqa: F811
    _update(warehouse, f"h-{8}")  # every deploy in order: the reference
    serial = _comparable(_points(warehouse))
    with warehouse.begin() as conn:  # the first deploy's points go; it is analysed again after all the others
        conn.execute(sa.text("DELETE FROM radar.query_history WHERE deploy_id = 'h-0'"))
    _update(warehouse, "h-0")
    pd.testing.assert_frame_equal(_comparable(_points(warehouse)), serial)


def test_two_updates_of_one_target_at_once_equal_the_serial_result(history, warehouse):  # noqa: F811
    _update(warehouse, "h-8")
    serial = _comparable(_points(warehouse))
    with warehouse.begin() as conn:
        conn.execute(sa.text("DELETE FROM radar.query_history WHERE deploy_id IN ('h-3', 'h-8')"))
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def run(deploy_id: str) -> None:
        try:
            start.wait()
            _update(warehouse, deploy_id)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(d,)) for d in ("h-3", "h-8")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    pd.testing.assert_frame_equal(_comparable(_points(warehouse)), serial)
