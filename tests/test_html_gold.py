"""Golden files: the HTML page and the markdown summary of tests/gold/rundir, compared after scrubbing.

Like coverage.py's gold tests: what changes from machine to machine or release to release
(advise's version, paths, dates) is scrubbed; the inlined CSS and JS are left to the browser
tests, so the gold is the page's markup and words. When a change to the report is intended,
regenerate the gold and review the diff:

    ADVISE_UPDATE_GOLD=1 python -m pytest tests/test_html_gold.py

On a mismatch the actual output is written beside the test's tmp dir and the diff is shown.
The run dir itself is hand-built (`python tests/gold/make_rundir.py` rewrites it).
"""

from __future__ import annotations

import difflib
import json
import os
import re
from pathlib import Path

import pytest

from advisor import __version__
from advisor.profile import Profile
from advisor.reports.html import render_html
from advisor.reports.markdown import render_markdown
from advisor.reports.page import build_page
from advisor.report import Report

GOLD = Path(__file__).parent / "gold"
RUN_DIR = GOLD / "rundir"
UPDATE = bool(os.environ.get("ADVISE_UPDATE_GOLD"))


def scrub(text: str) -> str:
    """Remove what varies between machines and versions: advise's version, paths, dates, inlined assets."""
    text = re.sub(r"<style>.*?</style>", "<style>/* report.css */</style>", text, flags=re.S)
    text = re.sub(r"<script>.*?</script>", "<script>/* report.js */</script>", text, flags=re.S)
    text = text.replace(f"advise {__version__}", "advise VERSION")
    text = text.replace(str(RUN_DIR.resolve()), "RUN_DIR").replace(str(Path(__file__).resolve().parents[1]), "REPO")
    text = re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d", "DATE", text)
    return text


@pytest.fixture
def page():
    """The gold run dir's page, with rule docs from the fixture (not from whichever rules are installed)."""
    docs = json.loads((RUN_DIR / "rule_docs.json").read_text())
    return build_page(Report.of(json.loads((RUN_DIR / "report.json").read_text())), Profile.from_run_dir(RUN_DIR), docs)


def compare(actual: str, gold_name: str, tmp_path: Path) -> None:
    gold_file = GOLD / gold_name
    if UPDATE or not gold_file.exists():
        gold_file.write_text(actual)
        if not UPDATE:
            pytest.fail(f"{gold_file} did not exist: written now, review and commit it")
        return
    expected = gold_file.read_text()
    if actual != expected:
        out = tmp_path / gold_name
        out.write_text(actual)
        diff = "".join(list(difflib.unified_diff(expected.splitlines(True), actual.splitlines(True), str(gold_file), str(out)))[:80])
        pytest.fail(f"{gold_name} differs from the gold (actual output: {out}; regenerate with "
                    f"ADVISE_UPDATE_GOLD=1 if intended):\n{diff}")


def test_html_matches_the_gold(page, tmp_path):
    compare(scrub(render_html(page)), "report.html", tmp_path)


def test_markdown_matches_the_gold(page, tmp_path):
    compare(scrub(render_markdown(page)), "summary.md", tmp_path)


def test_scrub_removes_what_varies():
    text = f"<style>a{{}}</style> advise {__version__} · {RUN_DIR.resolve()}/x 2026-01-02T03:04:05+00:00 <script>1</script>"
    assert scrub(text) == "<style>/* report.css */</style> advise VERSION · RUN_DIR/x DATE <script>/* report.js */</script>"
