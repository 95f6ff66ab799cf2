"""The rule engine: the catalogue documents itself, settings are validated, plugins load or warn.

Each rule's findings on real data (recorded GPU traces, probe-shaped profiles, real scripts) live
in its own file, tests/rules/test_<code>.py; test_rules_zoo.py profiles the planted-bottleneck
scripts for real with every rule on.
"""

from __future__ import annotations

import ast
import json
import subprocess
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from advisor.engine import ConfigError, Settings, load_settings, resolve, run_rules, settings_from_table
from advisor.profile import Profile
from advisor import overrides as vocabulary
from advisor.framework import words as framework_words
from advisor.model import Experiment, rank
from advisor.rules.registry import (REQUIRED_SECTIONS, Finding, Fix, doc_problems,
                                    documented_defaults, documented_options, load_rules, rule, section)
from conftest import advise_cmd


def run_rules_json(*args, **kwargs):
    """run_rules, its findings as report.json has them (the serialised contract)."""
    found, warnings = run_rules(*args, **kwargs)
    return [f.to_dict() for f in found], warnings

CATALOGUE = load_rules()
RULES = CATALOGUE.rules
CONTRACT_NAMES = {"dataloader-starvation", "fp32-matmul", "memory-headroom", "idle-gpu", "host-sync", "pageable-memcpy",
                  "launch-bound", "cudnn-benchmark", "unfused-optimizer"}


# --------------------------------------------------------------------------- the catalogue


def test_every_rule_named_in_the_contract_exists():
    assert CONTRACT_NAMES <= {r.name for r in RULES}
    assert len({r.code for r in RULES}) == len(RULES) == len({r.name for r in RULES})
    assert not CATALOGUE.warnings


RULE_TESTS = Path(__file__).parent / "rules"


def _test_functions(path: Path) -> list[str]:
    return [n.name for n in ast.parse(path.read_text()).body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]


@pytest.mark.parametrize("r", [r for r in RULES if r.origin == "advise"], ids=lambda r: r.code)
def test_every_rule_has_its_test_home(r):
    """A rule's tests live in one file named by its code, as ruff keeps one fixture set per rule: a
    rule registered without one fails here, naming the file to write."""
    home = RULE_TESTS / f"test_{r.code.lower()}.py"
    assert home.is_file(), f"{r.code} ({r.name}) has no tests: write tests/rules/{home.name}"
    assert _test_functions(home), f"tests/rules/{home.name} holds no test"
    assert r.code in home.read_text(), f"tests/rules/{home.name} never names {r.code}"


def test_every_test_file_under_rules_names_a_registered_rule():
    """The converse: a rule removed or renumbered leaves no test file behind under its old code."""
    homes = {p.stem.removeprefix("test_").upper() for p in RULE_TESTS.glob("test_*.py")}
    assert homes and homes <= {r.code for r in RULES}, sorted(homes - {r.code for r in RULES})


@pytest.mark.parametrize("r", RULES, ids=lambda r: r.code)
def test_rule_documents_itself_like_ruff(r):
    assert doc_problems(r) == [], r.doc[:200]
    for header in REQUIRED_SECTIONS:
        assert section(r.doc, header).strip(), f"{r.code}: empty {header}"
    assert r.summary.endswith(".") and "\n" not in r.summary and len(r.summary) < 120
    assert r.module.split(".")[-1].startswith(r.code.lower() + "_"), "module file = code + snake name"
    assert r.module.split(".")[-1] == f"{r.code.lower()}_{r.name.replace('-', '_')}"


@pytest.mark.parametrize("r", RULES, ids=lambda r: r.code)
def test_rule_options_are_documented_with_their_real_defaults(r):
    assert documented_options(r.doc) == [o.key for o in r.options]
    assert documented_defaults(r.doc) == r.defaults_by_key()


@pytest.mark.parametrize("r", RULES, ids=lambda r: r.code)
def test_rule_is_silent_on_an_empty_profile(r):
    assert r.run(Profile(steps=pd.DataFrame())) == []


def test_doc_checker_catches_missing_sections_and_stale_options():
    @rule(code="ZZ001", name="made-up")
    def check(profile, *, depth: int = 3):
        return []

    check.doc = "## What it does\nX.\n## Why is this bad?\nY.\n## Example\nno alternative\n## Options\n- `width` (default 2)"
    problems = doc_problems(check)
    check.doc = check.doc.replace("`width` (default 2)", "`depth` (default 4)")
    assert doc_problems(check)[-1] == "'## Options' says depth defaults to 4, the rule uses 3"
    assert "missing section '## Fix safety'" in problems
    assert "'## Example' has no 'Use instead:'" in problems
    assert any("lists ['width'] but the rule takes ['depth']" in p for p in problems)


def test_bad_rule_identity_is_refused_at_definition():
    with pytest.raises(ValueError, match="code"):
        rule(code="dl1", name="x")
    with pytest.raises(ValueError, match="kebab-case"):
        rule(code="DL009", name="Bad_Name")


# --------------------------------------------------------------------------- findings


def _finding(**kw) -> Finding:
    base = dict(title="t", summary="s", severity="low", evidence={}, fix=Fix.unsafe("f", {"compile": True}))
    base.update(kw)
    return Finding(**base)


@pytest.mark.parametrize("overrides, ok", [
    ({"dataloader": {"num_workers": 4, "pin_memory": True, "persistent_workers": True, "prefetch_factor": 2}}, True),
    ({"autocast": "bfloat16"}, True), ({"autocast": "float16"}, True), ({"float32_matmul_precision": "high"}, True),
    ({"cudnn_benchmark": True}, True), ({"batch_size_scale": 2}, True), ({"optimizer": {"fused": True}}, True),
    ({"optimizer": {"foreach": True}}, True), ({"compile": True}, True), ({"channels_last": True}, True),
    ({"torch_threads": 1}, True), ({"zero_grad_set_to_none": True}, True), ({"zero_grad_set_to_none": False}, False),
    ({"batch_size_scale": 0.5}, True), ({"activation_checkpointing": True}, True),
    ({"batch_size_scale": 0.3}, False), ({"activation_checkpointing": "yes"}, False),
    ({"dataloader": {"num_workers": "4"}}, False), ({"dataloader": {"workers": 4}}, False), ({"autocast": "fp8"}, False),
    ({"batch_size_scale": 1.5}, False), ({"optimizer": {"fused": False}}, False), ({"env": {"X": "1"}}, False),
])
def test_overrides_use_only_the_experiments_vocabulary(overrides, ok):
    problem = _finding(fix=Fix.unsafe("f", overrides)).problem()
    assert (problem is None) == ok, problem
    from advisor.probe.switches import SWITCH_TYPES

    assert all(vocabulary.VOCABULARY[key].switch in SWITCH_TYPES for key in vocabulary.KEYS)  # each has its switch


def test_every_vocabulary_key_has_a_snippet_and_a_description():
    for knob in vocabulary.VOCABULARY.values():
        assert knob.description and knob.snippet is not None
    assert "num_workers=8" in framework_words.snippet("dataloader", {"num_workers": 8})
    assert framework_words.snippet("torch_threads", 2) == "+ torch.set_num_threads(2)"


def test_contract_shape_of_a_finding():
    d = _finding(estimated_gain_frac=0.2).to_dict()
    assert list(d) == ["rule", "code", "severity", "title", "summary", "evidence", "estimated_gain_frac", "fix", "experiment",
                     "locations"]  # schema 1 gained it: where in the user's code, [] when unknown
    assert d["locations"] == []
    assert set(d["fix"]) == {"title", "kind", "applicability", "snippet", "overrides"} and d["experiment"] is None
    assert d["evidence"]["estimated_gain_frac"] == 0.2  # schema 1 kept it in the evidence: it stays there too
    assert Finding.from_dict(d) == _finding(estimated_gain_frac=0.2)
    assert Fix(title="f", kind="automatic").problem() == "an automatic fix needs overrides"


def test_a_typo_in_a_severity_or_fix_kind_is_an_error_not_silence():
    with pytest.raises(ValueError, match="severity 'urgent'"):
        _finding(severity="urgent")
    with pytest.raises(ValueError, match="fix kind 'automatik'"):
        Fix(title="f", kind="automatik")


def test_findings_rank_by_estimated_gain_then_severity():
    rows = [_finding(severity="low", estimated_gain_frac=0.9, code="A"), _finding(severity="high", code="B"),
            _finding(severity="high", estimated_gain_frac=0.3, code="C"),
            _finding(severity="medium", estimated_gain_frac=0.1, code="D")]
    assert [f.code for f in rank(rows)] == ["A", "C", "D", "B"]


def test_findings_rank_measured_gains_first():
    def measured(code, speedup, verified):
        return _finding(code=code, severity="low", experiment=Experiment("faster" if verified else "no-significant-change",
                                                                        verified=verified, speedup=speedup))
    rows = [_finding(code="E", severity="high", estimated_gain_frac=0.5), measured("U", 1.2, False),
            measured("V", 1.1, True), measured("S", 0.8, False), measured("W", 2.0, True)]
    assert [f.code for f in rank(rows)] == ["W", "V", "U", "E", "S"]


def test_a_crashing_rule_is_a_warning_not_a_crash(monkeypatch):
    victim = CATALOGUE.find("DL001")

    def boom(profile, **kw):
        raise RuntimeError("planted\nsecond line")

    monkeypatch.setattr(victim, "func", boom)
    steps = pd.DataFrame({"index": [0], "duration_s": [1.0], "data_wait_s": [0.9], "profiled": [False]})
    findings, warnings = run_rules_json(Profile(steps=steps), catalogue=CATALOGUE)
    assert findings == [] and warnings == ["rule DL001 (dataloader-starvation) failed: RuntimeError: planted"]


# --------------------------------------------------------------------------- settings


@pytest.mark.parametrize("keys, expected", [
    (["DL001"], {"DL001"}), (["dataloader-starvation"], {"DL001"}), (["dl"], {r.code for r in RULES if r.prefix == "DL"}),
    (["GPU00"], {r.code for r in RULES if r.code[:5] == "GPU00"}), (["ALL"], {r.code for r in RULES}),
])
def test_select_by_code_prefix_name_or_all(keys, expected):
    assert {r.code for r in resolve(keys, CATALOGUE, "--select")} == expected


def test_cli_select_replaces_and_ignore_extends_the_config(tmp_path):
    (tmp_path / "pyproject.toml").write_text(textwrap.dedent("""
        [project]
        name = "x"
        [tool.advise]
        select = ["DL", "PR"]
        ignore = ["DL003"]
        [tool.advise.dataloader-starvation]
        min-wait-frac = 0.2
        min_wait_ms = 10
    """))
    (tmp_path / "sub").mkdir()
    s = load_settings(config=None, search_from=tmp_path / "sub", catalogue=CATALOGUE)
    assert s.select == ["DL", "PR"] and s.ignore == ["DL003"] and s.source == str(tmp_path / "pyproject.toml")
    assert s.options == {"dataloader-starvation": {"min_wait_frac": 0.2, "min_wait_ms": 10.0}}
    s = load_settings(config=None, search_from=tmp_path, select=["GPU001,idle-gpu"], ignore=["PR001"], catalogue=CATALOGUE)
    assert s.select == ["GPU001", "idle-gpu"] and s.ignore == ["DL003", "PR001"]


def test_a_dedicated_config_file_has_no_tool_prefix(tmp_path):
    path = tmp_path / "advise.toml"
    path.write_text('ignore = ["MEM001"]\n[fp32-matmul]\nmin-kernel-frac = 0.5\n')
    s = load_settings(config=path, search_from=None, catalogue=CATALOGUE)
    assert s.ignore == ["MEM001"] and s.options == {"fp32-matmul": {"min_kernel_frac": 0.5}}


@pytest.mark.parametrize("table, message", [
    ({"selekt": ["DL"]}, "unknown key 'selekt'"),
    ({"select": ["XX9"]}, "select: unknown rule, code or prefix 'XX9'"),
    ({"select": "DL001", "ignore": [3]}, "'ignore' must be a list"),
    ({"dataloader-starvation": {"min-wait": 1}}, "rule dataloader-starvation has no option 'min-wait'"),
    ({"dataloader-starvation": {"min-wait-frac": "high"}}, "dataloader-starvation.min-wait-frac expects float"),
    ({"launch-bound": {"min-kernels-per-step": 2.5}}, "launch-bound.min-kernels-per-step expects int"),
])
def test_bad_settings_are_one_line_errors(table, message):
    with pytest.raises(ConfigError) as err:
        settings_from_table(table, CATALOGUE, "pyproject.toml")
    assert message in str(err.value) and "\n" not in str(err.value)


def test_options_reach_the_rule():
    steps = pd.DataFrame({"index": range(4), "duration_s": [0.1] * 4, "data_wait_s": [0.02] * 4, "profiled": [False] * 4})
    profile = Profile(steps=steps, env={"device": "cpu", "cpu_count": 8, "torch_threads": 8})
    (finding,), _ = run_rules_json(profile, Settings(select=["DL001"]), CATALOGUE)  # 20 ms of a 100 ms step
    assert finding["rule"] == "dataloader-starvation" and finding["evidence"]["data_wait_frac"] == pytest.approx(0.2)
    for options in ({"min_wait_ms": 50.0}, {"min_wait_frac": 0.25}):
        assert run_rules_json(profile, Settings(select=["DL001"], options={"dataloader-starvation": options}), CATALOGUE)[0] == []


# --------------------------------------------------------------------------- the CLI


def _run(*args, env_path=None, cwd=None):
    """`advise ARGS` in a real subprocess (needed where the installed packages must differ)."""
    env = None
    if env_path is not None:
        import os

        env = dict(os.environ, PYTHONPATH=str(env_path))
    return subprocess.run(advise_cmd(*args), capture_output=True, text=True, cwd=cwd, env=env, timeout=120)


def _cli(*args, cwd=None):
    """`advise ARGS` in-process through click's runner: same code path, no interpreter start-up."""
    from click.testing import CliRunner

    from advisor.commands.cli import main

    runner = CliRunner()
    if cwd is None:
        return runner.invoke(main, list(args))
    import os

    old = os.getcwd()
    os.chdir(cwd)
    try:
        return runner.invoke(main, list(args))
    finally:
        os.chdir(old)


def test_advise_rules_lists_the_catalogue_and_prints_one_rule():
    listing = _cli("rules")
    assert listing.exit_code == 0, listing.stderr
    lines = listing.stdout.splitlines()
    first = min(RULES, key=lambda r: r.code)
    assert len(lines) == len(RULES) and lines[0].split()[:2] == [first.code, first.name]  # code order
    assert ["DL001", "dataloader-starvation"] in [line.split()[:2] for line in lines]
    for code in ("DL001", "fp32-matmul"):
        one = _cli("rules", code)
        r = CATALOGUE.find(code)
        assert one.exit_code == 0 and one.stdout.startswith(f"# {r.name} ({r.code})\n")
        assert r.doc.strip() in one.stdout
    as_json = json.loads(_cli("rules", "--json").stdout)
    assert {d["code"] for d in as_json} == {r.code for r in RULES}


@pytest.mark.parametrize("args, message", [
    (["rules", "NOPE001"], "unknown rule 'NOPE001'"),
    (["analyze", "{trace}", "--select", "DL001,XX9"], "--select: unknown rule, code or prefix 'XX9'"),
    (["analyze", "{trace}", "--ignore", "nonsense-rule"], "--ignore: unknown rule, code or prefix 'nonsense-rule'"),
    (["analyze", "{trace}", "--config", "{bad}"], "unknown key 'selct'"),
    (["analyze", "{trace}", "--config", "{missing}"], "no such config file"),
    (["analyze", "{trace}", "--config", "{not_a_table}"], "[tool.advise] must be a table"),
    (["analyze", "{trace}", "--config", "{rule_not_a_table}"],
     "[tool.advise.dataloader-starvation] must be a table of the rule's options, not 0.2"),
])
def test_bad_selection_or_config_is_one_line_and_exit_2(tmp_path, args, message):
    trace = tmp_path / "t.json"
    trace.write_text('{"traceEvents": []}')
    bad = tmp_path / "advise.toml"
    bad.write_text('selct = ["DL"]\n')
    not_a_table = tmp_path / "pyproject.toml"
    not_a_table.write_text('[tool]\nadvise = "ALL"\n')
    rule_not_a_table = tmp_path / "rule.toml"
    rule_not_a_table.write_text("dataloader-starvation = 0.2\n")
    args = [a.format(trace=trace, bad=bad, missing=tmp_path / "none.toml", not_a_table=not_a_table,
                     rule_not_a_table=rule_not_a_table) for a in args]
    r = _cli(*args)
    assert r.exit_code == 2, r.stderr
    assert message in r.stderr and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


def _fake_distribution(root, name: str, module: str, source: str, entry: str):
    """A real installed-looking package: a module plus NAME.dist-info with an entry point."""
    (root / f"{module}.py").write_text(textwrap.dedent(source))
    info = root / f"{name.replace('-', '_')}-1.0.dist-info"  # wheel convention: the stem ends at the first "-"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[advisor.rules]\n{entry}\n")


def test_third_party_rules_load_through_the_entry_point_group(tmp_path):
    _fake_distribution(tmp_path, "advise-extra", "advise_extra", '''
        """## What it does
        Flags every run.

        ## Why is this bad?
        It is a test.

        ## Example
        ```python
        pass
        ```

        Use instead:
        ```python
        pass
        ```

        ## Fix safety
        Display-only.

        ## Options
        - `level` (default 1): unused.
        """
        from advisor.rules.registry import Finding, Fix, rule

        @rule(code="EXT001", name="always-here")
        def check(profile, *, level: int = 1):
            yield Finding(title="extra", summary="s", severity="low", evidence={"level": level},
                          fix=Fix(title="nothing"))
        ''', "extra = advise_extra")
    _fake_distribution(tmp_path, "advise-broken", "advise_broken", "import not_a_module_anywhere\n",
                       "broken = advise_broken")
    r = _run("rules", env_path=tmp_path)
    assert r.returncode == 0
    assert "EXT001   always-here" in r.stdout and "[advise-extra 1.0]" in r.stdout
    warning = r.stderr.strip().splitlines()
    assert warning == ["advise: warning: rule plugin 'broken' from package advise-broken 1.0 failed to load: "
                       "ModuleNotFoundError: No module named 'not_a_module_anywhere'"]
    one = _run("rules", "always-here", env_path=tmp_path)
    assert one.returncode == 0 and "## What it does" in one.stdout


def test_rules_run_on_analyze_and_can_be_narrowed(tmp_path):
    from conftest import trace_path

    trace = trace_path("kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz")
    everything = _cli("analyze", str(trace), "--json")
    assert everything.exit_code == 0, everything.stderr
    codes = [f["code"] for f in json.loads(everything.stdout)["findings"]]
    assert {"DL001", "PR001"} <= set(codes)
    narrowed = _cli("analyze", str(trace), "--json", "--select", "DL,PR", "--ignore", "DL002")
    assert {f["code"] for f in json.loads(narrowed.stdout)["findings"]} == {"DL001", "PR001"}
    (tmp_path / "pyproject.toml").write_text('[tool.advise]\nselect = ["fp32-matmul"]\n')
    configured = _cli("analyze", str(trace), "--json", cwd=tmp_path)
    assert [f["code"] for f in json.loads(configured.stdout)["findings"]] == ["PR001"]


# --------------------------------------------------------------------------- CPU-side rules on small real profiles


