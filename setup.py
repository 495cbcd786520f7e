"""Packaging hook: the migrations in sql/ (kept at the top of the checkout, numbered) ship inside the package as
radar_pipeline/sql/, so `radar db upgrade` works from an installed wheel. Everything else is in pyproject.toml."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


class BuildWithMigrations(build_py):
    """build_py that also copies sql/*.sql into the built package."""

    def run(self) -> None:
        super().run()
        folder = Path(self.build_lib) / "radar_pipeline" / "sql"
        folder.mkdir(parents=True, exist_ok=True)
        for script in sorted((HERE / "sql").glob("*.sql")):
            self.copy_file(str(script), str(folder / script.name))


setup(cmdclass={"build_py": BuildWithMigrations})
