"""The README stays a short first read whose two commands are what CI runs; the docs build strictly and offline, and
their reference names every setting, engine setting, verdict, reason and cause the code has."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import yaml

from radar_pipeline.config.settings import setting_paths, variable
from radar_pipeline.engine import EngineSettings, vocabulary

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
MKDOCS = Path(sys.executable).parent / "mkdocs"


def _section_block(text: str, heading: str) -> list[str]:
    """The commands of the first ```sh block after `heading`, comments dropped."""
    block = text.split(heading, 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    return [line.split("#", 1)[0].strip() for line in block.strip().splitlines()]


def _recipe(makefile: str, target: str) -> list[str]:
    """The command lines of a Makefile target."""
    lines = makefile.split(f"\n{target}:", 1)[1].splitlines()[1:]
    recipe = []
    for line in lines:
        if not line.startswith("\t"):
            break
        recipe.append(line.strip())
    return recipe


def _slug(title: str) -> str:
    """A heading's anchor as MkDocs' toc extension makes it."""
    title = unicodedata.normalize("NFKD", title.replace("`", ""))
    return re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", title).strip().lower())


def _anchors(page: Path) -> set[str]:
    """The anchors of a Markdown page's headings (outside code blocks)."""
    anchors, fenced = set(), False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,6} ", line):
            anchors.add(_slug(line.lstrip("#").strip()))
    return anchors


def test_the_readme_is_short_and_its_two_commands_are_what_make_and_ci_run() -> None:
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 150, "the README is a first read: at most 150 lines (the rest goes to docs/)"
    assert _section_block(readme, "## Two commands") == ["make demo", "make test"]
    makefile = (REPO / "Makefile").read_text()
    assert "$(BIN)/radar demo" in _recipe(makefile, "demo")
    test = _recipe(makefile, "test")
    assert any(line.startswith("$(BIN)/pytest") for line in test), test
    assert any(line.startswith("$(BIN)/mkdocs build --strict") for line in test), test
    assert any("$(BIN)/dg check defs" in line for line in test), test
    ci = [line for line in (REPO / ".ci" / "run").read_text().splitlines() if line and not line.startswith("#")]
    assert ci[-1] == "make test", ci


def test_the_readme_s_links_lead_to_pages_and_headings_that_exist() -> None:
    readme = (REPO / "README.md").read_text()
    links = re.findall(r"\]\(([^)#\s]+)(?:#([^)\s]+))?\)", readme)
    local = [(target, anchor) for target, anchor in links if not target.startswith(("http://", "https://"))]
    assert any(target.startswith("docs/") for target, _ in local), "the README links into the docs"
    for target, anchor in local:
        page = REPO / target
        assert page.exists(), f"README links to {target}, which does not exist"
        if anchor:
            assert anchor in _anchors(page), f"README links to {target}#{anchor}: no such heading"


def test_the_docs_build_strictly_without_fetching_anything(tmp_path: Path) -> None:
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    assert config["theme"]["font"] is False  # Material would fetch Google Fonts
    assert [p if isinstance(p, str) else next(iter(p)) for p in config.get("plugins", [])] == ["search"]
    pages = {p.name for p in DOCS.glob("*.md")}
    in_nav = {next(iter(item.values())) for item in config["nav"]}
    assert pages == in_nav, f"pages not in the nav: {pages - in_nav}; in the nav, no page: {in_nav - pages}"
    built = subprocess.run(
        [str(MKDOCS), "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
        env={"PATH": str(MKDOCS.parent), "HOME": str(tmp_path), "NO_MKDOCS_2_WARNING": "1"},
    )
    assert built.returncode == 0, built.stderr[-4000:]
    assert (tmp_path / "site" / "reference" / "index.html").exists()


def test_the_reference_names_every_setting_and_every_word_of_a_verdict() -> None:
    reference = (DOCS / "reference.md").read_text()
    variables = {
        name
        for path in (REPO / "radar_pipeline").rglob("*.py")
        for name in re.findall(r"\bRADAR_[A-Z][A-Z0-9_]*[A-Z0-9]\b", path.read_text())
    }
    assert len(variables) >= 25, sorted(variables)  # the scan found the settings (config/settings.py names them)
    variables |= {variable(path) for path in setting_paths()}  # and every setting of the tree
    missing = sorted(v for v in variables if f"`{v}`" not in reference)
    assert not missing, f"settings the reference does not list: {missing}"
    engine = getattr(EngineSettings, "model_fields", None) or {f.name for f in dataclasses.fields(EngineSettings)}
    assert not [f for f in engine if f"`{f}`" not in reference], "engine settings missing from the reference"
    lists = ("VERDICTS", "REASONS", "CAUSES")
    words = [str(getattr(w, "value", w)) for name in lists for w in getattr(vocabulary, name)]
    assert len(words) > 15
    assert not [w for w in words if f"`{w}" not in reference], "verdict words missing from the reference"
