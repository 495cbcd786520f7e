"""The layers' import rule, checked on the source: imports run one way, defs → steps → collector, warehouse, engine,
alerts; the engine imports nothing of ours and nothing that does I/O; only defs/ (and what assembles or drives it)
knows Dagster; the lab (the simulators tests and benchmarks draw from) may use the engine, and no layer uses the lab."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "radar_pipeline"
SHARED = {"pgss_model", "plan_shape", "config", "binary_copy"}  # small modules every layer may use
# What each room may import of ours (besides itself and SHARED), and whether it may import Dagster.
ALLOWED: dict[str, tuple[set[str], bool]] = {
    "engine": (set(), False),
    "collector": ({"engine"}, False),
    "warehouse": ({"engine"}, False),
    "alerts": ({"engine"}, False),
    "steps": ({"collector", "warehouse", "engine", "alerts"}, False),
    "defs": ({"steps", "collector", "warehouse", "engine", "alerts"}, True),
    "lab": ({"engine"}, False),
}
IO_LIBRARIES = {"sqlalchemy", "psycopg", "psycopg2", "dagster", "slack_sdk", "urllib", "http", "socket", "subprocess"}


def _imports(path: Path) -> set[str]:
    """The absolute module names a file imports."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _room_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "radar_pipeline" else None


@pytest.mark.parametrize("room", sorted(ALLOWED))
def test_imports_run_one_way(room: str) -> None:
    allowed, dagster_ok = ALLOWED[room]
    wrong = []
    for path in sorted((PACKAGE / room).rglob("*.py")):
        for module in _imports(path):
            used = _room_of(module)
            if used is not None and used not in {room, *SHARED, *allowed} and module != "radar_pipeline":
                wrong.append(f"{path.relative_to(PACKAGE)} imports {module}")
            if not dagster_ok and module.split(".")[0] == "dagster":
                wrong.append(f"{path.relative_to(PACKAGE)} imports Dagster")
    assert not wrong, "\n".join(wrong)


def test_the_engine_does_no_io() -> None:
    wrong = [
        f"{path.relative_to(PACKAGE)} imports {module}"
        for path in sorted((PACKAGE / "engine").rglob("*.py"))
        for module in _imports(path)
        if module.split(".")[0] in IO_LIBRARIES or _room_of(module) not in (None, "engine")
    ]
    assert not wrong, "\n".join(wrong)


def test_shared_modules_import_no_layer() -> None:
    for name in SHARED:
        used = {_room_of(m) for m in _imports(PACKAGE / f"{name}.py")} - {None, *SHARED}
        assert not used, f"{name}.py imports {used}"


def test_only_tests_and_benchmarks_use_the_lab_and_nothing_uses_the_tests() -> None:
    # The lab ships with the package so that benchmarks/ runs on a fresh clone without the test fixtures.
    root = PACKAGE.parent
    wrong = []
    for path in sorted([*PACKAGE.rglob("*.py"), *(root / "benchmarks").rglob("*.py")]):
        for module in _imports(path):
            if module.split(".")[0] == "radar_pipeline_tests":
                wrong.append(f"{path.relative_to(root)} imports {module}")
            if _room_of(module) == "lab" and PACKAGE / "lab" not in path.parents and path.parent.name != "benchmarks":
                wrong.append(f"{path.relative_to(root)} imports {module}")
    assert not wrong, "\n".join(wrong)
