"""The markdown summary: the same numbers as the HTML page, escaped for markdown and GitHub's HTML."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from advisor.profile import Profile
from advisor.report import Report
from advisor.reports.markdown import code, escape, fence, markdown_for

RUN_DIR = Path(__file__).parent / "gold" / "rundir"


def gold_report() -> dict:
    return json.loads((RUN_DIR / "report.json").read_text())


def test_summary_has_the_verdict_findings_and_recommendation():
    md = markdown_for(Report.of(gold_report()), Profile.from_run_dir(RUN_DIR))
    assert md.startswith("## advise: ok · `train.py`\n")
    assert "| throughput | **812.7 samples/s** (over 15 steps outside the profiler) |" in md
    assert "| step breakdown | data wait 41% · forward/backward 53% · optimizer 5% |" in md
    assert "| recommended configuration | 1.80× faster (95% CI 1.66–1.93×), verified |" in md
    assert "| 1 | DL001 | high | The GPU waits on the DataLoader for 41% of each step | 1.71× faster (95% CI 1.58–1.84×), verified |" in md
    assert "| 5 | MEM001 | low | Peak memory is 23% of the GPU's 40 GiB | 0.93×, 7% slower (95% CI 0.90–0.96×) |" in md
    assert "```\n+ torch.backends.cudnn.benchmark = True\n```" in md
    assert "| `aten::convolution` | 2 | 17.6 ms | 37.9% |" in md


def test_a_failed_run_says_so_with_its_traceback():
    report = gold_report()
    report.update(status="failed", error="ValueError: boom", traceback="Traceback ...\nValueError: boom\n", findings=[],
                  recommended=None)
    md = markdown_for(Report.of(report), Profile.from_run_dir(RUN_DIR))
    assert md.startswith("## advise: failed · `train.py`\n\nThe script failed.")
    assert "**error:** ValueError: boom" in md
    assert "<details><summary>the script's traceback</summary>\n\n```\nTraceback ...\nValueError: boom\n```" in md
    assert "none: the rules need a finished measured window" in md


@pytest.mark.parametrize("raw, safe", [
    ("<script>alert('x')</script>", "&lt;script&gt;alert('x')&lt;/script&gt;"),
    ("a | b", "a \\| b"),
    ("*bold* _it_ [link](http://x) `code`", "\\*bold\\* \\_it\\_ \\[link\\](http://x) \\`code\\`"),
    ("two\nlines", "two lines"),
    ("# heading", "\\# heading"),
    ("&amp;", "&amp;amp;"),
])
def test_text_is_escaped(raw, safe):
    assert escape(raw) == safe


def test_code_spans_and_fences_survive_backticks_and_pipes():
    assert code("a|b") == "`a\\|b`"
    assert code("x ` y") == "``x ` y``"
    assert code("a|b", table=False) == "`a|b`"
    assert code("`edge`") == "`` `edge` ``"
    assert fence("a\n```\nb") == "````\na\n```\nb\n````"


def test_hostile_report_fields_never_become_markup():
    hostile = "<img src=x onerror=alert(1)> | **x**"
    report = gold_report()
    report.update(script=f"/x/{hostile}.py", error=hostile, warnings=[hostile])
    report["findings"][0]["title"] = hostile
    md = markdown_for(Report.of(report), Profile.from_run_dir(RUN_DIR))
    outside_code = re.sub(r"(`+)(?:(?!\1).)+\1", "", md)
    assert "<img" not in outside_code  # only inside a code span, where it is text
    assert "&lt;img src=x onerror=alert(1)&gt; \\| \\*\\*x\\*\\*" in md
