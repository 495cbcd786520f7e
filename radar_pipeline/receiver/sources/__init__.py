"""The receiver's sources: one module per tool that posts deploy events (each with NAME, authenticate and parse;
see base.py), registered here, in the one place the receiver looks them up."""

from __future__ import annotations

from types import ModuleType

from radar_pipeline.receiver.sources import argocd, flux, generic, github, gitlab, rollouts

SOURCES: dict[str, ModuleType] = {
    module.NAME: module
    for module in (
        generic,
        github,
        gitlab,
        argocd,
        flux,
        rollouts,
    )
}
# Each source's deploy id prefixes, with their source: an id that starts as one does is only that source's.
ID_PREFIXES: dict[str, str] = {prefix: name for name, module in SOURCES.items() for prefix in module.ID_PREFIXES}
