"""Dagster resources: the warehouse and the watched targets, configured from the environment through EnvVar."""

import os
from functools import lru_cache

import dagster as dg
import sqlalchemy as sa

from radar_pipeline.config import COLLECTOR_ROLE_VAR, TARGETS_VAR, WAREHOUSE_URL_VAR, Target, parse_targets
from radar_pipeline.warehouse.database import make_engine


class WarehouseResource(dg.ConfigurableResource):
    """The warehouse PostgreSQL (schema radar), from RADAR_WAREHOUSE_URL."""

    url: str

    def engine(self) -> sa.Engine:
        """A pooled engine, shared by every use in this process."""
        return _engine_for(self.url)


class TargetsResource(dg.ConfigurableResource):
    """The watched servers, from RADAR_TARGETS (whitespace-separated name=postgresql://... pairs)."""

    spec: str
    collector_role: str = ""

    def targets(self) -> list[Target]:
        """The parsed targets; a malformed value raises ConfigError naming RADAR_TARGETS."""
        return parse_targets(self.spec, TARGETS_VAR)

    def exclude_role(self) -> str | None:
        """The collector's dedicated role, whose statements are left out (RADAR_COLLECTOR_ROLE), if any."""
        return self.collector_role or os.environ.get(COLLECTOR_ROLE_VAR) or None


@lru_cache(maxsize=8)
def _engine_for(url: str) -> sa.Engine:
    return make_engine(url)


def default_resources() -> dict[str, dg.ConfigurableResource]:
    """The resources as a deployment configures them: secrets come from the environment at run time; analysis
    times from RADAR_WINDOW_SECONDS, RADAR_SCRAPE_INTERVAL_SECONDS and RADAR_TOLERANCE_FLOOR_SECONDS when set."""
    from radar_pipeline.defs.deploys import AnalysisResource

    times = {
        field: float(os.environ[var])
        for field, var in (
            ("window_seconds", "RADAR_WINDOW_SECONDS"),
            ("scrape_interval_seconds", "RADAR_SCRAPE_INTERVAL_SECONDS"),
            ("tolerance_floor_seconds", "RADAR_TOLERANCE_FLOOR_SECONDS"),
        )
        if os.environ.get(var)
    }
    return {
        "warehouse": WarehouseResource(url=dg.EnvVar(WAREHOUSE_URL_VAR)),
        "targets": TargetsResource(spec=dg.EnvVar(TARGETS_VAR)),
        "analysis": AnalysisResource(**times),
    }
