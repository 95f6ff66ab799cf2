"""The script's own step count, read from its syntax tree and its command line, and said beside a
compile result's payback: whether this run pays the compilation back."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from advisor.apply.script_steps import ScriptSteps, read
from advisor.experiments.judge import payoff_steps
from advisor.model import Experiment, Verdict
from advisor.reports import words
from advisor.run_dir.seen import LoaderSeen, Observed, SourceSite, Sources

ARGPARSE = """\
import argparse
p = argparse.ArgumentParser()
p.add_argument("--lr", type=float, default=3e-4)
p.add_argument("--max-iters", type=int, default=2000)
args = p.parse_args()
for it in range(args.max_iters):
    pass
"""

NANOGPT = """\
batch_size = 12
max_iters = 600000
lr_decay_iters = 600000
exec(open('configurator.py').read())
for iter_num in range(max_iters):
    pass
"""

EPOCHS = """\
import argparse
p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=3)
args = p.parse_args()
"""


def script(tmp_path, text: str, name: str = "train.py") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_an_argparse_flag_is_read_from_the_command_line_else_its_default(tmp_path):
    train = script(tmp_path, ARGPARSE)
    assert read(train, ["--max-iters", "5000"]) == ScriptSteps(5000, "--max-iters 5000")
    assert read(train, ["--lr=1e-3", "--max-iters=7500"]) == ScriptSteps(7500, "--max-iters 7500")
    assert read(train, ["--max-iters", "1", "--max-iters", "9"]).steps == 9  # argparse: the last one wins
    assert read(train, []) == ScriptSteps(2000, "--max-iters 2000, its default in train.py")
    # what argparse would read and this would not: never the default instead
    assert read(train, ["--max-it", "5000"]) is None  # an abbreviation
    assert read(train, ["--max-iters", "5e3x"]) is None


def test_a_default_that_is_not_a_literal_int_is_unknown(tmp_path):
    computed = script(tmp_path, ARGPARSE.replace("default=2000", "default=int(os.environ['N'])"))
    assert read(computed, []) is None
    assert read(computed, ["--max-iters", "300"]) == ScriptSteps(300, "--max-iters 300")
    assert read(script(tmp_path, ARGPARSE.replace("default=2000", "default=True")), []) is None
    # two flags of step names: which one the loop runs is not plain
    two = ARGPARSE.replace('p.add_argument("--lr", type=float, default=3e-4)', 'p.add_argument("--steps", type=int, default=9)')
    assert read(script(tmp_path, two), []) is None
    # a name that only contains a step name is not one
    assert read(script(tmp_path, ARGPARSE.replace("--max-iters", "--max-iters-per-eval")), []) is None


def test_a_nanogpt_global_with_configurator_overrides(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # configurator.py opens config files from where the script runs
    train = script(tmp_path, NANOGPT)
    assert read(train, []) == ScriptSteps(600000, "max_iters = 600000 in train.py")
    assert read(train, ["--max_iters=5000"]) == ScriptSteps(5000, "--max_iters=5000")
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "shakespeare.py").write_text("max_iters = 5000\nlr_decay_iters = 5000\n")
    assert read(train, ["config/shakespeare.py"]) == ScriptSteps(5000, "max_iters = 5000 in config/shakespeare.py")
    assert read(train, ["config/shakespeare.py", "--max_iters=250"]) == ScriptSteps(250, "--max_iters=250")
    assert read(train, ["--max_iters=250", "config/shakespeare.py"]).steps == 5000  # in order, as exec() runs them
    assert read(train, ["config/missing.py"]) is None
    (tmp_path / "config" / "computed.py").write_text("max_iters = 10 * 500\n")
    assert read(train, ["config/computed.py"]) is None
    # without configurator.py the global is the script's own number, unless the command line may reach it
    plain = script(tmp_path, NANOGPT.replace("exec(open('configurator.py').read())\n", ""), "plain.py")
    assert read(plain, []) == read(plain, ["--lr", "1"]) == ScriptSteps(600000, "max_iters = 600000 in plain.py")
    assert read(plain, ["--max_iters=5000"]) is None
    own = script(tmp_path, "import sys\n" + NANOGPT.replace("exec(open('configurator.py').read())", "print(sys.argv)"),
                 "own.py")
    assert read(own, []).steps == 600000 and read(own, ["5000"]) is None
    # bound twice: which binding the loop reads is not plain
    assert read(script(tmp_path, NANOGPT + "max_iters = 10\n", "twice.py"), []) is None


def test_a_configurator_written_into_the_script():
    """The nanoGPT workload sets its globals from `--key=value` itself (``globals()[key] = ...``)."""
    train = str(Path(__file__).parent / "workloads" / "nanogpt" / "train_char_cpu.py")
    assert read(train, []) == ScriptSteps(2000, "max_iters = 2000 in train_char_cpu.py")
    assert read(train, ["--eval_interval=50", "--max_iters=300"]) == ScriptSteps(300, "--max_iters=300")
    assert read(train, ["config/x.py"]) is None  # it has no config files


def test_hf_max_steps_from_its_command_line(tmp_path):
    train = script(tmp_path, """\
        from transformers import HfArgumentParser, TrainingArguments
        (training_args,) = HfArgumentParser((TrainingArguments,)).parse_args_into_dataclasses()
    """)
    assert read(train, ["--output_dir", "out", "--max_steps", "500"]) == ScriptSteps(500, "--max_steps 500")
    assert read(train, ["--output_dir", "out"]) is None  # TrainingArguments' own defaults are not read
    assert read(train, ["--max_steps", "-1"]) is None  # -1: HF trains by epochs
    assert read(train, ["--max_steps", "-1", "--num_train_epochs", "2"], loader(), samples_per_step=32.0) == ScriptSteps(
        3126, "--num_train_epochs 2 × 1,563 batches an epoch")
    assert read(train, ["--num_train_epochs=3.0"], loader(), samples_per_step=32.0).steps == 4689


def loader(**kw) -> Observed:
    return Observed(dataloaders=[LoaderSeen(batch_size=32, dataset_len=50_000, **kw)])


def test_epochs_times_the_batches_of_the_loader_that_fed_the_steps(tmp_path):
    train = script(tmp_path, EPOCHS)
    assert read(train, [], loader(), samples_per_step=32.0) == ScriptSteps(4689, "--epochs 3, its default in train.py"
                                                                          " × 1,563 batches an epoch")
    assert read(train, ["--epochs", "2"], loader(), samples_per_step=32.0).steps == 3126
    # gradient accumulation: each step drew 4 of the loader's batches
    assert read(train, ["--epochs", "2"], loader(), samples_per_step=128.0) == ScriptSteps(
        780, "--epochs 2 × 1,563 batches an epoch, 4 a step")
    # unknown: no loader, the samples a step drew, a step that is not whole batches, an iterable dataset,
    # ranks that split it, several loaders and nothing says which fed the steps
    assert read(train, [], None, samples_per_step=32.0) is None
    assert read(train, [], loader(), samples_per_step=None) is None
    assert read(train, [], loader(), samples_per_step=48.0) is None
    assert read(train, [], loader(iterable=True), samples_per_step=32.0) is None
    assert read(train, [], loader(), samples_per_step=32.0, world_size=2) is None
    built = [{"file": train, "line": n} for n in (10, 20)]
    two = Observed(dataloaders=[LoaderSeen(batch_size=32, dataset_len=50_000, built_at=built[0]),
                                LoaderSeen(batch_size=10, dataset_len=1_000, built_at=built[1])])
    assert read(train, [], two, samples_per_step=32.0) is None
    fed = Sources(sites={"dataloader-built": [SourceSite(file=train, line=10, function="<module>", op="DataLoader",
                                                         count=1)]})
    assert read(train, [], two, fed, samples_per_step=32.0).steps == 4689
    # a step count left unset (None, -1: "train by epochs") falls back to the epochs; one not known does not
    for default in ("None", "-1"):
        unset = script(tmp_path, EPOCHS.replace("args =", f'p.add_argument("--max_steps", type=int, default={default})\nargs ='),
                       "unset.py")
        assert read(unset, [], loader(), samples_per_step=32.0).steps == 4689
        assert read(unset, ["--max_steps", "10"], loader(), samples_per_step=32.0).steps == 10
    computed = script(tmp_path, EPOCHS.replace("args =", 'p.add_argument("--max_steps", type=int, default=N)\nargs ='))
    assert read(computed, [], loader(), samples_per_step=32.0) is None
    # a step count, where the script has one, is the run's: epochs are not read
    both = script(tmp_path, EPOCHS + "max_steps = 100\n", "both.py")
    assert read(both, [], loader(), samples_per_step=32.0) == ScriptSteps(100, "max_steps = 100 in both.py")


@pytest.mark.parametrize(("steps", "said", "tail"), [
    (5000, "--max_iters 5000", "paid back after 270 steps: this run's 5,000 steps (--max_iters 5000) pay it back"),
    (200, "--epochs 2 × 100 batches an epoch",
     "paid back after 270 steps: this run's 200 steps (--epochs 2 × 100 batches an epoch) do not"),
])
def test_the_compile_result_says_whether_this_run_pays_it_back(steps, said, tail):
    exp = Experiment(Verdict.FASTER, verified=True, speedup=1.25, ci_low=1.2, ci_high=1.3, overrides={"compile": True},
                     measured_by="in-process", switch_s=2.7, baseline={"step_time_median_s": 0.050},
                     candidate={"step_time_median_s": 0.040})
    exp.payoff_steps = payoff_steps(exp)
    assert words.measured_sentence(exp).endswith("; compiling took 2.70 s, once, paid back after 270 steps")
    exp.script_steps, exp.script_steps_said = steps, said
    assert words.measured_sentence(exp).endswith(tail)
    back = Experiment.from_dict(exp.to_dict())  # report.json keeps it
    assert (back.script_steps, back.script_steps_said) == (steps, said)


def test_the_command_sets_it_on_the_compile_results_from_the_run(tmp_path):
    """measure_fixes' last step: the run's script, argv, loader and samples a step give the count,
    set on each result that has a payback (not on a fix without one)."""
    import pandas as pd

    from advisor.commands.measure import _script_steps
    from advisor.experiments.judge import ExperimentResults
    from advisor.model import Finding, Fix
    from advisor.probe.config import ProbeConfig
    from advisor.profile import Profile

    train = script(tmp_path, EPOCHS)
    compiled = Experiment(Verdict.FASTER, verified=True, speedup=1.25, ci_low=1.2, ci_high=1.3, overrides={"compile": True},
                          switch_s=2.7, payoff_steps=270)
    workers = Experiment(Verdict.FASTER, overrides={"dataloader": {"num_workers": 2}}, switch_s=0.5)
    results = ExperimentResults([Finding("t", "s", "low", {}, Fix.safe("compile", {"compile": True}), experiment=compiled),
                                 Finding("t", "s", "low", {}, Fix.safe("w", {"dataloader": {"num_workers": 2}}),
                                         experiment=workers)], None, [], [])
    profile = Profile(steps=pd.DataFrame({"samples": [64, 64, 64]}),
                      observed={"dataloaders": [{"batch_size": 32, "dataset_len": 3200}]})
    _script_steps(results, profile, ProbeConfig(script=train, args=["--epochs", "5"]))
    assert (compiled.script_steps, compiled.script_steps_said) == (250, "--epochs 5 × 100 batches an epoch, 2 a step")
    assert workers.script_steps is None
    assert words.measured_sentence(compiled).endswith(
        "paid back after 270 steps: this run's 250 steps (--epochs 5 × 100 batches an epoch, 2 a step) do not")
