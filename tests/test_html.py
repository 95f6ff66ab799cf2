"""report.html: one self-contained page, from hand-built reports and from real runs, checked in a real Chromium.

The browser tests need Debian's `chromium` and `chromium-driver` (`.ci/install-browser`) and
Selenium; without them they skip, saying so. Screenshots land in each test's tmp dir
(pytest prints it on failure; `--basetemp DIR` keeps them somewhere known).
"""

from __future__ import annotations

import base64
import copy
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import FAST, WORKLOADS, advise_cmd

from advisor.reports import format as fmt
from advisor import units
from advisor.model import Finding
from advisor.profile import Profile
from advisor.report import Report
from advisor.reports import charts, run_view
from advisor.reports.html import render_html, write_html
from advisor.reports.page import build_page
from advisor.reports.ruledoc import doc_for, docs_by_key

GOLD_RUN = Path(__file__).parent / "gold" / "rundir"
SECTIONS = ("top", "breakdown", "timeline", "findings", "experiments", "ops", "steps", "environment", "files")
MAX_NORMAL_BYTES = 300_000  # "a few hundred KB at most for a normal run"


def gold_report() -> dict:
    return json.loads((GOLD_RUN / "report.json").read_text())


def gold_profile(run_dir: Path = GOLD_RUN) -> Profile:
    return Profile.from_run_dir(run_dir)


def gold_docs() -> dict[str, str]:
    return json.loads((GOLD_RUN / "rule_docs.json").read_text())


def gold_page(report: dict | None = None, rule_docs: dict[str, str] | None = None):
    return build_page(Report.of(report or gold_report()), gold_profile(), gold_docs() if rule_docs is None else rule_docs)


def gold_html(report: dict | None = None, rule_docs: dict[str, str] | None = None) -> str:
    return render_html(gold_page(report, rule_docs))


def text_of(html: str) -> str:
    """The page's visible text, roughly: tags dropped, entities decoded."""
    import html as html_lib

    body = re.sub(r"<(style|script)\b.*?</\1>", " ", html, flags=re.S)
    return " ".join(html_lib.unescape(re.sub(r"<[^>]+>", " ", body)).split())


# --- the page holds everything, from the data alone ------------------------------------------


def test_every_section_is_there_with_findings_and_experiments():
    html = gold_html()
    for section in SECTIONS:
        assert f'id="{section}"' in html, section
    text = text_of(html)
    assert "812.7 samples/s" in text and "78.2 ms median" in text and "NVIDIA A100-SXM4-40GB" in text
    assert "DL001 The GPU waits on the DataLoader for 41% of each step" in text  # the verdict's top finding
    assert "1.80× faster (95% CI 1.66–1.93×), verified" in text  # the recommended configuration's measured gain
    assert "torch.backends.cudnn.benchmark = True" in text  # its code change
    assert "data wait 41%" in text and "forward/backward 53%" in text
    assert "GPU utilization" in text and "GPU power" in text and "RSS (the script's processes)" in text
    assert "aten::convolution" in text and "ampere_sgemm_128x64_nn" in text  # top ops and kernels from the trace
    assert "Open it in Perfetto" in text and 'href="trace.json.gz"' in html


def test_findings_are_ranked_by_measured_gain():
    codes = [v.code for v in gold_page().findings]
    # verified (1.71x, 1.06x), measured but unclear (1.04x), the rule's estimate, then slower and unmeasured
    assert codes == ["DL001", "GPU004", "PR001", "GPU003", "MEM001", "OPT001"]


def test_each_finding_shows_evidence_fix_result_and_sweep():
    page = gold_page()
    dl = page.findings[0]
    assert ("data_wait_frac", "41.4%") in [(r.key, r.value) for r in dl.evidence]
    assert ("data_wait_s", "32.3 ms") in [(r.key, r.value) for r in dl.evidence]
    assert dl.fix_note == "safe: numerics unchanged" and "num_workers=8" in dl.snippet
    assert dl.experiment.state == "verified" and dl.experiment.ci == "1.58–1.84×"
    assert dl.experiment.baseline == "812.4 samples/s" and dl.experiment.candidate == "1,389.2 samples/s"
    assert [(p.label.rsplit("=", 1)[1], p.speedup) for p in dl.sweep] == [("4)", "1.52×"), ("8)", "1.71×"), ("16)", "1.69×")]
    assert dl.sweep_best == "num_workers=8, pin_memory=True, persistent_workers=True"
    by_code = {f.code: f for f in page.findings}
    assert by_code["MEM001"].experiment.state == "slower" and by_code["MEM001"].experiment.loss_state == "bad"
    assert by_code["MEM001"].experiment.sentence == "0.93×, 7% slower (95% CI 0.90–0.96×)"
    assert by_code["PR001"].experiment.detail.endswith("the interval includes no gain")
    assert by_code["PR001"].experiment.loss == "loss check passed: mean 2.092 vs 2.091 (tolerance ±0.21)"
    assert by_code["OPT001"].experiment.state == "not-run" and by_code["OPT001"].experiment.detail == "experiment budget exhausted"
    assert by_code["GPU003"].experiment.state == "estimate"  # the rule's own estimate, labelled as such
    assert [e.code for e in page.experiments] == ["DL001", "GPU004", "PR001", "MEM001", "OPT001"]
    assert page.experiments_note == "12 child runs of the script, 4 min 22 s in all."


def test_rule_documentation_is_rendered_from_the_registry_text():
    page = gold_page(rule_docs={"dataloader-starvation": gold_docs()["dataloader-starvation"]})
    doc = page.findings[0].doc
    assert re.findall(r"<h5>(.*?)</h5>", doc) == ["What it does", "Why is this bad?", "Example", "Fix safety", "Options"]
    example = doc[doc.index("<h5>Example</h5>"):doc.index("<h5>Fix safety</h5>")]
    assert re.findall(r"<(pre|p)\b", example) == ["pre", "p", "pre"]  # code, "Use instead:", code
    assert '<pre class="code">DataLoader(ds, batch_size=64, num_workers=8, pin_memory=True)</pre>' in example
    assert "<li><code>wait_threshold</code> (default 0.10)</li>" in doc
    assert "About dataloader-starvation" in render_html(page)
    assert page.findings[1].doc == ""  # no doc: no "About" block, nothing breaks


def test_rule_docs_are_found_by_name_or_code():
    doc = gold_docs()["dataloader-starvation"]
    finding = Finding.from_dict({"rule": "dataloader-starvation", "code": "DL001", "title": "t"})
    assert doc_for(finding, {"dataloader-starvation": doc}) == doc == doc_for(finding, {"DL001": doc})
    assert doc_for(Finding.from_dict({"rule": "no-such-rule", "code": "ZZZ999", "title": "t"}), {"DL001": doc}) == ""


def test_rule_docs_come_from_the_installed_rules_when_there_are_some():
    registry = pytest.importorskip("advisor.rules.registry")
    catalogue = registry.load_rules()
    found = catalogue.find("dataloader-starvation")
    if found is None:
        pytest.skip("the dataloader-starvation rule is not installed")
    docs = docs_by_key(catalogue.rules)
    assert docs["dataloader-starvation"] == docs[found.code] == found.doc
    page = gold_page(rule_docs=docs)
    assert "<h5>What it does</h5>" in next(f for f in page.findings if f.code == "DL001").doc


def test_a_run_without_findings_or_experiments_says_none():
    report = gold_report()
    report.update(findings=[], recommended=None, experiments=None)
    page = gold_page(report)
    text = text_of(gold_html(report))
    assert "none: no bottleneck found (no rule fired in this run)" in text
    assert "none: there was nothing to try" in text
    assert page.verdict.top_finding == page.verdict.gain == "none: no bottleneck found"


def test_findings_without_any_experiment_say_why():
    report = gold_report()
    for f in report["findings"]:
        f["experiment"] = None
    report.update(recommended=None, experiments=None)
    page = gold_page(report)
    assert page.experiments == [] and page.experiments_empty == "none: experiments were off (--no-experiments)"
    assert page.verdict.gain == "none: experiments were off (--no-experiments)"  # never another finding's result
    by_code = {f.code: f for f in page.findings}
    assert by_code["DL001"].unmeasured == "experiments were off (--no-experiments)"
    assert by_code["GPU003"].experiment.state == "estimate"  # its own estimate, labelled so


def test_no_recommended_configuration_block_when_report_json_has_none():
    """recommended: null in report.json: the page shows no such block, and its header says why there is none."""
    report = gold_report()
    report["recommended"] = None
    for f in report["findings"]:
        if f["experiment"] and f["experiment"].get("verified"):
            f["experiment"].update(verified=False, verdict="no-significant-change", ci_low=0.98)
    page = gold_page(report)
    html = gold_html(report)
    assert page.recommended is None and "Recommended configuration" not in html
    assert page.verdict.gain == "none: 4 fixes measured, none faster (3 no clear gain, 1 slower)"
    assert "recommended configuration" in text_of(html)  # the header's slot, with that sentence
    assert page.verdict.gain in text_of(html)


def test_a_candidate_without_a_figure_shows_a_dash_and_why():
    report = gold_report()
    f = next(f for f in report["findings"] if f["code"] == "GPU004")
    f["experiment"].update(verdict="failed", verified=False, speedup=None, ci_low=None, ci_high=None,
                           error="the candidate run exited with code 1", candidate={"runs": 0, "samples_per_s": None})
    page = gold_page(report)
    row = next(e for e in page.experiments if e.code == "GPU004")
    assert row.result.candidate == "–" and row.result.missing == "no run finished: the candidate run exited with code 1"
    text = text_of(gold_html(report))
    assert "→ – (no run finished: the candidate run exited with code 1)" in text
    assert not re.search(r"samples/s →\s*[;<]", gold_html(report))  # never an arrow to nothing


@pytest.mark.parametrize("status, error, headline", [
    ("failed", "ValueError: planted failure at step 3", "The script failed."),
    ("timeout", "timed out after 600 s with no training step seen", "stopped at the time limit"),
    ("no-steps", "the script ended without a training step", "no training step was seen"),
    ("interrupted", "interrupted (Ctrl-C)", "The run was interrupted."),
])
def test_a_run_that_did_not_end_well_still_gets_a_report(tmp_path, status, error, headline):
    run_dir = tmp_path / "run"
    shutil.copytree(GOLD_RUN, run_dir)
    report = gold_report()
    report.update(status=status, error=error, findings=[], recommended=None, experiments=None,
                  traceback='Traceback (most recent call last):\n  File "train.py", line 3\nValueError: planted' if status == "failed" else None)
    (run_dir / "script.log").write_text("".join(f"line {i}\n" for i in range(50)))
    html = write_html(Report.of(report), run_dir, Profile.from_run_dir(run_dir)).read_text()
    text = text_of(html)
    assert f'class="verdict status-{"bad" if status in ("failed", "timeout") else "warn"}"' in html
    assert headline in text and error in text and "What happened" in text
    assert "20 measured steps were recorded before the run ended" in text  # what was seen
    if status == "failed":
        assert "The script's traceback" in text and "ValueError: planted" in text
    else:
        assert "Last lines of script.log" in text and "line 49" in text and "line 19" not in text
    assert "none: the rules need a finished measured window" in text


def test_a_run_with_nothing_measured_renders(tmp_path):
    report = {"schema_version": 1, "status": "failed", "error": "the script's process was killed by signal SIGKILL",
              "script": "train.py", "argv": [], "steps": [], "findings": [], "artifacts": {"report_json": "report.json"}}
    html = write_html(Report.of(report), tmp_path).read_text()
    text = text_of(html)
    assert "killed by signal SIGKILL" in text and "No measured step was recorded" in text
    assert "No breakdown: no timed steps." in text and "no sampler data in this run" in text
    assert "no trace was recorded in this run" in text


# --- hostile text is text ----------------------------------------------------------------------

HOSTILE = "<script>alert('x\")</script>"


def test_hostile_strings_anywhere_in_the_report_are_escaped(tmp_path):
    report = gold_report()
    report.update(script=f"/tmp/{HOSTILE}/train.py", argv=[f"--name={HOSTILE}"], error=HOSTILE, warnings=[HOSTILE],
                  notes=[HOSTILE], env={**report["env"], "device_name": HOSTILE, HOSTILE: HOSTILE})
    f = next(f for f in report["findings"] if f["code"] == "DL001")
    # the severity is an enum: the typed model refuses anything else (test_an_unknown_severity_is_refused)
    f.update(title=HOSTILE, summary=f"`{HOSTILE}` and {HOSTILE}", rule=HOSTILE, code=HOSTILE, evidence={HOSTILE: HOSTILE})
    doc = f"## {HOSTILE}\n{HOSTILE}\n\n    {HOSTILE}\n- `{HOSTILE}`\n\n<b>{HOSTILE}</b> [link](javascript:alert(1))"
    f["fix"].update(title=HOSTILE, snippet=HOSTILE, overrides={HOSTILE: HOSTILE})
    f["experiment"].update(reason=HOSTILE, loss_check={"checked": True, "passed": False, "detail": HOSTILE})
    report["recommended"].update(fixes=[HOSTILE], snippets=[{"key": HOSTILE, "snippet": HOSTILE}])
    report["artifacts"]["log"] = f"{HOSTILE}.log"
    html = gold_html(report, rule_docs={HOSTILE: doc})
    assert "<script>alert" not in html and "<b>&lt;" not in html and 'href="javascript' not in html
    assert html.count("<script") == 1  # ours, at the end
    assert html.count("&lt;script&gt;alert(&#39;x&#34;)&lt;/script&gt;") >= 15  # jinja's escaping
    assert html.count("&lt;script&gt;alert('x&quot;)&lt;/script&gt;") == 5  # markdown-it's, in the rule doc


def test_an_unknown_severity_is_refused(tmp_path):
    report = gold_report()
    report["findings"][0]["severity"] = "urgent"
    report["tool"]["name"] = "hand-edited"  # broken on purpose: not one for the schema check (conftest)
    with pytest.raises(ValueError, match="severity 'urgent' is not one of high, medium, low"):
        build_page(Report.of(report))
    (tmp_path / "report.json").write_text(json.dumps(report))
    proc = subprocess.run(advise_cmd("report", str(tmp_path)), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "severity 'urgent'" in proc.stderr


def test_the_page_loads_nothing_from_outside():
    html = gold_html()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", html)
    assert not re.search(r"@import|url\(|<link\b|<iframe|<img\b", html)
    assert len(html.encode()) < MAX_NORMAL_BYTES


# --- charts and numbers ----------------------------------------------------------------------


def test_long_series_are_decimated_but_keep_their_extremes():
    ts = [i * 0.1 for i in range(20_000)]
    ys = [50.0] * 20_000
    ys[12_345], ys[777] = 100.0, 0.0
    pts = charts.decimate(ts, ys)
    assert len(pts) <= 2 * charts.MAX_BUCKETS
    values = [y for _, y in pts]
    assert max(values) == 100.0 and min(values) == 0.0
    assert [t for t, _ in pts] == sorted(t for t, _ in pts)


def test_a_long_run_stays_small(tmp_path):
    """An hour of 100 ms samples and 2,000 measured steps still makes a page of a few hundred KB."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    n = 36_000
    rows = "\n".join(f"{1000 + i * 0.1:.1f},{50 + (i % 37)},{2e9 + i},{(i * 7) % 100},{9e9},{200 + i % 50}" for i in range(n))
    (run_dir / "samples.csv").write_text("t,cpu_percent,rss_bytes,gpu_util_percent,gpu_mem_used_bytes,gpu_power_w\n" + rows + "\n")
    steps = [{"index": i, "t_start": 1100 + i, "t_end": 1100.9 + i, "duration_s": 0.9, "data_wait_s": 0.1,
              "optimizer_s": 0.01, "backward_s": 0.3, "samples": 64, "profiled": i > 1995, "loss": 2.0} for i in range(2000)]
    (run_dir / "steps.csv").write_text("index,t_start,t_end,profiled\n" + "\n".join(
        f"{s['index']},{s['t_start']},{s['t_end']},{s['profiled']}" for s in steps) + "\n")
    report = gold_report()
    report.update(steps=[{k: v for k, v in s.items() if not k.startswith("t_")} for s in steps],
                  artifacts={"report_json": "report.json", "samples_csv": "samples.csv", "steps_csv": "steps.csv"})
    profile = Profile.from_run_dir(run_dir)
    html = write_html(Report.of(report), run_dir, profile).read_text()
    assert len(html.encode()) < 500_000, len(html.encode())
    page = build_page(Report.of(report), profile)
    assert len(page.step_chart.bars) <= 3 * charts.MAX_STEP_BARS and "every 9th step shown" in page.step_chart.note
    assert len(page.timeline.bands) == 1  # one band for the measured window, not 2,000
    assert len(page.steps) == run_view.MAX_STEP_ROWS and "the first 200 of 2000 measured steps" in page.steps_summary


@pytest.mark.parametrize("key, value, text", [
    ("data_wait_frac", 0.4137, "41.4%"), ("data_wait_s", 0.0323, "32.3 ms"), ("kernel_us", 1500, "1.5 ms"),
    ("peak_allocated_bytes", 9.1 * 2**30, "9.10 GiB"), ("pageable_htod_bytes_per_step", 19267840, "18.4 MiB / step"),
    ("gpu_util_percent", 57.6, "58%"), ("n_params", 25557032, "25,557,032"), ("pin_memory", False, "no"),
    ("device_capability", "8.0", "8.0"), ("nothing", None, "–"), ("step_s", float("nan"), "–"),
])
def test_evidence_values_are_formatted_by_their_unit_suffix(key, value, text):
    assert fmt.by_suffix(key, value) == text


# --- real runs, the pipeline and the CLI -------------------------------------------------------

# A real training loop whose path, one op's name and one argument carry <script> and quotes.
HOSTILE_DIR = "q\"uo'te <script>alert('path')<"
HOSTILE_FILE = "script>.py"  # with the folder: .../<script>alert('path')</script>.py
HOSTILE_ARG = '--name=<script>alert("arg")</script>'
HOSTILE_OP = "<script>alert('op')</script>"  # no double quote: Kineto writes names into its JSON unescaped
HOSTILE_SCRIPT = f'''"""A training loop whose names are hostile: the report must show them as text."""
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset


def forward(ctx, x):
    return x * 2


def backward(ctx, grad):
    return grad * 2


# A custom autograd Function appears in the profiler trace as an op named after its class.
Hostile = type({HOSTILE_OP!r}, (torch.autograd.Function,), {{"forward": staticmethod(forward), "backward": staticmethod(backward)}})
print("argv:", sys.argv[1:])
torch.manual_seed(0)
data = TensorDataset(torch.randn(1024, 16), torch.randn(1024, 1))
model = torch.nn.Linear(16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for epoch in range(100):
    for x, y in DataLoader(data, batch_size=32):
        loss = ((Hostile.apply(model(x)) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
'''


@dataclass
class RealRun:
    run_dir: Path
    proc: subprocess.CompletedProcess
    step_summary: Path

    @property
    def html(self) -> str:
        return (self.run_dir / "report.html").read_text()


def _profile(root: Path, *args: str, summary: Path | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}
    if summary is not None:
        env["GITHUB_STEP_SUMMARY"] = str(summary)
    return subprocess.run(advise_cmd("profile", *args), cwd=root, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory) -> RealRun:
    root = tmp_path_factory.mktemp("hostile")
    (root / HOSTILE_DIR).mkdir()
    (root / HOSTILE_DIR / HOSTILE_FILE).write_text(HOSTILE_SCRIPT)
    summary = root / "step-summary.md"
    proc = _profile(root, *FAST, "--no-experiments", "--out", "run", f"{HOSTILE_DIR}/{HOSTILE_FILE}", HOSTILE_ARG,
                    summary=summary)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return RealRun(root / "run", proc, summary)


@pytest.fixture(scope="module")
def failed_run(tmp_path_factory) -> RealRun:
    root = tmp_path_factory.mktemp("failed")
    proc = _profile(root, *FAST, "--no-experiments", "--out", "run", str(WORKLOADS / "crash_at_step3.py"), summary=None)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    return RealRun(root / "run", proc, root / "none.md")


@pytest.mark.slow
def test_profile_writes_report_html_beside_report_json(hostile_run):
    assert (hostile_run.run_dir / "report.json").exists()
    assert f"html: run{os.sep}report.html" in hostile_run.proc.stdout
    size = len((hostile_run.run_dir / "report.html").read_bytes())
    assert size < MAX_NORMAL_BYTES, size
    text = text_of(hostile_run.html)
    assert "6 measured" in text and "samples/s" in text and "CPU (the script's processes" in text
    assert "aten::addmm" in text  # top ops from the run's own trace


@pytest.mark.slow
def test_a_hostile_workload_renders_as_text(hostile_run):
    html = hostile_run.html
    assert "<script>alert" not in html and html.count("<script") == 1
    text = text_of(html)
    assert HOSTILE_OP in text  # the op name, in the top-ops table
    assert HOSTILE_ARG in text  # the argument, in the command line
    assert "script>.py" in text and "alert('path')" in html.replace("&#39;", "'")
    md = hostile_run.step_summary.read_text()
    # in markdown, `<` is literal text inside a code span and escaped everywhere else
    outside_code = re.sub(r"(`+)(?:(?!\1).)+\1", "", md)
    assert "<script" not in outside_code and f"`{HOSTILE_OP}`" in md


@pytest.mark.slow
def test_github_step_summary_gets_the_markdown(hostile_run):
    md = hostile_run.step_summary.read_text()
    assert md.startswith("## advise: ok · `script>.py`")
    assert "| throughput | **" in md and "### Top CPU operators" in md


@pytest.mark.slow
def test_a_failed_real_run_gets_a_report(failed_run):
    text = text_of(failed_run.html)
    assert "The script failed." in text and "ValueError: planted failure at step 3" in text
    assert "The script's traceback" in text and "crash_at_step3.py" in text


@pytest.mark.slow
def test_advise_report_rerenders_without_running(hostile_run, tmp_path):
    run_dir = tmp_path / "copy"
    shutil.copytree(hostile_run.run_dir, run_dir)
    (run_dir / "report.html").unlink()
    proc = subprocess.run(advise_cmd("report", str(run_dir)), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(run_dir / "report.html")
    assert text_of((run_dir / "report.html").read_text()) == text_of(hostile_run.html)
    md = subprocess.run(advise_cmd("report", str(run_dir), "--format", "markdown"), capture_output=True, text=True, timeout=120)
    assert md.returncode == 0 and md.stdout == hostile_run.step_summary.read_text().rstrip("\n") + "\n"


@pytest.fixture(scope="module")
def measured_run(tmp_path_factory) -> RealRun:
    """A real starved run with its experiments (one fix, confirmed): every figure of its page has a source."""
    root = tmp_path_factory.mktemp("measured")
    proc = _profile(root, "--steps", "8", "--warmup", "2", "--profile-steps", "3", "--max-experiments", "1",
                    "--out", "run", str(WORKLOADS / "starved_io.py"), summary=None)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return RealRun(root / "run", proc, root / "none.md")


def _report_figures(report: dict) -> tuple[set[str], set[str]]:
    """Every samples/s figure and every speedup (×, two decimals) report.json holds, as the page spells them."""
    rates, speedups = set(), set()

    def rate(x):
        if isinstance(x, (int, float)):
            rates.add(units.rate(x, "samples/s"))

    def ratio(*xs):
        for x in xs:
            if isinstance(x, (int, float)):
                speedups.add(units.speedup(x))

    rate((report.get("throughput") or {}).get("samples_per_s"))
    measured = [f["experiment"] for f in report["findings"] if f.get("experiment")]
    measured += [report["recommended"]] if report.get("recommended") else []
    for m in measured:
        ratio(m.get("speedup"), m.get("ci_low"), m.get("ci_high"))
        for side in ("baseline", "candidate"):
            rate((m.get(side) or {}).get("samples_per_s"))
        for point in m.get("sweep") or []:
            ratio(point.get("speedup"), point.get("ci_low"), point.get("ci_high"))
    return rates, speedups


@pytest.mark.slow
def test_every_figure_on_a_real_page_matches_report_json(measured_run):
    """The key figures of a real run's page, both ways: each report.json figure is on the page, and each
    throughput and speedup on the page is one of report.json's."""
    report = json.loads((measured_run.run_dir / "report.json").read_text())
    html = measured_run.html
    text = text_of(html)
    tp, steps = report["throughput"], report["steps"]
    profiled = sum(1 for s in steps if s["profiled"])
    # --profile-steps 3: exactly three, marked so; or, where the other test worker disturbed the measured
    # window, the steps are a quiet window's measured after it (experiments/look.py), none of them profiled
    quiet = report["steps_window"] == "quiet"
    assert profiled == (0 if quiet else 3)
    # headline numbers
    assert f"throughput {units.rate(tp['samples_per_s'], 'samples/s')} over {tp['n_steps']} steps outside the profiler" in text
    assert f"{units.time_s(tp['step_time_median_s'])} median p90 {units.time_s(tp['step_time_p90_s'])}" in text
    assert f"steps {len(steps)} measured" in text
    assert (f"{len(steps)} measured steps of a quiet window measured after the profiled one" if quiet
            else f"({profiled} under the profiler") in text
    assert "over 3 profiled steps" in text  # the top-ops caption rests on the trace's steps, whichever window
    bd = report["breakdown"]
    assert f"data wait {units.frac(bd['data_wait_frac'])}" in text
    mem = report["memory"]
    assert mem["basis"] in ("pss", "rss")
    assert f"peak memory {units.bytes_(mem['peak_' + mem['basis'] + '_bytes'])}" in text
    # the findings and what was measured
    for f in report["findings"]:
        assert f"{f['code']} " in text and f["title"] in text
        exp = f["experiment"]
        if exp and exp.get("speedup") is not None:
            assert fmt.speedup_words(exp["speedup"]) in text and fmt.interval(exp["ci_low"], exp["ci_high"]) in text
    # recommended: on the page exactly when report.json has one
    rec = report["recommended"]
    assert ("Recommended configuration" in html) == (rec is not None)
    if rec is not None:
        assert f"{units.rate(rec['baseline']['samples_per_s'], 'samples/s')} → {units.rate(rec['candidate']['samples_per_s'], 'samples/s')}" in text
    # the footer: the whole run, and its parts
    assert f"took {units.time_s(report['total_wall_s'])} in all (the profiled run {units.time_s(report['wall_s'])}" in text
    # and the other way round: no throughput or speedup on the page that report.json does not hold
    rates, speedups = _report_figures(report)
    on_page_rates = set(re.findall(r"\d[\d,]*\.\d samples/s|\d[\d,]{4,} samples/s", text))
    assert on_page_rates and on_page_rates <= rates, on_page_rates - rates
    on_page_speedups = {m + "×" for m in re.findall(r"(?<![\d.–])(\d+\.\d\d)×", text)}
    on_page_speedups |= {m + "×" for pair in re.findall(r"(\d+\.\d\d)–(\d+\.\d\d)×", text) for m in pair}
    assert on_page_speedups <= speedups, on_page_speedups - speedups
    # the terminal said the same
    out = measured_run.proc.stdout
    assert units.rate(tp["samples_per_s"], "samples/s") in out and f"{len(steps)} measured" in out


def test_advise_report_on_a_dir_without_a_report_is_a_usage_error(tmp_path):
    proc = subprocess.run(advise_cmd("report", str(tmp_path)), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"advise: error: {tmp_path / 'report.json'}: no such file"


def test_advise_report_renders_the_gold_run_dir(tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(GOLD_RUN, run_dir)
    proc = subprocess.run(advise_cmd("report", str(run_dir / "report.json")), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "recommended configuration" in (run_dir / "report.html").read_text()


# --- in a real browser -------------------------------------------------------------------------

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium through Selenium, logging the console and the network."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install -e '.[test]')")
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.skip(f"no headless browser: {CHROMIUM} / {CHROMEDRIVER} missing (run .ci/install-browser)")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,900",
                "--hide-scrollbars", "--no-first-run"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


@dataclass
class Loaded:
    console: list[dict]
    requests: list[str]
    resources: list[str]


def open_page(browser, path: Path, scheme: str = "light") -> Loaded:
    browser.get_log("browser"), browser.get_log("performance")  # drop what earlier pages left
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": "", "features": [{"name": "prefers-color-scheme", "value": scheme}]})
    browser.get(path.as_uri())
    browser.execute_script("return document.readyState")
    requests = []
    for entry in browser.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg["method"] == "Network.requestWillBeSent" and msg["params"].get("type") != "Document":
            requests.append(msg["params"]["request"]["url"])
    return Loaded(console=[e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "WARNING")],
                  requests=requests,
                  resources=browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)"))


def screenshot(browser, path: Path) -> Path:
    """The whole page as a PNG (not just the window)."""
    size = browser.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    shot = browser.execute_cdp_cmd("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                                                             "clip": {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}})
    path.write_bytes(base64.b64decode(shot["data"]))
    return path


def assert_sections_visible(browser):
    from selenium.webdriver.common.by import By

    for section in SECTIONS:
        element = browser.find_element(By.ID, section)
        assert element.is_displayed() and element.size["height"] > 20, section


def test_chromium_shows_the_full_report_offline(browser, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(GOLD_RUN, run_dir)
    page = write_html(Report.of(gold_report()), run_dir, Profile.from_run_dir(run_dir), gold_docs())
    for scheme in ("light", "dark"):
        loaded = open_page(browser, page, scheme)
        assert loaded.console == [] and loaded.requests == [] and loaded.resources == []
        assert_sections_visible(browser)
        assert browser.execute_script("return document.querySelectorAll('svg rect.data').length") == 20
        assert browser.execute_script("return document.querySelectorAll('#timeline polyline').length") == 5
        assert browser.execute_script("return document.querySelectorAll('article.finding').length") == 6
        png = screenshot(browser, tmp_path / f"report-{scheme}.png")
        assert png.stat().st_size > 50_000
    background = browser.execute_script("return getComputedStyle(document.documentElement).backgroundColor")
    assert background == "rgb(13, 17, 23)"  # dark, from prefers-color-scheme


def test_chromium_prints_it(browser, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(GOLD_RUN, run_dir)
    open_page(browser, write_html(Report.of(gold_report()), run_dir, Profile.from_run_dir(run_dir), gold_docs()))
    pdf = base64.b64decode(browser.execute_cdp_cmd("Page.printToPDF", {"printBackground": True})["data"])
    assert pdf.startswith(b"%PDF") and len(pdf) > 20_000
    (tmp_path / "report.pdf").write_bytes(pdf)
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": "print"})
    assert browser.execute_script("return getComputedStyle(document.querySelector('nav.toc')).display") == "none"
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": ""})


@pytest.mark.slow
def test_chromium_shows_a_real_hostile_run_as_text(browser, hostile_run, tmp_path):
    from selenium.webdriver.common.by import By

    loaded = open_page(browser, hostile_run.run_dir / "report.html")
    assert loaded.console == [] and loaded.requests == [] and loaded.resources == []
    assert browser.execute_script("return document.scripts.length") == 1  # no alert() ran: an open alert would fail every call
    assert_sections_visible(browser)
    assert HOSTILE_OP in browser.find_element(By.ID, "ops").text
    assert HOSTILE_ARG in browser.find_element(By.CSS_SELECTOR, ".command").text
    assert browser.find_element(By.CSS_SELECTOR, "h1").text == HOSTILE_FILE
    screenshot(browser, tmp_path / "hostile-run.png")


@pytest.mark.slow
def test_chromium_shows_a_failed_run(browser, failed_run, tmp_path):
    from selenium.webdriver.common.by import By

    loaded = open_page(browser, failed_run.run_dir / "report.html")
    assert loaded.console == [] and loaded.requests == []
    assert browser.find_element(By.ID, "failure").is_displayed()
    assert "ValueError: planted failure at step 3" in browser.find_element(By.CSS_SELECTOR, ".verdict .error").text
    screenshot(browser, tmp_path / "failed-run.png")


def _header_gain(browser) -> str:
    from selenium.webdriver.common.by import By

    return browser.find_element(By.CSS_SELECTOR, ".headline .gain").text


@pytest.mark.parametrize("with_recommendation", [True, False], ids=["recommended", "none"])
def test_chromium_shows_the_recommendation_only_when_report_json_has_one(browser, tmp_path, with_recommendation):
    """The header's "recommended configuration" and the Experiments block agree with report.json."""
    from selenium.webdriver.common.by import By

    report = gold_report()
    if not with_recommendation:
        report["recommended"] = None
    run_dir = tmp_path / "run"
    shutil.copytree(GOLD_RUN, run_dir)
    open_page(browser, write_html(Report.of(report), run_dir, Profile.from_run_dir(run_dir), gold_docs()))
    blocks = browser.find_elements(By.CSS_SELECTOR, "#experiments .recommended")
    gain = _header_gain(browser)
    if with_recommendation:
        assert len(blocks) == 1 and blocks[0].is_displayed()
        assert gain == "1.80× faster (95% CI 1.66–1.93×), verified"
        assert gain.split(",")[0] in blocks[0].text  # the same measurement, both places
    else:
        assert blocks == [] and "Recommended configuration" not in browser.find_element(By.ID, "experiments").text
        assert gain.startswith("none: ") and "faster" not in gain.replace("none faster", "")
    caption = browser.find_element(By.CSS_SELECTOR, "#experiments p.caption").text
    assert "verified means the whole 95% interval lies more than 3% above 1" in caption
    for row in browser.find_elements(By.CSS_SELECTOR, "#experiments tbody tr"):  # verified rows: low end clears the bar
        cells = [c.text for c in row.find_elements(By.TAG_NAME, "td")]
        if cells[6] == "verified":
            assert float(cells[5].split("–")[0]) > 1.03, cells
        assert cells[3].strip(), cells  # never an empty candidate: a figure, or a dash and why


@pytest.mark.slow
def test_chromium_shows_a_real_measured_run_as_report_json_says(browser, measured_run):
    from selenium.webdriver.common.by import By

    report = json.loads((measured_run.run_dir / "report.json").read_text())
    loaded = open_page(browser, measured_run.run_dir / "report.html")
    assert loaded.console == [] and loaded.requests == []
    assert_sections_visible(browser)
    blocks = browser.find_elements(By.CSS_SELECTOR, "#experiments .recommended")
    assert len(blocks) == (1 if report["recommended"] else 0)
    if report["recommended"]:
        assert fmt.speedup_words(report["recommended"]["speedup"]) in _header_gain(browser)
    else:
        assert _header_gain(browser).startswith("none: ")


def test_copy_button_does_not_raise(browser, tmp_path):
    from selenium.webdriver.common.by import By

    run_dir = tmp_path / "run"
    shutil.copytree(GOLD_RUN, run_dir)
    open_page(browser, write_html(Report.of(gold_report()), run_dir, Profile.from_run_dir(run_dir), gold_docs()))
    button = browser.find_element(By.CSS_SELECTOR, ".snippet .copy")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", button)
    button.click()
    from selenium.webdriver.support.ui import WebDriverWait

    label = WebDriverWait(browser, 5).until(lambda d: d.execute_script(
        "return arguments[0].textContent != 'copy' && arguments[0].textContent", button))
    assert label in ("copied", "selected")
    assert [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "WARNING")] == []


def test_view_model_dataclasses_are_plain_data():
    """Templates get view models, never raw dicts or DataFrames (coverage.py's IndexPage discipline)."""
    import dataclasses

    page = gold_page(copy.deepcopy(gold_report()))

    def walk(obj):
        if dataclasses.is_dataclass(obj):
            for f in dataclasses.fields(obj):
                walk(getattr(obj, f.name))
        elif isinstance(obj, (list, tuple)):
            for x in obj:
                walk(x)
        else:
            assert isinstance(obj, (str, int, float, bool, type(None))), type(obj)

    walk(page)
