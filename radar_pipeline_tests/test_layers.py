"""The layers' import rule, checked on the source: imports run one way, defs → steps → collector, warehouse, engine,
alerts; the engine imports nothing of ours and nothing that does I/O; only defs/ (and what assembles or drives it)
knows Dagster; the lab (the simulators tests and benchmarks draw from) may use the engine, and no layer uses the lab."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "radar_pipeline"
SHARED = {"pgss_model", "plan_shape", "config", "binary_copy"}  # small modules every layer may use
# What each room may import of ours (besides itself and SHARED), and whether it may import Dagster.
ALLOWED: dict[str, tuple[set[str], bool]] = {
    "engine": (set(), False),
    "collector": ({"engine"}, False),
    "warehouse": ({"engine", "named_changes"}, False),  # named_changes: the named changes it reads (issue 28)
    "alerts": ({"engine"}, False),
    "steps": ({"collector", "warehouse", "engine", "alerts", "named_changes"}, False),
    "defs": ({"steps", "collector", "warehouse", "engine", "alerts"}, True),
    "lab": ({"engine"}, False),
    "receiver": ({"steps", "warehouse", "engine"}, False),
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
        module = PACKAGE / f"{name}.py"
        files = [module] if module.exists() else sorted((PACKAGE / name).rglob("*.py"))  # a module or a package
        assert files, name
        used = {_room_of(m) for path in files for m in _imports(path)} - {None, *SHARED}
        assert not used, f"{name} imports {used}"


def _module_level(path: Path) -> list[ast.stmt]:
    """The statements a module runs when imported (its top level, and the bodies of top-level if/try blocks other
    than `if TYPE_CHECKING:`)."""
    found: list[ast.stmt] = []
    todo = list(ast.parse(path.read_text()).body)
    while todo:
        node = todo.pop()
        found.append(node)
        if isinstance(node, ast.If) and not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
            todo += node.body + node.orelse
        elif isinstance(node, ast.Try):
            todo += node.body + node.orelse + node.finalbody + [s for h in node.handlers for s in h.body]
    return found


def test_no_private_dagster_import_or_warning_filter_at_import() -> None:
    """Dagster's private modules are not imported when a module loads; no module changes the process's warning
    filters when imported (definitions.py silences Dagster's known warnings when the location loads)."""
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in _module_level(path):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            wrong += [f"{path.relative_to(PACKAGE)} imports {n}" for n in names if n.startswith("dagster._")]
            text = ast.unparse(node) if isinstance(node, ast.Expr) else ""
            if "filterwarnings(" in text or "simplefilter(" in text:
                wrong.append(f"{path.relative_to(PACKAGE)}: {text}")
    assert not wrong, "\n".join(wrong)


# The one private Dagster name used anywhere, inside the function that needs it: Dagster 1.13 has no public name for
# the materialization an AssetCheckEvaluation points at, which a backfill's run builds for each deploy's checks
# (test_backfill shows each check pointing at its own deploy's materialization). A new one fails the test below.
PRIVATE_DAGSTER = {
    "defs/deploys/deploy_verdicts.py imports dagster._core.definitions.asset_checks.asset_check_evaluation",
}


def test_private_dagster_names_are_the_one_known_anywhere_in_a_function_body_too() -> None:
    found = {
        f"{path.relative_to(PACKAGE)} imports {module}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for module in _imports(path)
        # modules only (_imports also lists each imported name as module.Name)
        if module.startswith("dagster._") and module.rsplit(".", 1)[-1][:1].islower()
    }
    assert found == PRIVATE_DAGSTER


HEAVY = ("pandas", "numpy", "scipy", "sqlalchemy", "matplotlib", "httpx", "slack_sdk", "psycopg", "pglast")
# The engine's settings (the run config is made from them) and its vocabulary load without numpy or pandas.
LIGHT_ENGINE = {"radar_pipeline.engine", "radar_pipeline.engine.settings", "radar_pipeline.engine.vocabulary"}


def test_loading_the_code_location_imports_no_heavy_library() -> None:
    """What every Dagster process (each run, the daemon, the UI) pays: the location loads without the heavy
    libraries, the engine's computation or warehouse/; runs, ticks and checks import them where they use them."""
    code = (
        "import sys\n"
        "from radar_pipeline.definitions import defs\n"
        "defs()\n"
        "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in sys.argv[1:]\n"
        "    or m.startswith(('radar_pipeline.engine', 'radar_pipeline.warehouse', 'radar_pipeline.collector')))))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, *HEAVY],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "DAGSTER_DISABLE_TELEMETRY": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert set(proc.stdout.split()) - LIGHT_ENGINE == set()


def test_only_tests_and_benchmarks_use_the_lab_and_nothing_uses_the_tests() -> None:
    # The lab ships with the package so that benchmarks/ runs on a fresh clone without the test fixtures.
    root = PACKAGE.parent
    wrong = []
    # benchmarks/ itself, not the anchor libraries benchmarks/.anchors installs (thousands of files, none of ours)
    for path in sorted([*PACKAGE.rglob("*.py"), *(root / "benchmarks").glob("*.py")]):
        for module in _imports(path):
            if module.split(".")[0] == "radar_pipeline_tests":
                wrong.append(f"{path.relative_to(root)} imports {module}")
            if _room_of(module) == "lab" and PACKAGE / "lab" not in path.parents and path.parent.name != "benchmarks":
                wrong.append(f"{path.relative_to(root)} imports {module}")
    assert not wrong, "\n".join(wrong)
