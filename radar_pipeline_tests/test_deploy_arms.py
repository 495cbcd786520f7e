"""A deploy's release and canary role (issue 29's seam): checked before anything is stored, recorded by
`radar deploy --release --canary-role`, and part of what makes a repeated event the same or a conflict."""

from __future__ import annotations

import subprocess

import pytest
import sqlalchemy as sa

from radar_pipeline.warehouse import deploys
from radar_pipeline.warehouse.deploys import DeployConflict, DeployError, DeployEvent

from .test_deploys import _radar


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"release_id": ""}, "release '' is not usable"),
        ({"release_id": "r 1"}, "release 'r 1' is not usable"),
        ({"release_id": "r-1\n"}, "is not usable"),
        ({"release_id": "x" * 129}, "is not usable"),
        # the prefix of inferred releases (warehouse.releases): a recorded id like it would name another release
        ({"release_id": "inferred:d-1"}, "release 'inferred:d-1' is not usable: 'inferred:' names inferred releases"),
        ({"canary_role": ""}, "canary role '' is not a PostgreSQL role name"),
        ({"canary_role": "é" * 32}, "is not a PostgreSQL role name"),  # 64 bytes
        ({"canary_role": "app\x1b[2J"}, "is not a PostgreSQL role name"),
    ],
)
def test_a_malformed_release_or_canary_role_is_refused_naming_it(kwargs, message):
    with pytest.raises(DeployError, match=message):
        DeployEvent(**{"deploy_id": "ok-1", "target": "main", **kwargs})


def test_release_and_canary_role_are_stored_and_a_different_one_is_a_conflict(known):
    event = DeployEvent("d-1", "main", release_id="2026.12.06-1", canary_role="app_canary")
    stored = deploys.record(known, event).event
    assert (stored.release_id, stored.canary_role) == ("2026.12.06-1", "app_canary")
    assert not deploys.record(known, event).inserted
    with pytest.raises(DeployConflict, match="release_id: stored '2026.12.06-1', given 'other'"):
        deploys.record(known, DeployEvent("d-1", "main", release_id="other", canary_role="app_canary"))
    with known.connect() as conn:
        assert conn.execute(sa.text("SELECT release_id FROM radar.deploy_event")).scalars().all() == ["2026.12.06-1"]


def test_radar_deploy_records_release_and_canary_role(known, warehouse_url):
    def radar(*args: str) -> subprocess.CompletedProcess[str]:
        return _radar(list(args), {"RADAR_WAREHOUSE_URL": warehouse_url})

    ok = radar("deploy", "--target", "main", "--id", "c-1", "--release", "rel-7", "--canary-role", "app_canary")
    assert ok.returncode == 0, ok.stderr
    bad = radar("deploy", "--target", "main", "--id", "c-2", "--canary-role", "x\x07")
    assert bad.returncode != 0 and "is not a PostgreSQL role name" in bad.stderr
    with known.connect() as conn:
        rows = conn.execute(sa.text("SELECT deploy_id, release_id, canary_role FROM radar.deploy_event")).all()
    assert [tuple(r) for r in rows] == [("c-1", "rel-7", "app_canary")]
