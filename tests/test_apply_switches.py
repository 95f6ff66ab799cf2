"""A fix whose value comes from the script's own switch is said as that switch (issue 66, item 3):
the flag to run with, the variable to set, the config key to change; and what cannot be said
plainly is refused in one line. Real files parsed by libcst and planned by `advise apply`'s own
code; the sites are given as the probe would record them (tests/test_apply.py runs the probe)."""

from __future__ import annotations

import os
import stat
import textwrap
from pathlib import Path

import pytest

from advisor.apply.command_line import Flag, run_with
from advisor.apply.patch import build
from advisor.apply.sites import Site, Sites


def _loader_script(tmp_path: Path, body: str, line_of: str = "DataLoader(") -> tuple[Path, Sites]:
    """train.py holding `body`, and sites naming its DataLoader(...) line as the loader that fed the steps."""
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(body))
    line = next(i for i, text in enumerate(script.read_text().splitlines(), 1) if line_of in text)
    return script, Sites(main=str(script), loaders=[Site(str(script), line, "main", "DataLoader")])


ARGPARSE = """\
    import argparse
    from torch.utils.data import DataLoader
    parser = argparse.ArgumentParser()
    parser.add_argument("-j", "--workers", type=int, default=4, choices=CHOICES)
    args = parser.parse_args()
    loader = DataLoader(data, batch_size=32, num_workers=args.workers)
"""


@pytest.mark.parametrize("argv, said, note", [
    ([], ["--epochs", "1", "--workers", "2"], None),
    (["-j", "4", "--epochs", "1"], ["--workers", "2", "--epochs", "1"], None),
    (["--workers=4", "--epochs", "1", "-j", "8"], ["--workers=4", "--epochs", "1", "--workers", "2"],
     "the --workers flag appears 2 times in the run's command (4, 8): the last wins, and it is the one set"),
])
def test_an_argparse_flag_is_set_in_the_runs_own_command(tmp_path, argv, said, note):
    """`num_workers=args.workers`: the run's command with the flag set where it passed it (its last
    occurrence: the last wins), else added; no file changes."""
    script, sites = _loader_script(tmp_path, ARGPARSE.replace("CHOICES", "None"))
    patched = build({"dataloader": {"num_workers": 2}}, sites, root=tmp_path, script="train.py",
                    argv=argv or ["--epochs", "1"])
    (part,) = patched.patch.parts
    assert patched.changed == {} and part.flags == ["--workers 2"]
    assert patched.argv == said and patched.patch.run_with == "python train.py " + " ".join(said)
    assert [line for line in part.told if "appears" in line] == ([note] if note else [])


def test_a_flag_whose_choices_lack_the_value_is_refused_not_written_over(tmp_path):
    script, sites = _loader_script(tmp_path, ARGPARSE.replace("CHOICES", "[0, 4, 8]"))
    patched = build({"dataloader": {"num_workers": 2}}, sites, root=tmp_path, script="train.py")
    (part,) = patched.patch.parts
    assert part.refused == ["train.py:4: the --workers flag's choices (0, 4, 8) do not hold 2: add it to them, "
                            "or make the change by hand"]
    assert not patched.applied and patched.patch.run_with == ""


def test_a_flag_the_run_already_passes_at_the_value_is_said_so(tmp_path):
    script, sites = _loader_script(tmp_path, ARGPARSE.replace("CHOICES", "None"))
    patched = build({"dataloader": {"num_workers": 2}}, sites, root=tmp_path, script="train.py", argv=["-j", "2"])
    assert patched.patch.parts[0].refused == ["the run already passes --workers 2"] and not patched.applied


def test_an_environment_variable_is_set_before_the_command(tmp_path):
    script, sites = _loader_script(tmp_path, """\
        import os
        from torch.utils.data import DataLoader
        loader = DataLoader(data, num_workers=int(os.environ.get("WORKERS", "0")))
    """)
    patched = build({"dataloader": {"num_workers": 3}}, sites, root=tmp_path, script="-m pkg.train", argv=["--fast"])
    assert patched.patch.run_with == "WORKERS=3 python -m pkg.train --fast" and patched.env == {"WORKERS": "3"}
    assert "comes from the environment variable WORKERS: run it with WORKERS=3" in patched.patch.parts[0].told[0]


def test_a_click_flag_that_can_only_turn_a_setting_on(tmp_path):
    """A click `is_flag` option is said bare (`--pin`); asked to set it off, it is refused."""
    body = """\
        import click
        from torch.utils.data import DataLoader

        @click.command()
        @click.option("--pin", is_flag=True, default=False)
        def main(pin):
            loader = DataLoader(data, num_workers=2, pin_memory=pin)
    """
    script, sites = _loader_script(tmp_path, body, "loader = ")
    on = build({"dataloader": {"pin_memory": True}}, sites, root=tmp_path, script="train.py")
    assert on.patch.run_with == "python train.py --pin"
    off = build({"dataloader": {"pin_memory": False}}, sites, root=tmp_path, script="train.py")
    assert off.patch.parts[0].refused == ["train.py:5: the --pin option (click) is a flag: it can only turn it on, "
                                          "not set False"]


YAML = """\
    # settings
    data:
      workers: 0  # loader processes
"""


def test_a_yaml_key_is_changed_in_its_file_with_its_comments(tmp_path):
    (tmp_path / "config.yaml").write_text(textwrap.dedent(YAML))
    script, sites = _loader_script(tmp_path, """\
        import yaml
        from torch.utils.data import DataLoader
        cfg = yaml.safe_load(open("config.yaml"))
        loader = DataLoader(data, num_workers=cfg["data"]["workers"])
    """)
    patched = build({"dataloader": {"num_workers": 2}}, sites, root=tmp_path, script="train.py")
    assert patched.changed[tmp_path / "config.yaml"][1].decode() == textwrap.dedent(YAML).replace("0  #", "2  #")
    assert "a/config.yaml" in patched.patch.diff and patched.patch.run_with == ""


@pytest.mark.parametrize("make, why", [
    (lambda p: p.unlink(), "config.yaml: cannot read it (No such file or directory): set data.workers in it by hand"),
    (lambda p: os.chmod(p, stat.S_IRUSR), "config.yaml is read-only: set data.workers: 2 in it by hand"),
    (lambda p: p.write_text("data:\n  batch: 2\n"), "config.yaml has no data.workers key (the script reads it): "
                                                      "set it there by hand"),
])
def test_a_config_file_that_cannot_take_the_value_is_refused_in_one_line(tmp_path, make, why, monkeypatch):
    config = tmp_path / "config.yaml"
    config.write_text(textwrap.dedent(YAML))
    make(config)
    if "read-only" in why:  # root may write a file whatever its mode: the check asks the kernel for this user
        monkeypatch.setattr("advisor.apply.config_file.os.access", lambda path, mode: os.stat(path).st_mode & stat.S_IWUSR)
    script, sites = _loader_script(tmp_path, """\
        import yaml
        from torch.utils.data import DataLoader
        with open("config.yaml") as f:
            cfg = yaml.safe_load(f)
        loader = DataLoader(data, num_workers=cfg["data"]["workers"])
    """)
    patched = build({"dataloader": {"num_workers": 2}}, sites, root=tmp_path, script="train.py")
    assert patched.patch.parts[0].refused == [why] and not patched.applied


def test_a_bare_option_already_passed_is_already_on():
    line = run_with("train.py", ["--amp", "--epochs", "1"], [Flag(("--amp",), None)])
    assert line.already == {Flag(("--amp",), None)} and line.args == ["--amp", "--epochs", "1"]


def test_a_hydra_config_key_is_its_override(tmp_path):
    """`cfg.data.workers` in a `@hydra.main` function: `data.workers=2` on the command line, replacing
    the override the run passed."""
    script, sites = _loader_script(tmp_path, """\
        import hydra
        from torch.utils.data import DataLoader

        @hydra.main(config_path="conf", config_name="config", version_base=None)
        def main(cfg):
            loader = DataLoader(data, num_workers=cfg.data.workers)
    """)
    patched = build({"dataloader": {"num_workers": 2}}, sites, root=tmp_path, script="train.py",
                    argv=["data.workers=0", "trainer.epochs=1"])
    assert patched.patch.run_with == "python train.py data.workers=2 trainer.epochs=1" and patched.changed == {}
    assert patched.patch.parts[0].told == ["train.py:4: num_workers comes from the Hydra config key data.workers: "
                                           "run it with data.workers=2"]


NANOGPT_COMPILE = """\
    import torch
    compile = False  # use torch.compile
    exec(open("configurator.py").read())
    model = Net()
    if compile:
        model = torch.compile(model)
    for x in data:
        loss = model(x).sum()
        loss.backward()
"""


def _model_script(tmp_path: Path, body: str) -> Sites:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(body))
    line = next(i for i, text in enumerate(script.read_text().splitlines(), 1) if "model(x)" in text)
    return Sites(main=str(script), model_calls=[Site(str(script), line, "<module>", "Net", params=1000)],
                 backward=[Site(str(script), line + 1, "<module>", "backward")])


def test_the_scripts_own_compile_switch_is_turned_never_a_second_compile(tmp_path):
    """nanoGPT compiles under `if compile:` (a configurator global): the fix is `--compile=True`;
    a `model = torch.compile(model)` after the script's own would compile it twice."""
    patched = build({"compile": True}, _model_script(tmp_path, NANOGPT_COMPILE), root=tmp_path, script="train.py")
    assert patched.changed == {} and patched.patch.run_with == "python train.py --compile=True", patched.patch
    always = _model_script(tmp_path, NANOGPT_COMPILE.replace("    if compile:\n        model", "    model"))
    refused = build({"compile": True}, always, root=tmp_path, script="train.py").patch.parts[0].refused
    assert refused == ["train.py:5: the script already compiles model (model = torch.compile(model))"], refused


def test_a_configurator_flag_passed_twice_is_said_with_the_one_set(tmp_path):
    """nanoGPT's `--key=value` form: a run that passed the key twice is told the last wins, as an
    argparse flag's run is (the note was matched to its flag by the words before the '=' and lost)."""
    (tmp_path / "configurator.py").write_text("")
    script, sites = _loader_script(tmp_path, """\
        from torch.utils.data import DataLoader
        workers = 0
        exec(open("configurator.py").read())
        loader = DataLoader(data, num_workers=workers)
    """)
    patched = build({"dataloader": {"num_workers": 2}}, sites, root=tmp_path, script="train.py",
                    argv=["--workers=4", "--workers=0"])
    assert patched.argv == ["--workers=4", "--workers=2"]
    assert "the --workers flag appears 2 times in the run's command (4, 0): the last wins, and it is the one set" \
        in patched.patch.parts[0].told, patched.patch.parts[0].told


def test_a_linked_config_file_is_written_through_its_link(tmp_path):
    """config.yaml a link to conf/base.yaml: the change goes into base.yaml and the link stays a link
    (as a linked Python file is written), never replaced by a copy beside it."""
    from advisor.apply.patch import write

    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "base.yaml").write_text(textwrap.dedent(YAML))
    (tmp_path / "config.yaml").symlink_to(Path("conf") / "base.yaml")
    script, sites = _loader_script(tmp_path, """\
        import yaml
        from torch.utils.data import DataLoader
        cfg = yaml.safe_load(open("config.yaml"))
        loader = DataLoader(data, num_workers=cfg["data"]["workers"])
    """)
    patched = build({"dataloader": {"num_workers": 2}}, sites, root=tmp_path, script="train.py")
    write(patched.changed)
    assert (tmp_path / "config.yaml").is_symlink()
    assert "workers: 2  # loader processes" in (tmp_path / "conf" / "base.yaml").read_text()
