"""radar's configuration: the settings (config.settings: RadarSettings, the only reader of the RADAR_* environment),
the watched targets and the warehouse's URL (config.targets), and secrets kept out of text (config.masking).

The settings (and pydantic with them) are imported from config.settings by what needs them: the rest of radar, and
most `radar` commands, import only what is here.
"""

from __future__ import annotations

from radar_pipeline.config.masking import mask_password, printable, scrub_secret, url_password
from radar_pipeline.config.targets import (
    TARGETS_VAR,
    WAREHOUSE_URL_VAR,
    ConfigError,
    Target,
    database_url,
    parse_targets,
    target_failure,
    warehouse_url,
)

__all__ = [
    "TARGETS_VAR",
    "WAREHOUSE_URL_VAR",
    "ConfigError",
    "Target",
    "database_url",
    "mask_password",
    "parse_targets",
    "printable",
    "scrub_secret",
    "target_failure",
    "url_password",
    "warehouse_url",
]
