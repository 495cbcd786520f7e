"""The layers' import rule, checked on the source: the contracts in pyproject.toml ([tool.importlinter]: imports run
one way, defs → steps → collector, warehouse, alerts → engine; the engine imports nothing of ours and nothing that
does I/O; only defs/ and what assembles or drives it knows Dagster; the lab uses the engine alone and nothing of the
package uses it; no import cycle), run by import-linter, which counts imports made inside functions as any other.
Here too what the contracts cannot say: Dagster's private names, what loading the code location costs, and that
nothing imports the tests."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "radar_pipeline"
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


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


def _lint_imports(folder: Path, config: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(config), "--no-cache", "--no-logo"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )


def test_the_import_contracts_hold() -> None:
    root = PACKAGE.parent
    proc = _lint_imports(root, root / "pyproject.toml")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


def test_an_import_inside_a_function_that_closes_a_cycle_breaks_the_contract(tmp_path: Path) -> None:
    # The contract's own check, on a package of two modules: `a` imports `b` when loaded, `b` imports `a` only
    # inside a function, as a lazy import hiding a cycle would.
    package = tmp_path / "circle"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from circle import b\n")
    (package / "b.py").write_text("def late():\n    from circle import a\n\n    return a\n")
    config = tmp_path / ".importlinter"
    config.write_text(
        "[importlinter]\nroot_package = circle\n\n"
        "[importlinter:contract:no-cycle]\nname = No cycle\ntype = acyclic_siblings\nancestors = circle\n"
    )
    proc = _lint_imports(tmp_path, config, {**os.environ, "PYTHONPATH": str(tmp_path)})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "No cycle BROKEN" in proc.stdout and "- .b -> .a (1 import)" in proc.stdout, proc.stdout


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


def test_nothing_uses_the_tests() -> None:
    # benchmarks/ itself, not the anchor libraries benchmarks/.anchors installs (thousands of files, none of ours)
    root = PACKAGE.parent
    wrong = [
        f"{path.relative_to(root)} imports {module}"
        for path in sorted([*PACKAGE.rglob("*.py"), *(root / "benchmarks").glob("*.py")])
        for module in _imports(path)
        if module.split(".")[0] == "radar_pipeline_tests"
    ]
    assert not wrong, "\n".join(wrong)
