"""The locked install: requirements.lock (written by `make lock`) holds every pin of pyproject.toml, pins every
package to one version, and the environment the tests run in holds those versions."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.markers import Marker
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements.lock"


def locked() -> dict[str, str]:
    """name → version of every lock line whose environment marker holds here (comments dropped)."""
    found: dict[str, str] = {}
    for line in LOCK.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)==([^\s;]+)\s*(?:;\s*(.+))?", line)
        assert match, f"requirements.lock: not one pinned version: {line!r}"
        name, version, marker = match.groups()
        if marker is None or Marker(marker).evaluate():
            assert canonicalize_name(name) not in found, f"requirements.lock: {name} twice for this platform"
            found[canonicalize_name(name)] = version
    return found


def test_the_lock_holds_every_pin_of_pyproject() -> None:
    # A pin changed in pyproject.toml without `make lock` would install its new version beside an old set of the
    # packages it needs.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = {}
    for requirement in [*project["dependencies"], *sum(project["optional-dependencies"].values(), [])]:
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==(\S+)", requirement)
        assert match, f"pyproject.toml: {requirement!r} is not pinned"
        pins[canonicalize_name(match.group(1))] = match.group(2)
    lock = locked()
    stale = {name: (version, lock.get(name)) for name, version in pins.items() if lock.get(name) != version}
    assert not stale, f"run `make lock`: pyproject.toml's pin vs the lock's: {stale}"


def test_the_environment_holds_the_locked_versions() -> None:
    # What `make install` installed: every locked package present here is at its locked version.
    lock = locked()
    differ = {}
    for dist in metadata.distributions():
        name = canonicalize_name(dist.metadata["Name"])
        if name in lock and dist.version != lock[name]:
            differ[name] = (dist.version, lock[name])
    assert not differ, f"installed vs locked: {differ}"
    assert "dagster" in lock and metadata.version("dagster") == lock["dagster"]
