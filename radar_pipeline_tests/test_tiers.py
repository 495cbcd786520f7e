"""The suite's tiers: every collected test has exactly one, and a test's tier agrees with what it uses."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import BY_ID, COLLECTED, PG_FIXTURES, TIERS

HERE = Path(__file__).resolve().parent


def _tiers(item: pytest.Item) -> list[str]:
    return [mark.name for mark in item.iter_markers() if mark.name in TIERS]


def test_every_collected_test_has_exactly_one_tier(request: pytest.FixtureRequest) -> None:
    collected = request.config.stash[COLLECTED]
    assert request.node in collected
    wrong = [f"{item.nodeid}: {_tiers(item)}" for item in collected if len(_tiers(item)) != 1]
    assert not wrong, "\n".join(wrong)


def test_no_unit_test_starts_a_server(request: pytest.FixtureRequest) -> None:
    wrong = [
        f"{item.nodeid} uses {sorted(PG_FIXTURES & set(item.fixturenames))}"  # type: ignore[attr-defined]
        for item in request.config.stash[COLLECTED]
        if _tiers(item) == ["unit"] and PG_FIXTURES & set(getattr(item, "fixturenames", ()))
    ]
    assert not wrong, "\n".join(wrong)


def test_every_test_named_for_a_tier_exists() -> None:
    # A renamed test or file would otherwise fall silently into the tier its fixtures give it.
    missing = []
    for prefixes in BY_ID.values():
        for prefix in prefixes:
            file, _, name = prefix.partition("::")
            path = HERE / file
            if not path.exists() or (name and f"def {name}" not in path.read_text()):
                missing.append(prefix)
    assert not missing, missing
