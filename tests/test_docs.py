"""The documentation site (docs/, mkdocs.yml) and the README, as a reader meets them.

The site is built for real with `mkdocs build --strict` (as CI does): every command and option of
the click CLI must be in the generated command reference, every rule must have its page with its
own documentation, the published schemas must be the code's, a broken link must fail the build,
and the pages must render offline. The README stays a five-minute read with the two commands.
"""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

from advisor.commands.cli import main
from advisor.rules.registry import load_rules, section
from conftest import REPO, advise_cmd

# The site and the README, whatever torch is installed: run on the main torch only (.ci/run's matrix
# installs no docs tools).
pytestmark = pytest.mark.torchfree

ENV = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}


def build(root: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                          cwd=root, capture_output=True, text=True, timeout=300, env=ENV)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    proc = build(REPO, out)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out


def text_of(source: str) -> str:
    """The words of an HTML page or fragment, as a reader sees them (markup and spacing gone)."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", source)).split())


def words(markdown: str) -> str:
    return " ".join(re.sub(r"[`*]", "", markdown).split())


def test_every_command_and_option_is_in_the_command_reference(site):
    page = (site / "reference" / "commands.html").read_text()
    sections = re.split(r'<h\d id="advise-([a-z-]+)"', page)
    by_command = {sections[i]: sections[i + 1] for i in range(1, len(sections) - 1, 2)}
    assert set(by_command) == set(main.commands), (sorted(by_command), sorted(main.commands))
    for name, command in main.commands.items():
        body = by_command[name]
        assert words((command.help or "").strip().splitlines()[0]) in text_of(body), name
        for param in command.params:
            if isinstance(param, click.Option):
                for opt in param.opts:
                    assert f"<code>{opt}" in body, f"advise {name} {opt} is not in the command reference"
                if param.help:
                    assert words(param.help)[:50] in text_of(body), (name, param.name)
    assert "Sentinel.UNSET" not in page


def test_every_rule_has_its_page_from_its_own_documentation(site):
    rules = [r for r in load_rules().rules if r.origin == "advise"]
    index = (site / "reference" / "rules" / "index.html").read_text()
    assert len(rules) >= 20
    for r in rules:
        page = site / "reference" / "rules" / f"{r.code}.html"
        assert page.is_file(), f"{r.code} has no page"
        text = text_of(page.read_text())
        assert f"{r.code} {r.name}" in text
        for header in ("What it does", "Why is this bad?", "Example", "Fix safety", "Options"):
            assert header in text, (r.code, header)
        assert words(section(r.doc, "## What it does"))[:80] in text, r.code  # the rule's own words
        for option in r.options:
            assert option.key in text, (r.code, option.key)
        assert f'href="{r.code}.html"' in index, f"{r.code} is not linked from the rules index"


def test_the_site_publishes_the_schemas_the_code_generates(site):
    for name in ("report", "compare", "summary"):
        printed = subprocess.run(advise_cmd("schema", name), capture_output=True, text=True, timeout=60)
        assert printed.returncode == 0, printed.stderr
        assert (site / "reference" / f"{name}.v1.schema.json").read_text() == printed.stdout
    fields = text_of((site / "reference" / "report-json.html").read_text())
    for field in ("schema_version", "status", "findings", "recommended", "artifacts", "verdict"):
        assert field in fields


def test_the_site_renders_offline(site):
    for page in ("index.html", "reference/commands.html", "reference/rules/DL001.html"):
        source = (site / page).read_text()
        external = re.findall(r'<(?:script|link)[^>]+(?:src|href)="(https?://[^"]+)"', source)
        assert not external, (page, external)
        assert "fonts.googleapis" not in source
        assert 'href="../' in source or page == "index.html"
        links = re.findall(r'href="([^"#:]+\.html)', source)
        assert links and all((site / page).parent.joinpath(link).resolve().is_file() for link in links), page


def test_a_broken_link_fails_the_build(tmp_path):
    """The site's own theme and link validation (mkdocs.yml's `theme` and `validation`), on a
    one-page site: a link to a missing page fails `--strict`. (The whole site is built once, by the
    `site` fixture: CI builds the docs once.)"""
    import yaml

    real = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("# Home\n\nSee [the missing page](no-such-page.md).\n")
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump({"site_name": "broken", "docs_dir": "docs", "theme": real["theme"],
                                                         "use_directory_urls": False, "validation": real["validation"],
                                                         "nav": [{"Home": "index.md"}]}))
    proc = build(tmp_path, tmp_path / "site")
    assert proc.returncode != 0 and "no-such-page.md" in proc.stderr, proc.stderr[-2000:]


def test_the_readme_is_short_and_keeps_its_two_commands():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    block = readme.split("## Install and test", 1)[1].split("```", 2)[1]
    assert [line for line in block.splitlines() if line.strip()] == ['pip install -e ".[test]"', "python -m pytest -n 2"]
    ci = (REPO / ".ci" / "run").read_text()
    assert 'pip install -e ".[test]"' in ci and "python -m pytest -n 2" in ci
    assert "python benchmarks/truth/run.py" in readme
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme):
        if not target.startswith("http"):
            assert (REPO / target).is_file(), f"README links to {target}, which does not exist"
