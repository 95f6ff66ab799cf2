"""`advise apply`: the recommendation written into the user's own code, as a patch that applies.

Each fix kind is written into a real script the probe ran (tests/workloads/apply): the workloads are
profiled for real, so the lines each fix edits are the ones the probe recorded, and each test then
sets the recommendation it is about in a copy of the run dir (what the CPU experiments would
recommend on a given day is the experiments' business; which lines a fix edits is this one's). The
patch must `git apply --check` in a clone of the checkout, the patched script must run, and the fix
must be in effect in its own output (the workloads print what they ran with); the lines around
stay as they were, comments included.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FAST, NO_SCREENS, WORKLOADS, advise_cmd

APPLY = WORKLOADS / "apply"
FRAMEWORKS = WORKLOADS / "frameworks"
COMMITTER = ["-c", "user.name=advise tests", "-c", "user.email=tests@advise.invalid"]


def git(cwd: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *COMMITTER, *args], cwd=cwd, input=stdin, capture_output=True, text=True, timeout=60)


def checkout(root: Path, sources: list[Path]) -> Path:
    """A git checkout at `root` holding `sources` (files, or folders' contents), committed."""
    root.mkdir(parents=True, exist_ok=True)
    for source in sources:
        if source.is_dir():
            shutil.copytree(source, root, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, root)
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "the user's code"]):
        assert git(root, *args).returncode == 0
    return root


def profile(root: Path, script: str, *flags: str, out: str | None = None, timeout: float = 300) -> Path:
    """`advise profile FLAGS SCRIPT` run in `root` for real: its run dir."""
    run = root / (out or f"run-{Path(script).stem}")
    proc = subprocess.run(advise_cmd("profile", *flags, "--out", run.name, script), cwd=root, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run


def recommend(run: Path, overrides: dict, into: Path, **edit) -> Path:
    """A copy of run dir `run` whose report recommends `overrides` (measured 2.0x, 1.8-2.2x); `edit`
    replaces top-level fields of the copy's report."""
    shutil.copytree(run, into)
    report = json.loads((into / "report.json").read_text())
    report["recommended"] = {"fixes": ["set-by-the-test"], "overrides": overrides, "verified": True,
                             "speedup": 2.0, "ci_low": 1.8, "ci_high": 2.2}
    report.update(edit)
    (into / "report.json").write_text(json.dumps(report, indent=2))
    return into


def advise_apply(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(advise_cmd("apply", *args), cwd=cwd, capture_output=True, text=True, timeout=600)


def patched_clone(root: Path, patch: str, into: Path) -> Path:
    """A clone of the checkout at `root` with `patch` applied by git from its root."""
    assert git(root, "clone", "-q", str(root), str(into)).returncode == 0
    checked = git(into, "apply", "--check", "-", stdin=patch)
    assert checked.returncode == 0, checked.stderr + patch
    assert git(into, "apply", "-", stdin=patch).returncode == 0
    return into


def run_script(folder: Path, script: str, *args: str, env: dict | None = None) -> str:
    proc = subprocess.run([sys.executable, script, *args], cwd=folder, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def changed_lines(patch: str) -> tuple[list[str], list[str]]:
    """(the lines the patch removes, the lines it adds), without their markers."""
    body = [line for line in patch.splitlines() if not line.startswith(("---", "+++"))]
    return [line[1:] for line in body if line.startswith("-")], [line[1:] for line in body if line.startswith("+")]


def the_rest_is_kept(before: str, after: str, removed: list[str]) -> None:
    """Every line of `before` the patch did not remove is in `after`, in order, as it was (comments too)."""
    kept = [line for line in before.splitlines() if line not in removed]
    it = iter(after.splitlines())
    missing = [line for line in kept if not any(line == other for other in it)]
    assert not missing, missing


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A git checkout of tests/workloads/apply, its two scripts profiled once for real (no experiments)."""
    root = checkout(tmp_path_factory.mktemp("apply") / "project", [APPLY])
    for script in ("train_target.py", "train_refused.py", "train_ctx.py"):
        profile(root, script, *FAST)
    return root


def fix_in_effect(project: Path, tmp_path: Path, overrides: dict, env: dict | None = None) -> tuple[str, str]:
    """Recommend `overrides` for train_target.py, apply the patch in a clone, run it: (patch, its output)."""
    run = recommend(project / "run-train_target", overrides, tmp_path / "run")
    result = advise_apply(str(run), cwd=project)
    assert result.returncode == 0, result.stderr
    assert result.stderr == "", result.stderr  # nothing refused
    clone = patched_clone(project, result.stdout, tmp_path / "clone")
    before = (project / "train_target.py").read_text()
    removed, _ = changed_lines(result.stdout)
    the_rest_is_kept(before, (clone / "train_target.py").read_text(), removed)
    return result.stdout, run_script(clone, "train_target.py", "--steps", "3", env=env)


# --- the edits themselves: a call's own layout, comments kept ---------------------------------------

LAYOUTS = [  # (the user's call, after num_workers=2 and persistent_workers=True are set on it)
    ("loader = DataLoader(ds, batch_size=16)\n",
     "loader = DataLoader(ds, batch_size=16, num_workers=2, persistent_workers=True)\n"),
    ("loader = DataLoader(ds, num_workers=args.workers)  # from the command line\n",
     "loader = DataLoader(ds, num_workers=2, persistent_workers=True)  # from the command line\n"),
    ("loader = DataLoader(\n    ds,\n    batch_size=16,  # fits\n)\n",
     "loader = DataLoader(\n    ds,\n    batch_size=16,  # fits\n    num_workers=2,\n    persistent_workers=True,\n)\n"),
    ("loader = DataLoader(\n    ds,\n    batch_size=16  # fits\n)\n",
     "loader = DataLoader(\n    ds,\n    batch_size=16,  # fits\n    num_workers=2,\n    persistent_workers=True\n)\n"),
    ("loader = DataLoader(ds, batch_size=16,\n                    shuffle=True)\n",
     "loader = DataLoader(ds, batch_size=16,\n                    shuffle=True,\n                    num_workers=2,\n"
     "                    persistent_workers=True)\n"),
    ("loader = DataLoader(\n    ds, batch_size=16, shuffle=True,  # one line of arguments\n)\n",
     "loader = DataLoader(\n    ds, batch_size=16, shuffle=True, num_workers=2, persistent_workers=True,  # one line of "
     "arguments\n)\n"),
    ("loader = DataLoader()\n", "loader = DataLoader(num_workers=2, persistent_workers=True)\n"),
]


@pytest.mark.parametrize("before, after", LAYOUTS)
def test_new_arguments_follow_the_calls_own_layout_and_a_given_one_is_changed(before, after):
    from advisor.apply.rewrite import SetKeywords, SourceFile, render

    source = SourceFile(Path("train.py"), before.encode())
    call = source.call_at(1, {"DataLoader"}, "DataLoader(...)")
    assert render(source, [SetKeywords(call, (("num_workers", "2"), ("persistent_workers", "True")))]).decode() == after


@pytest.mark.parametrize("call, why", [
    ("DataLoader(ds, **options)", "DataLoader(...) passes **kwargs: cannot tell what it already sets"),
    ("DataLoader(ds, 16, True, None, None, 0)", "DataLoader(...) passes num_workers by position (or *args)"),
    ("DataLoader(*args)", "DataLoader(...) passes num_workers by position (or *args)"),
    ("DataLoader(ds, num_workers=2)", "it already passes num_workers=2"),
])
def test_a_call_that_may_already_hold_the_setting_is_refused(call, why):
    from advisor.apply.fixes import DATALOADER_PARAMETERS
    from advisor.apply.rewrite import Refused, SetKeywords, SourceFile

    source = SourceFile(Path("train.py"), f"loader = {call}\n".encode())
    edit = SetKeywords(source.call_at(1, {"DataLoader"}, "DataLoader(...)"), (("num_workers", "2"),), DATALOADER_PARAMETERS)
    with pytest.raises(Refused, match=re.escape(why)):
        edit.check(source)


def test_a_patch_of_a_crlf_file_without_a_last_newline_applies(tmp_path):
    from advisor.apply.patch import build
    from advisor.apply.sites import Site, Sites

    root = tmp_path / "project"
    root.mkdir()
    (root / "train.py").write_bytes(b"import torch\r\n\r\nopt = torch.optim.SGD(params, lr=0.1)")
    assert git(root, "init", "-q").returncode == 0
    script = str(root / "train.py")
    patched = build({"optimizer": {"fused": True}, "float32_matmul_precision": "high"},
                    Sites(main=script, optimizers=[Site(script, 3, "<module>", "SGD")]), root=root)
    assert patched.changed[root / "train.py"][1] == (b'import torch\r\n\r\ntorch.set_float32_matmul_precision("high")\r\n'
                                                     b"\r\nopt = torch.optim.SGD(params, lr=0.1, fused=True)")
    assert "\\ No newline at end of file" in patched.patch.diff
    checked = git(root, "apply", "--check", "-", stdin=patched.patch.diff)
    assert checked.returncode == 0, checked.stderr


def test_every_knob_of_the_vocabulary_is_written_or_says_why_not():
    from advisor import overrides
    from advisor.apply.fixes import FIXES

    assert set(FIXES) == set(overrides.KEYS)


# --- one test per fix kind -------------------------------------------------------------------------

@pytest.mark.slow
def test_num_workers_go_into_the_dataloader_call_that_fed_the_steps(project, tmp_path):
    patch, out = fix_in_effect(project, tmp_path, {"dataloader": {"num_workers": 2, "persistent_workers": True}})
    removed, added = changed_lines(patch)
    assert removed == [] and added == ["        num_workers=2,", "        persistent_workers=True,"], patch
    assert "loader num_workers=2 persistent_workers=True pin_memory=False" in out


@pytest.mark.slow
def test_pinned_memory_makes_the_batchs_copy_asynchronous(project, tmp_path):
    patch, out = fix_in_effect(project, tmp_path, {"dataloader": {"num_workers": 2, "pin_memory": True}})
    removed, added = changed_lines(patch)
    assert removed == ['        x.to("meta")  # the batch\'s copy off the CPU']
    assert added == ["        num_workers=2,", "        pin_memory=True,",
                     '        x.to("meta", non_blocking=True)  # the batch\'s copy off the CPU'], patch
    assert "loader num_workers=2 persistent_workers=False pin_memory=True" in out


@pytest.mark.slow
def test_a_fused_optimizer_is_set_in_its_constructor(project, tmp_path):
    patch, out = fix_in_effect(project, tmp_path, {"optimizer": {"fused": True}})
    assert changed_lines(patch) == (["    opt = torch.optim.SGD(model.parameters(), lr=1e-3)"],
                                    ["    opt = torch.optim.SGD(model.parameters(), lr=1e-3, fused=True)"])
    assert "fused True" in out


@pytest.mark.slow
def test_tf32_matmuls_are_set_after_the_imports(project, tmp_path):
    patch, out = fix_in_effect(project, tmp_path, {"float32_matmul_precision": "high"})
    assert changed_lines(patch) == ([], ["", 'torch.set_float32_matmul_precision("high")'])
    assert re.search(r"from torch.utils.data import DataLoader, Dataset\n\+\n\+torch.set_float32", patch), patch
    assert "precision high" in out


@pytest.mark.slow
def test_bf16_autocast_wraps_the_forward_and_the_loss(project, tmp_path):
    patch, out = fix_in_effect(project, tmp_path, {"autocast": "bfloat16"})
    assert changed_lines(patch) == (["        out = model(x)", "        loss = torch.nn.functional.mse_loss(out.float(), y)"],
                                    ['        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):',
                                     "            out = model(x)",
                                     "            loss = torch.nn.functional.mse_loss(out.float(), y)"]), patch
    assert "forward bfloat16" in out


@pytest.mark.slow
def test_the_model_is_compiled_where_it_is_built(project, tmp_path):
    # TORCH_COMPILE_DISABLE: the model is still wrapped by torch.compile (what the patch does), without
    # the 13 s of Inductor compiling an MLP on 2 cores
    patch, out = fix_in_effect(project, tmp_path, {"compile": True}, env={"TORCH_COMPILE_DISABLE": "1"})
    assert changed_lines(patch) == ([], ["    model = torch.compile(model)"])
    assert re.search(r"torch.nn.Linear\(64, 1\)\)\n\+    model = torch.compile\(model\)\n", patch), patch
    assert "compiled True" in out


@pytest.mark.slow
def test_every_fix_together_is_one_patch_of_the_file(project, tmp_path):
    overrides = {"dataloader": {"num_workers": 2}, "optimizer": {"fused": True}, "float32_matmul_precision": "high",
                 "autocast": "bfloat16", "compile": True}
    patch, out = fix_in_effect(project, tmp_path, overrides, env={"TORCH_COMPILE_DISABLE": "1"})
    assert patch.count("diff --git a/train_target.py b/train_target.py") == 1
    assert ("loader num_workers=2" in out and "precision high" in out and "fused True" in out and "compiled True" in out
            and "forward bfloat16" in out), out


# --- what cannot be written safely -----------------------------------------------------------------

@pytest.mark.slow
def test_a_loader_from_a_librarys_factory_and_a_kwargs_call_are_refused_and_the_rest_applies(project, tmp_path):
    run = recommend(project / "run-train_refused", {"dataloader": {"num_workers": 2}, "optimizer": {"fused": True},
                                                    "float32_matmul_precision": "high"}, tmp_path / "run")
    result = advise_apply(str(run), cwd=project)
    assert result.returncode == 0, result.stderr
    source = (project / "train_refused.py").read_text().splitlines()
    loader = next(i for i, line in enumerate(source, 1) if "make_loader(4096" in line)
    optimizer = next(i for i, line in enumerate(source, 1) if "**settings" in line)
    lines = result.stderr.splitlines()
    assert lines == [
        f"advise: not written (num_workers=2): train_refused.py:{loader}: built inside make_loader(), which is not "
        "your code: give make_loader() the setting if it takes one, or build it with a DataLoader(...) call of your own",
        f"advise: not written (fused=True): train_refused.py:{optimizer}: torch.optim.SGD(...) passes **kwargs: "
        "cannot tell what it already sets"], result.stderr
    clone = patched_clone(project, result.stdout, tmp_path / "clone")
    assert "precision high" in run_script(clone, "train_refused.py", env={"STEPS": "3"})


@pytest.mark.slow
def test_autocast_wraps_a_forward_in_a_block_of_its_own_before_backward(project, tmp_path):
    """nanoGPT's shape: the forward and the loss's scaling under `with ctx:`, backward() after that
    block. The two lines are wrapped inside it (the same edit `git apply --check` accepted on nanoGPT
    at 3adf61e), and the patched script's forward runs in bf16."""
    run = recommend(project / "run-train_ctx", {"autocast": "bfloat16"}, tmp_path / "run")
    result = advise_apply(str(run), cwd=project)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert changed_lines(result.stdout) == (
        ["                out = model(x)",
         "                loss = out.float().pow(2).mean() / accumulate  # scaled for the accumulation"],
        ['                with torch.autocast(device_type="cpu", dtype=torch.bfloat16):',
         "                    out = model(x)",
         "                    loss = out.float().pow(2).mean() / accumulate  # scaled for the accumulation"]), result.stdout
    clone = patched_clone(project, result.stdout, tmp_path / "clone")
    assert "forward bfloat16" in run_script(clone, "train_ctx.py", "--steps", "3")


@pytest.mark.slow
def test_autocast_without_the_probes_lines_is_refused_in_one_line(project, tmp_path):
    run = recommend(project / "run-train_target", {"autocast": "bfloat16"}, tmp_path / "run")
    (run / "sources.json").unlink()  # a run whose probe recorded no lines of the step
    result = advise_apply(str(run), cwd=project)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [
        "advise: not written (autocast=bfloat16): train_target.py: the probe recorded no call of the model (a module "
        "with parameters): the probe did not record the step's lines (no sources.json); wrap the forward and the "
        "loss in torch.autocast by hand, as the snippet shows",
        "advise: error: nothing in the recommendation could be written into the code (the lines above say why)"]


@pytest.mark.slow
def test_write_patches_the_file_in_place_and_o_saves_the_same_patch(tmp_path):
    root = checkout(tmp_path / "project", [APPLY / "train_target.py"])
    os.chmod(root / "train_target.py", 0o750)
    run = recommend(profile(root, "train_target.py", *FAST), {"optimizer": {"fused": True}}, tmp_path / "run")
    saved = advise_apply("-o", "fix.patch", str(run), cwd=root)
    assert saved.returncode == 0 and saved.stdout == "", saved.stderr
    assert saved.stderr == f"advise: patch saved to fix.patch (git apply it from {root.resolve()})\n"
    wrote = advise_apply("--write", str(run), cwd=root)
    assert wrote.returncode == 0 and wrote.stderr == "advise: wrote train_target.py\n", wrote.stderr
    assert "lr=1e-3, fused=True)" in (root / "train_target.py").read_text()
    assert os.stat(root / "train_target.py").st_mode & 0o777 == 0o750  # the file's mode is kept
    # the file, the saved patch and the run dir: no temp file left, nothing else written
    assert sorted(git(root, "status", "--porcelain").stdout.splitlines()) == [" M train_target.py", "?? fix.patch",
                                                                               "?? run-train_target/"]
    assert changed_lines(git(root, "diff").stdout) == changed_lines((root / "fix.patch").read_text())
    again = advise_apply(str(run), cwd=root)  # the file already has it now
    assert again.returncode == 2 and "already passes fused=True" in again.stderr, again.stderr


def test_apply_run_from_another_folder_writes_where_the_run_was_profiled(tmp_path):
    """The truth harness's case: a script profiled in a folder that is no git checkout, by a relative
    path, and `advise apply` run from somewhere else (a checkout of its own). The report's patch
    says where it started; the script is found there and the patch starts there, not in the folder
    apply runs from (which refused trainer.py as outside it)."""
    folder = tmp_path / "plain"
    folder.mkdir()
    shutil.copy(APPLY / "train_target.py", folder)
    run = profile(folder, "train_target.py", *FAST)
    report = json.loads((run / "report.json").read_text())
    run = recommend(run, {"optimizer": {"fused": True}}, tmp_path / "run")
    edited = json.loads((run / "report.json").read_text())
    edited["recommended"]["patch"] = {"root": str(folder.resolve()), "diff": "", "files": []}
    (run / "report.json").write_text(json.dumps(edited))
    elsewhere = checkout(tmp_path / "elsewhere", [APPLY / "train_refused.py"])
    result = advise_apply(str(run), cwd=elsewhere)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert result.stdout.startswith("diff --git a/train_target.py b/train_target.py\n") and "fused=True" in result.stdout
    assert report["script"] == "train_target.py"  # relative, as it was typed


def test_a_run_dir_without_a_report_or_recommendation_is_one_line_and_exit_2(tmp_path):
    missing = advise_apply(str(tmp_path / "nowhere"), cwd=tmp_path)
    assert (missing.returncode, missing.stderr) == (2, f"advise: error: {tmp_path / 'nowhere'}: no such run dir or report.json\n")
    (tmp_path / "empty").mkdir()
    empty = advise_apply("empty", cwd=tmp_path)
    assert empty.returncode == 2 and empty.stderr.count("\n") == 1 and "Traceback" not in empty.stderr
    (tmp_path / "none").mkdir()
    (tmp_path / "none" / "report.json").write_text(json.dumps({"schema_version": 1, "recommended": None}))
    none = advise_apply("none", cwd=tmp_path)
    assert none.returncode == 2 and "no recommended configuration to apply" in none.stderr and none.stderr.count("\n") == 1


# --- the frameworks' own settings ------------------------------------------------------------------

@pytest.mark.slow
def test_fabric_gets_its_precision_in_its_own_call(tmp_path):
    root = checkout(tmp_path / "project", [APPLY / "fabric_loop.py"])
    run = recommend(profile(root, "fabric_loop.py", *FAST), {"autocast": "bfloat16"}, tmp_path / "run")
    result = advise_apply(str(run), cwd=root)
    assert result.returncode == 0, result.stderr
    assert changed_lines(result.stdout) == (['    fabric = L.Fabric(accelerator="cpu", devices=1)'],
                                            ['    fabric = L.Fabric(accelerator="cpu", devices=1, precision="bf16-mixed")'])
    clone = patched_clone(root, result.stdout, tmp_path / "clone")
    assert "precision bf16-mixed" in run_script(clone, "fabric_loop.py", env={"STEPS": "3"})


def _lightning_precision(clone: Path, *flags: str) -> str:
    """The precision the Lightning script's first batch runs with (the rest of its 20 epochs not waited for)."""
    with subprocess.Popen([sys.executable, "lit_module.py", "--say-precision", *flags], cwd=clone, stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True, start_new_session=True) as proc:
        try:
            said = next((line for line in proc.stdout if line.startswith("precision")), "")
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
    return said.strip()


# --- a setting the script takes from its own switch: said as the switch, the command line to run ------

def _bf16_applied(tmp_path, files: list, script: str):
    """`files` checked out as a project, `script` profiled, bf16 recommended, `advise apply` run: (project, result)."""
    root = checkout(tmp_path / "project", files)
    run = recommend(profile(root, script, *FAST), {"autocast": "bfloat16"}, tmp_path / "run")
    result = advise_apply(str(run), cwd=root)
    assert result.returncode == 0, result.stderr
    return root, result


def _command(result: subprocess.CompletedProcess) -> list[str]:
    """The command line `advise apply` said to run the script with (stdout where it is the whole
    change, else its `advise: run it with:` line), as words."""
    said = [line.removeprefix("advise: run it with: ") for line in result.stderr.splitlines()
            if line.startswith("advise: run it with: ")] or [result.stdout.strip()]
    words = shlex.split(said[0])
    assert words[0] == "python", said
    return words[1:]


@pytest.mark.slow
def test_workers_from_a_flag_are_the_flag_and_a_run_with_0_workers_still_starts(tmp_path):
    """`DataLoader(..., num_workers=args.workers)` with `--workers` defaulting to 0: the advice is the
    run's own command with `--workers 2`, not a default changed; persistent_workers, which no flag
    sets, follows the flag in the patch (`args.workers > 0`), since persistent_workers=True beside
    `--workers 0` is an error the unpatched script never had."""
    root = checkout(tmp_path / "project", [WORKLOADS / "train_basic.py"])
    run = recommend(profile(root, "train_basic.py", *FAST), {"dataloader": {"num_workers": 2, "persistent_workers": True}},
                    tmp_path / "run")
    result = advise_apply(str(run), cwd=root)
    assert result.returncode == 0, result.stderr
    assert changed_lines(result.stdout) == (
        ["loader = DataLoader(data, batch_size=args.batch_size, shuffle=True, num_workers=args.workers)"],
        ["loader = DataLoader(data, batch_size=args.batch_size, shuffle=True, num_workers=args.workers, "
         "persistent_workers=args.workers > 0)"]), result.stdout
    assert "num_workers comes from the --workers flag: run it with --workers 2" in result.stderr
    assert _command(result)[-2:] == ["--workers", "2"], result.stderr
    clone = patched_clone(root, result.stdout, tmp_path / "clone")
    assert run_script(clone, *_command(result)[:-2], "--epochs", "1", "--workers", "2").startswith("epoch 0 loss")
    assert run_script(clone, "train_basic.py", "--epochs", "1", "--workers", "0").startswith("epoch 0 loss")


@pytest.mark.slow
def test_lightning_precision_from_a_flag_is_the_flag_and_the_call_is_left_alone(tmp_path):
    """`L.Trainer(precision=args.precision)`: no file changes; the command line is the whole advice
    (on stdout), and running it runs the Trainer in bf16."""
    root, result = _bf16_applied(tmp_path, [FRAMEWORKS / "lit_module.py"], "lit_module.py")
    assert result.stderr == ('advise: autocast=bfloat16: lit_module.py:33: precision comes from the --precision flag: '
                             'run it with --precision bf16-mixed\n'), result.stderr
    assert _command(result) == ["lit_module.py", "--precision", "bf16-mixed"], result.stdout
    assert _lightning_precision(root, *_command(result)[1:]) == "precision bf16-mixed"


@pytest.mark.slow
def test_accelerate_precision_from_a_flag_whose_choices_hold_it(tmp_path):
    """Issue 52's script: `Accelerator(mixed_precision=args.mixed_precision)` with `--mixed-precision`
    choices no/fp16/bf16 got `mixed_precision="bf16"` in the call, and the flag stopped doing
    anything. Now: `--mixed-precision bf16`, which the choices hold, and nothing written."""
    root, result = _bf16_applied(tmp_path, [APPLY / "accelerate_flag.py"], "accelerate_flag.py")
    assert _command(result) == ["accelerate_flag.py", "--mixed-precision", "bf16"], result.stdout
    assert git(root, "diff", "--stat").stdout == ""
    assert run_script(root, *_command(result), "--steps", "3").splitlines()[-1] == "precision bf16"


@pytest.mark.slow
def test_a_configurator_global_is_its_key_value_flag(tmp_path):
    """nanoGPT's way: `mixed_precision = "no"` at the module's top, overridden by exec(configurator.py)
    from the command line, then `Accelerator(mixed_precision=mixed_precision)`: the advice is
    `--mixed_precision=bf16`, the only form the configurator reads."""
    root, result = _bf16_applied(tmp_path, [APPLY / "configured"], "train.py")
    assert result.stderr == ('advise: autocast=bfloat16: train.py:9: mixed_precision comes from the global '
                             'mixed_precision (configurator.py sets it from the command line): run it with '
                             '--mixed_precision=bf16\n'), result.stderr
    assert _command(result) == ["train.py", "--mixed_precision=bf16"], result.stdout
    assert run_script(root, "train.py", "--steps=3", "--mixed_precision=bf16").splitlines()[-1] == "precision bf16"


@pytest.mark.slow
def test_the_scripts_own_autocast_is_turned_never_a_second_one_nested(tmp_path):
    """nanoGPT's own autocast: `with ctx:` where ctx is a no-op on a CPU and the autocast of
    `ptdtype = {...}[dtype]` elsewhere. The patch had put a second `with torch.autocast` inside
    `with ctx:`; now ctx becomes the autocast on every device and bf16 is `--dtype=bfloat16`, the
    script's own flag, and the forward runs in bf16 only with both."""
    root, result = _bf16_applied(tmp_path, [APPLY / "configured"], "own_autocast.py")
    assert changed_lines(result.stdout) == (
        ['ctx = nullcontext() if device_type == "cpu" else torch.amp.autocast(device_type=device_type, dtype=ptdtype)'],
        ["ctx = torch.amp.autocast(device_type=device_type, dtype=ptdtype)"]), result.stdout
    assert "with torch.autocast" not in result.stdout
    assert "the autocast's dtype comes from the global dtype (configurator.py sets it from the command line): " \
           "run it with --dtype=bfloat16" in result.stderr
    assert _command(result) == ["own_autocast.py", "--dtype=bfloat16"], result.stderr
    clone = patched_clone(root, result.stdout, tmp_path / "clone")
    assert run_script(clone, "own_autocast.py", "--steps=3", "--dtype=bfloat16").splitlines()[-1] == "forward bfloat16"
    assert run_script(clone, "own_autocast.py", "--steps=3").splitlines()[-1] == "forward float32"


@pytest.mark.slow
@pytest.mark.timing  # judges measured speed: alone
def test_a_click_option_is_the_advice_in_every_report_and_check_runs_that_command_line(tmp_path):
    """`@click.option("-j", "--workers")` feeding `DataLoader(num_workers=workers)`, each sample
    waiting 6 ms: the verified workers are said as the run's own command with `--workers N` in the
    terminal, report.json and the page (no generic DataLoader snippet beside it); `advise apply`
    gives that command, and `--check` times it (the patched copy run with the flag) in fresh runs."""
    root = checkout(tmp_path / "project", [APPLY / "train_click.py"])
    proc = subprocess.run(advise_cmd("profile", "--steps", "6", "--warmup", "2", "--profile-steps", "2", *NO_SCREENS,
                                     "--out", "run", "train_click.py", "--item-ms", "6"),
                          cwd=root, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = json.loads((root / "run" / "report.json").read_text())["recommended"]
    assert rec is not None and "dataloader" in rec["overrides"], proc.stdout
    workers = rec["overrides"]["dataloader"]["num_workers"]
    command = f"python train_click.py --item-ms 6 --workers {workers}"
    assert rec["patch"]["run_with"] == command and rec["patch"]["parts"][0]["flags"] == [f"--workers {workers}"]
    assert f"      run it with: {command}" in proc.stdout and "+ loader = DataLoader(" not in proc.stdout, proc.stdout
    assert command in (root / "run" / "report.html").read_text()
    applied = advise_apply("run", cwd=root)
    assert applied.returncode == 0 and f"advise: run it with: {command}" in applied.stderr, applied.stderr
    assert "comes from the --workers option (click): run it with --workers" in applied.stderr
    assert run_script(root, *_command(applied)[:-2], "--steps", "3", "--workers", "2").splitlines()[-1] == "workers 2"

    check = advise_apply("--check", "--rounds", "2", "--steps", "6", "--warmup", "2", "run", cwd=root)
    assert check.returncode in (0, 3), check.stderr[-3000:]
    found = re.fullmatch(r"applied: ([\d.]+)× faster in fresh runs \(95% CI [\d.]+–[\d.]+×, 2 pairs of runs; "
                         r"arm: ([\d.]+)×, 95% CI [\d.]+–[\d.]+×\): (held|did not hold)", check.stdout.strip())
    assert found and float(found[1]) > 1.5, check.stdout  # 6 ms a sample, 16 a batch: workers wait side by side
    assert (found[3] == "held") == (check.returncode == 0)
    assert git(root, "status", "--porcelain").stdout.strip() == "?? run/"  # the check wrote nothing into the checkout


@pytest.mark.slow
def test_a_yaml_config_key_is_changed_in_the_file_and_written_only_with_write(tmp_path):
    """`num_workers=cfg["data"]["workers"]` with `cfg = yaml.safe_load(f)` of config.yaml: the patch
    changes that key in config.yaml, its comments kept; without --write nothing is written."""
    root = checkout(tmp_path / "project", [APPLY / "yaml_config"])
    run = recommend(profile(root, "train.py", *FAST), {"dataloader": {"num_workers": 2}}, tmp_path / "run")
    result = advise_apply(str(run), cwd=root)
    assert result.returncode == 0, result.stderr
    assert changed_lines(result.stdout) == (["  workers: 0   # DataLoader worker processes"],
                                            ["  workers: 2   # DataLoader worker processes"]), result.stdout
    assert "num_workers comes from data.workers in config.yaml: it is now 2 there" in result.stderr
    assert git(root, "diff", "--stat").stdout == ""
    written = advise_apply("--write", str(run), cwd=root)
    assert written.returncode == 0 and "wrote config.yaml" in written.stderr, written.stderr
    assert run_script(root, "train.py").splitlines()[-1] == "workers 2"


@pytest.mark.slow
@pytest.mark.timing
def test_training_arguments_get_the_setting_and_a_parsers_flags_are_told(tmp_path):
    root = checkout(tmp_path / "project", [FRAMEWORKS / "hf_trainer.py"])
    run = recommend(profile(root, "hf_trainer.py", *FAST), {"autocast": "bfloat16", "optimizer": {"fused": True}},
                    tmp_path / "run")
    result = advise_apply(str(run), cwd=root)
    assert result.returncode == 0, result.stderr
    removed, added = changed_lines(result.stdout)
    assert removed == ['        bf16=cli.bf16, report_to=[], save_strategy="no", logging_strategy="no", disable_tqdm=True)']
    assert added == ['        bf16=cli.bf16, report_to=[], save_strategy="no", logging_strategy="no", disable_tqdm=True, '
                     'optim="adamw_torch_fused")']  # bf16 is the script's own --bf16 flag: said, not written over
    assert _command(result) == ["hf_trainer.py", "--bf16"], result.stderr
    patched_clone(root, result.stdout, tmp_path / "clone")
    # FABRICATED, the framework's record only: the same run, as if its TrainingArguments came from an
    # HfArgumentParser (run_clm.py's way; tests/test_frameworks.py profiles such a script for real)
    report = json.loads((run / "report.json").read_text())
    report["observed"]["framework"]["command_line"] = True
    flags = recommend(run, report["recommended"]["overrides"], tmp_path / "flags", observed=report["observed"])
    told = advise_apply(str(flags), cwd=root)
    assert told.returncode == 0 and _command(told) == ["hf_trainer.py", "--bf16", "--optim", "adamw_torch_fused"]
    line = report["observed"]["framework"]["configured_at"]["line"]
    assert told.stderr.splitlines()[:2] == [
        f"advise: autocast=bfloat16: hf_trainer.py:{line}: the script builds its TrainingArguments from its command "
        "line (HfArgumentParser): run it with --bf16",
        f"advise: fused=True: hf_trainer.py:{line}: the script builds its TrainingArguments from its command "
        "line (HfArgumentParser): run it with --optim adamw_torch_fused"], told.stderr


# --- the report knows the patch; --check times it ---------------------------------------------------

@pytest.mark.slow
@pytest.mark.timing  # judges measured speed: alone
def test_the_report_carries_the_patch_and_a_changed_script_is_refused(tmp_path):
    """The recommendation's patch in report.json, the terminal and the page, applying cleanly to a
    clone; a script edited after the run is refused (`--check` in fresh runs: the click test above)."""
    root = checkout(tmp_path / "project", [WORKLOADS / "starved_io.py"])
    run = root / "run"
    proc = subprocess.run(advise_cmd("profile", "--steps", "6", "--warmup", "2", "--profile-steps", "2", *NO_SCREENS,
                                     "--out", "run", "starved_io.py", "--item-ms", "6"),
                          cwd=root, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = json.loads((run / "report.json").read_text())["recommended"]
    assert rec is not None and "dataloader" in rec["overrides"], proc.stdout
    patch = rec["patch"]
    assert patch["root"] == str(root.resolve()) and patch["command"] == "advise apply --write run"
    assert "num_workers=" in patch["diff"] and [p["key"] for p in rec["patch"]["parts"]] == list(rec["overrides"])
    assert "      apply it: advise apply --write run" in proc.stdout
    assert "advise apply --write run" in (run / "report.html").read_text()
    patched_clone(root, patch["diff"], tmp_path / "clone")

    script = root / "starved_io.py"
    script.write_text("# edited after the run\n" + script.read_text())
    stale = advise_apply("run", cwd=root)
    assert stale.returncode == 2 and stale.stderr.splitlines()[0].endswith(
        "starved_io.py: changed since the run (the probe's lines may have moved): profile it again"), stale.stderr


def test_a_check_of_a_partly_written_recommendation_is_held_to_the_arm_of_that_part():
    """minGPT's recommendation was bf16 + a doubled batch (1.82x); the patch writes bf16 alone (a new
    batch size is the user's to make), so its fresh runs are held to the bf16 arm (1.56x), not to
    the pair's; a part no arm measured alone leaves the whole recommendation, said as such."""
    from advisor.apply.check import arm_of
    from advisor.apply.patch import Patched
    from advisor.model import Experiment, Finding, Fix, Patch, PatchPart, Recommendation, Verdict

    bf16, batch = {"autocast": "bfloat16"}, {"batch_size_scale": 2}
    rec = Recommendation(fixes=["fp32-matmul", "untried-fix"], overrides={**bf16, **batch}, verified=True,
                         speedup=1.82, ci_low=1.75, ci_high=1.90)
    written = Patched(Patch(".", "diff", [PatchPart("autocast", diff="diff"), PatchPart("batch_size_scale", refused=["no"])]))
    arm = Experiment(Verdict.FASTER, verified=True, speedup=1.56, ci_low=1.51, ci_high=1.60, overrides=bf16)
    findings = [Finding("fp32", "s", "high", {}, Fix.unsafe("bf16", bf16), experiment=arm)]
    measured, part = arm_of(written, rec, findings)
    assert measured is arm and part == "autocast=bfloat16 alone"
    assert arm_of(written, rec, []) == (rec, "")  # no arm of that part alone: the whole, as before
    whole = Patched(Patch(".", "diff", [PatchPart("autocast", diff="d"), PatchPart("batch_size_scale", diff="d")]))
    assert arm_of(whole, rec, findings) == (rec, "")


# --- what --check runs: the patched copy's code, in the user's own environment --------------------

def test_the_checks_runs_import_the_changed_files_from_their_own_copy(tmp_path, monkeypatch):
    """minGPT's chargpt imports the trainer the patch edits from a package (mingpt/), found through
    PYTHONPATH (or an editable install): each copy's runs put the package's root inside the copy
    first, and a PYTHONPATH entry into the checkout is moved to the copy. Before, the patched runs
    imported the original trainer: 0.97x for a 1.66x fix."""
    from advisor.apply import check

    source = tmp_path / "minGPT"
    (source / "mingpt").mkdir(parents=True)
    (source / "mingpt" / "__init__.py").write_text("")
    (source / "mingpt" / "trainer.py").write_text("")
    (source / "projects").mkdir()
    (source / "projects" / "chargpt.py").write_text("")
    changed = {source / "mingpt" / "trainer.py": (b"", b""), source / "projects" / "chargpt.py": (b"", b"")}
    roots = check.import_roots(changed, source)
    assert roots == [Path("."), Path("projects")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(source), "/opt/elsewhere"]))
    copy = tmp_path / "patched"
    entries = check.python_path(source, copy, roots).split(os.pathsep)
    assert entries[:2] == [str(copy / "."), str(copy / "projects")] and entries[-1] == "/opt/elsewhere"
    assert not any(e.startswith(str(source)) for e in entries), entries


def test_a_check_whose_patched_runs_ran_the_original_files_says_so(tmp_path):
    """Where the patched runs' step lines are in the original checkout's files (an installed package
    the copy cannot shadow), the check refuses its figure in one line: it timed the unpatched code twice."""
    from advisor.apply import check
    from advisor.gate.ab import ABResult

    source, candidate, out = tmp_path / "src", tmp_path / "patched", tmp_path / "rounds"
    trainer = source / "pkg" / "trainer.py"
    trainer.parent.mkdir(parents=True)
    trainer.write_text("")
    run_dir = out / "candidate" / "round-01"
    run_dir.mkdir(parents=True)
    (run_dir / "sources.json").write_text(json.dumps({"captured_by": "test", "precision": "line", "sites": {
        "model-call": [{"file": str(trainer), "line": 3, "function": "run", "op": "model", "count": 1}]}}))
    result = ABResult(str(source), str(candidate), "train.py", decision=None, rounds=[
        {"side": "base", "round": 1, "run_dir": "base/round-01"},
        {"side": "candidate", "round": 1, "run_dir": "candidate/round-01"}])
    with pytest.raises(check.CheckError, match=r"imported pkg/trainer.py from .* not from the patched copy"):
        check._ran_the_copy(result, out, {trainer: (b"", b"")}, source)
    (run_dir / "sources.json").write_text(json.dumps({"sites": {"model-call": [
        {"file": str(candidate / "pkg" / "trainer.py"), "line": 3, "function": "run", "op": "model", "count": 1}]}}))
    check._ran_the_copy(result, out, {trainer: (b"", b"")}, source)  # the copy's: no error


def test_the_checks_rounds_run_without_the_gates_passive_threads(tmp_path, monkeypatch):
    """advise ab's rounds set OMP_WAIT_POLICY=PASSIVE (a CPU time that spinning threads do not
    inflate); it slowed chargpt 63 -> 84 ms a step and diluted bf16 from 1.66x to 1.37x, so the
    check's rounds run in the user's own environment."""
    from advisor.gate import ab

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    seen: list[dict] = []

    def fake_profile(cmd, cwd, env):
        seen.append(env)
        return subprocess.CompletedProcess(cmd, 1, None, "no report")

    monkeypatch.setattr(ab, "_profile", fake_profile)
    for passive in (True, False):
        with pytest.raises(ab.RoundFailed):
            ab.run_round("base", tmp_path, 1, ab.ABOptions(passive_threads=passive), "train.py", [], tmp_path / "out",
                         {"PYTHONPATH": "/copy"})
    assert seen[0].get("OMP_WAIT_POLICY") == "PASSIVE" and "OMP_WAIT_POLICY" not in seen[1]
    assert seen[0]["PYTHONPATH"] == seen[1]["PYTHONPATH"] == "/copy"
