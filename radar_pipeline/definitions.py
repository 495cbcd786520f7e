"""The Dagster code location `radar`: every module under radar_pipeline/defs/, found by Dagster's defs-folder loader
(the dg project layout: pyproject.toml's [tool.dg]; `dg check defs` checks it)."""

from __future__ import annotations

import warnings
from pathlib import Path

import dagster as dg

PACKAGE = Path(__file__).resolve().parent
# Known and chosen, silenced here, where the location is loaded (every process that loads it: the daemon, each run,
# radar dev): deploy_verdicts' `backfill_policy` is beta, and deploy_verdicts_job mixes backfill policies (the job
# takes one deploy a run, as the sensor's runs do; backfills are launched on the asset); and binding the resources of an
# op job a sensor targets (deploy_marks_job), Dagster copies the sensor passing its (empty) `owners`, a beta parameter.
KNOWN_WARNINGS = [
    (r"Parameter `backfill_policy` of function `asset` is currently", dg.BetaWarning),
    (r"Parameter `owners` of initializer `SensorDefinition.__init__` is currently", dg.BetaWarning),
    (r"Asset job deploy_verdicts_job materializes assets with varying", UserWarning),
]


@dg.definitions
def defs() -> dg.Definitions:
    """Every asset, check, job, schedule, sensor and resource of defs/, each module's own; the environment is checked
    first."""
    from radar_pipeline.config.settings import settings

    settings()  # every RADAR_* setting checked: a bad value stops the load here, the variable named
    for message, category in KNOWN_WARNINGS:
        warnings.filterwarnings("ignore", message, category)
    if _dg_project(PACKAGE.parent / "pyproject.toml"):  # a checkout (or an editable install): the dg project
        return dg.load_from_defs_folder(path_within_project=PACKAGE)
    # A regular install (the image) has no pyproject.toml of ours beside the package: the same loader, rooted at the
    # package.
    import radar_pipeline.defs

    return dg.ComponentTree.from_module(radar_pipeline.defs, PACKAGE).build_defs()


def _dg_project(pyproject: Path) -> bool:
    # Ours, not any pyproject.toml that happens to lie beside an installed package (some wheels ship one).
    return pyproject.is_file() and 'root_module = "radar_pipeline"' in pyproject.read_text()
