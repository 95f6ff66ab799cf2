"""The `advise` command: a thin click shell over the library (parse, call, print, exit code).

Exit codes: 0 ok; 1 the user's script failed, timed out or made no steps; 2 bad usage or
input; 3 `compare` found a regression; 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import atexit
import importlib.machinery
import json
import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Callable, NoReturn, Sequence, TypeVar

import click

from .. import __version__, notebook

from .cli_exit import OneLineError, fail, run_dir_errors
from .outputs import RenderError, render_report, saved_report
from ..analysis.memory import parse_size
from ..exit_codes import EXIT_OK, signal_exit
from ..job.rank import detect
from ..report import ReportError, load_report
from ..reports.renderers import AB_RENDERERS, COMPARE_RENDERERS, REPORT_RENDERERS, TRACE_DIFF_RENDERERS
from ..run_dir import interrupt
from ..run_dir.layout import NoRunDir, report_json
from ..schema import schema_text

if TYPE_CHECKING:
    from ..engine import Settings

FC = TypeVar("FC", bound=Callable[..., None])  # a command's function, its options added


def _rule_options(command: FC) -> FC:
    """--select / --ignore / --config, shared by the commands that run the rules."""
    command = click.option("--config", default=None, metavar="FILE",
                           help="Rule settings: a pyproject.toml ([tool.advise]) or an advise.toml. "
                                "Default: the nearest pyproject.toml with [tool.advise].")(command)
    command = click.option("--ignore", multiple=True, metavar="CODES",
                           help="Rules to skip: codes, prefixes or names, comma-separated (e.g. MEM001,GPU).")(command)
    return click.option("--select", multiple=True, metavar="CODES",
                        help="Only these rules: codes, prefixes, names or ALL, comma-separated.")(command)


class _Number(click.FloatRange):
    """A float option in a range; NaN is refused (it passes every range comparison, as a timeout never
    reached and a budget never spent)."""

    def convert(self, value: float, param: click.Parameter | None, ctx: click.Context | None) -> float:
        number = super().convert(value, param, ctx)
        if number != number:
            self.fail(f"{value!r} is not a number.", param, ctx)
        return number


def _run_dir(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """--out: an empty path (an unset ``$OUT`` in a CI script) would be the current directory,
    where advise would clear and write the user's own files; refused."""
    if value is not None and not value.strip():
        raise click.BadParameter("an empty path is not a run dir (an unset variable?); name a folder", ctx, param)
    return value


def _rule_settings(select: tuple[str, ...], ignore: tuple[str, ...], config: str | None, search_from: Path) -> Settings:
    """Rule settings from the config and the command line; a mistake is one line and exit 2."""
    from ..engine import ConfigError, load_settings  # engine: 23 ms, only where rules run

    try:
        return load_settings(config=config, search_from=search_from, select=select, ignore=ignore)
    except ConfigError as exc:
        fail(str(exc))


def _one_line(exc: click.UsageError) -> click.ClickException:
    """A usage error as every other advise error (:class:`OneLineError`)."""
    if isinstance(exc, click.exceptions.NoArgsIsHelpError):  # bare `advise`: the help, as click prints it
        return exc
    hint = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx is not None else ""
    return OneLineError(exc.format_message() + hint)


class _Interrupted(click.ClickException):
    """Ctrl-C, SIGTERM or SIGHUP (advisor.run_dir.interrupt): one line and the signal's exit code, not click's
    "Aborted!" and exit 1 (the code of a failed script)."""

    def __init__(self, exc: KeyboardInterrupt) -> None:
        signum = getattr(exc, "signum", None)
        super().__init__(f"interrupted ({interrupt.describe(signum)})")
        self.exit_code = signal_exit(signum)  # type: ignore[misc]  # click types it a ClassVar; this one is the signal's

    def show(self, file: IO[str] | None = None) -> None:
        click.echo(f"advise: {self.format_message()}", err=True)


class _Advise(click.Group):
    """The command group; its parse errors, and its commands', are one line (docs/reference/exit-codes.md)."""

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as exc:
            raise _one_line(exc) from None
        except KeyboardInterrupt as exc:
            raise _Interrupted(exc) from None

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            raise _one_line(exc) from None
        except KeyboardInterrupt as exc:
            raise _Interrupted(exc) from None


@dataclass
class Invocation:
    """What the commands know of how they were called (click's context object, ``ctx.obj``).

    `own_process`: the command is the whole process (:func:`entry`), not a test's CliRunner call;
    `reads`: the traces `advise analyze` names, being read ahead already (an
    :class:`advisor.trace.ReadAhead`), or None."""

    own_process: bool = False
    reads: object = None


@click.group(cls=_Advise, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="advise")
def main() -> None:
    """Profile a PyTorch training script, find its bottlenecks, and measure the fixes."""


def _history_file(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """--history FILE: a file advise may append to (its folder exists; not a folder, not a link)."""
    if value is None:
        return None
    path = Path(value)
    if path.is_dir() or path.is_symlink():
        raise click.BadParameter(f"{value!r} is {'a folder' if path.is_dir() else 'a link'}: name a file", param=param)
    if not path.parent.is_dir():
        raise click.BadParameter(f"{value!r}: its folder {str(path.parent)!r} does not exist", param=param)
    if path.exists() and not os.access(path, os.W_OK) or not path.exists() and not os.access(path.parent, os.W_OK):
        raise click.BadParameter(f"{value!r} cannot be written", param=param)
    return value


# Options come before the script; every word after it is the script's, as with python, torchrun,
# pyinstrument and nsys (click stops parsing options at the first argument).
@main.command(context_settings={"allow_interspersed_args": False})
@click.argument("script")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@click.option("-m", "module", is_flag=True,
              help="SCRIPT is a module name, run as `python -m SCRIPT ARGS` runs it (sys.path, __main__, __spec__).")
@click.option("--nproc-per-node", "nproc", default=1, show_default=True, type=click.IntRange(min=1),
              help="Start this many ranks through torch.distributed.run (--standalone), each probed.")
@click.option("--steps", default=20, show_default=True, type=click.IntRange(min=1), help="Measured steps.")
@click.option("--warmup", default=5, show_default=True, type=click.IntRange(min=0), help="Un-measured warm-up steps.")
@click.option("--profile-steps", default=5, show_default=True, type=click.IntRange(min=0),
              help="How many of the last measured steps run under torch.profiler (0: none).")
@click.option("--out", default="advise-report", show_default=True, type=click.Path(file_okay=False), callback=_run_dir,
              help="Run dir.")
@click.option("--timeout", "timeout_s", default=600.0, show_default=True, type=_Number(min=0, min_open=True),
              help="Seconds before the script's whole process group is stopped.")
@click.option("--json", "as_json", is_flag=True, help="Print report.json to stdout instead of the summary.")
@click.option("--no-experiments", is_flag=True, help="Diagnose only: do not re-run the script to measure fixes.")
@click.option("--max-experiments", default=12, show_default=True, type=click.IntRange(min=0),
              help="At most this many fix measurements (sweep points count one each).")
@click.option("--time-budget", "time_budget_s", default=None, type=_Number(min=0),
              help="Seconds the experiments may take in all  [default: 1.35x the run's time to its profiled window, "
                   "5-240 s; 900 with --fresh-runs]. The fixes that do not fit are named, each with the command "
                   "that measures it.")
@click.option("--safe-only", is_flag=True, help="Skip fixes that change numerics (bf16, TF32, bigger batch).")
@click.option("--fresh-runs", is_flag=True,
              help="Measure each fix in a fresh re-run of the script instead of as arms of the profiled run.")
@click.option("--confirm", is_flag=True,
              help="Also measure the recommended configuration in fresh runs of the script, as you will apply it.")
@click.option("--baseline", default=None, metavar="BASELINE.json",
              help="After the run, compare with this report as `advise compare` does; exit 3 on a regression.")
@click.option("--max-regression", default="10%", show_default=True, metavar="PCT",
              help="With --baseline: slower than this (and significant) is a regression.")
@click.option("--memory-budget", default=None, metavar="SIZE",
              help="The memory the run may use (160MB, 20GiB); default: the device's capacity.")
@click.option("--history", default=None, metavar="FILE", callback=_history_file,
              help="Append the run's record (commit, machine, step time, throughput, MFU, memory) to FILE: "
                   "advise history FILE shows the trend.")
@_rule_options
def profile(script: str, script_args: Sequence[str], module: bool, nproc: int, steps: int, warmup: int, profile_steps: int,
            out: str, timeout_s: float, as_json: bool, no_experiments: bool, max_experiments: int, time_budget_s: float | None,
            safe_only: bool, fresh_runs: bool, confirm: bool, baseline: str | None, max_regression: str,
            memory_budget: str | None, history: str | None, select: tuple[str, ...], ignore: tuple[str, ...],
            config: str | None) -> None:
    """Run SCRIPT under the probe: advise profile --steps 30 train.py --lr 0.1

    advise's options come before SCRIPT; everything after it goes to the script, as `python
    SCRIPT ARGS` would pass it (a `--` right after SCRIPT is dropped).
    """
    _check_target(script, module)
    _refuse_launcher(script, module, list(script_args))
    if nproc > 1 and _under_a_launcher():
        fail("--nproc-per-node starts the ranks itself; under torchrun, run advise without it (each rank probes itself)")
    script_args = _script_args(script, list(script_args))
    budget = _size(memory_budget, "--memory-budget") if memory_budget is not None else None
    folder = Path.cwd() if module else Path(script).parent
    settings = _rule_settings(select, ignore, config, folder)  # a bad selection fails before the run
    from .pipeline import ExperimentOptions, profile_script  # pipeline: 360 ms (pandas, the probe), only for profile

    with run_dir_errors(Path(out)):  # a full, read-only or forbidden run dir: one line, exit 2
        code = profile_script(
            script=script, script_args=script_args, module=module, nproc=nproc, steps=steps, warmup=warmup, profile_steps=profile_steps,
            out=Path(out), timeout_s=timeout_s, as_json=as_json,
            experiments=ExperimentOptions(not no_experiments, max_experiments, time_budget_s, safe_only, fresh_runs, confirm),
            baseline=baseline, max_regression=_percent(max_regression, "--max-regression"),
            rule_settings=settings, memory_budget_bytes=budget, history=history,
        )
    sys.exit(code)


def _under_a_launcher() -> bool:
    return detect().multi


LAUNCHERS = {"torchrun", "torch.distributed.run", "torch.distributed.launch"}


def _refuse_launcher(script: str, module: bool, args: list[str]) -> None:
    """`advise profile torchrun ...` would probe the launcher, not the training: say what to write."""
    name = script if module else Path(script).name
    if name not in LAUNCHERS and not (not module and Path(script).resolve().parts[-3:] == ("torch", "distributed", "run.py")):
        return

    nproc = "N"
    for i, word in enumerate(args):
        if word.startswith(("--nproc-per-node", "--nproc_per_node")):
            nproc = word.split("=", 1)[1] if "=" in word else (args[i + 1:i + 2] or ["N"])[0]
    # The training script: the first .py word, or -m and its module; the launcher's options before it go.
    at = next((i for i, w in enumerate(args) if w.endswith(".py") or (w == "-m" and i + 1 < len(args))), None)
    rest = args[at:] if at is not None else ["train.py"]
    fail(f"advise starts the ranks itself; profile the training script, not the launcher: "
         f"{shlex.join(['advise', 'profile', '--nproc-per-node', nproc, *rest])}")


def _check_target(script: str, module: bool) -> None:
    """A missing script or module: one usage line before anything runs."""
    def bad(message: str) -> NoReturn:
        raise click.BadParameter(message, param_hint="'SCRIPT'")

    if not module:
        if Path(script).is_dir():
            bad(f"File {script!r} is a directory.")
        if not Path(script).is_file():
            bad(f"File {script!r} does not exist.")
        if notebook.is_notebook(script):
            try:
                notebook.read(script)
            except notebook.NotebookError as exc:
                fail(str(exc))
        return

    if not all(part.isidentifier() for part in script.split(".")):
        bad(f"{script!r} is not a module name.")
    top = script.split(".")[0]
    # Only the top-level package is looked up: importing it here would run the user's code twice.
    if top not in sys.builtin_module_names and importlib.machinery.PathFinder.find_spec(top, [str(Path.cwd()), *sys.path[1:]]) is None:
        bad(f"No module named {top!r} (looked in {Path.cwd()} and the installed packages).")


def _script_args(script: str, args: list[str]) -> list[str]:
    """The script's own arguments: a leading `--` dropped; the old `SCRIPT --steps 5 -- ARGS` refused.

    Before advise's options had to come first, they could follow the script with the script's own
    after a `--`. Those words would now silently reach the script, so that form is an error that
    says how to write it.
    """
    if args[:1] == ["--"]:
        return args[1:]
    if "--" in args:
        k = args.index("--")
        if _all_profile_options(args[:k]):
            rewritten = shlex.join(["advise", "profile", *args[:k], script, *args[k + 1:]])
            fail(f"advise's options go before the script; everything after it is the script's: {rewritten}")
    return args


def _all_profile_options(words: list[str]) -> bool:
    """Whether `words` parse completely as `advise profile` options (`--steps 5`, `--steps=5`, `--json`)."""
    ctx = click.get_current_context()
    options = {name: p for p in ctx.command.params if isinstance(p, click.Option) for name in p.opts + p.secondary_opts}
    i = 0
    while i < len(words):
        name, eq, _ = words[i].partition("=")
        option = options.get(name)
        if option is None or (option.is_flag and eq):
            return False
        i += 1 if option.is_flag or eq else 2
    return bool(words) and i == len(words)


@main.command()
@click.argument("traces", nargs=-1, required=True, metavar="TRACE...", type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print the report JSON to stdout.")
@click.option("--out", default=None, type=click.Path(file_okay=False), callback=_run_dir,
              help="Also write report.json into this dir.")
@_rule_options
def analyze(traces: tuple[str, ...], as_json: bool, out: str | None, select: tuple[str, ...], ignore: tuple[str, ...],
            config: str | None) -> None:
    """Analyze Kineto traces (.json or .json.gz) a user already has: one, or one per rank (or a dir of them)."""
    from ..trace import ReadAhead, start_reading  # trace: 10 ms, only for analyze

    invocation = click.get_current_context().ensure_object(Invocation)
    reads = invocation.reads  # started by advisor.commands.launch from argv, before click imported
    if not isinstance(reads, ReadAhead):  # (launch did not: a test's CliRunner call) read while the rest imports
        reads = start_reading(traces)
    settings = _rule_settings(select, ignore, config, Path.cwd())  # a bad selection fails before any work
    from .analyze import analyze as run  # analyze: 360 ms (pandas), only for analyze

    with run_dir_errors(Path(out) if out else None):
        code = run([Path(t) for t in traces], reads, as_json=as_json, out=Path(out) if out else None,
                   rule_settings=settings)
    _leave(code, invocation.own_process)


@main.command("history")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--out", default="advise-history", show_default=True, type=click.Path(file_okay=False),
              help="Writes history.html (the trend per metric, the change points, offline) and history.md here.")
@click.option("--format", "fmt", default="terminal", show_default=True, type=click.Choice(["terminal", "markdown"]))
def history(file: str, out: str, fmt: str) -> None:
    """The trend of FILE (written by advise profile --history and advise ab --history): advise history runs.jsonl

    Absolute figures are compared only within one fingerprint (machine, CPU or GPU model, torch):
    a change of those is marked, never named a regression. Change points are found by a stated
    method (binary segmentation with Welch's t, Bonferroni over the splits) and named by commit.
    """
    from .history import show_history

    sys.exit(show_history(file, Path(out), fmt))


def entry(reads: object = None) -> None:
    """The `advise` command as a process (through :mod:`advisor.commands.launch`); `reads`: the traces
    `advise analyze` names, being read ahead already (an :class:`advisor.trace.ReadAhead`)."""
    try:
        main(prog_name="advise", obj=Invocation(own_process=True, reads=reads))
    except SystemExit as exc:  # every command's exit, click's own included: no teardown (see _leave)
        code = exc.code
        _leave(code if isinstance(code, int) else 0 if code is None else 1, own_process=True)


def _leave(code: int, own_process: bool) -> NoReturn:
    """Exit with `code` once the output is out, skipping the interpreter's teardown where the
    command is the whole process: freeing pandas' frames and modules one by one took 80 ms of a
    0.9 s `advise analyze`, and the teardown restores the default signal handlers first, so a
    Ctrl-C then killed advise by the raw signal after a run it had reported `ok`. Exit handlers
    still run; files are closed by then (atomic writes)."""
    if not own_process:
        sys.exit(code)

    interrupt.hold()  # the exit code is decided: a signal now must not kill the process on its way out

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:  # None: started with the stream closed (`>&-`)
                stream.flush()
        except (OSError, ValueError):  # a closed pipe (`| head`): nothing more can reach it
            pass
    os._exit(code)


@main.command("report")
@click.argument("run_dir", metavar="RUN_DIR", type=click.Path(exists=True))
@click.option("--format", "fmt", default="html", show_default=True, type=click.Choice(list(REPORT_RENDERERS)),
              help="html: rewrite report.html in RUN_DIR; markdown: print the summary to stdout; "
                   "json: print the short summary for agents and bots (`advise schema summary`).")
def report_command(run_dir: str, fmt: str) -> None:
    """Re-render RUN_DIR's report (its report.json) without re-running anything."""
    try:
        path = report_json(run_dir)
    except NoRunDir as exc:
        fail(str(exc))
    if Path(run_dir).is_dir() and not path.exists():
        _report_from_traces(Path(run_dir))
    try:
        report = load_report(path)
    except ReportError as exc:
        fail(str(exc))
    renderer = REPORT_RENDERERS[fmt]
    try:
        target: str | Path = "-"
        if renderer.page:
            from ..reports.html import page_path  # the page's renderer: 290 ms (jinja2), only for the page

            target = page_path(report, path.parent)
        written = render_report(saved_report(report, path), renderer, target)
    except (RenderError, ValueError) as exc:  # a report outside the report.json contract; a page name leading out
        fail(f"{path}: {exc}")
    except OSError as exc:
        fail(f"cannot write the report into {path.parent}: {exc.strerror or exc}")
    if written is not None:
        click.echo(written)
    sys.exit(EXIT_OK)


def _report_from_traces(run_dir: Path) -> None:
    """A run dir without report.json but with traces (one node's part of a job: the job's report is
    on rank 0's node; or a report removed): its ranks analysed together become its report.json."""
    from .analyze import analyze_traces  # analyze: 360 ms (pandas), only for analyze
    from ..trace import ReadAhead, trace_files  # trace: 10 ms, only for analyze

    try:
        traces = trace_files([run_dir])
    except ValueError:
        return  # load_report says what is missing
    click.echo(f"advise: {run_dir} has no report.json; analysing its {len(traces)} trace"
               f"{'s' if len(traces) > 1 else ''} into one", err=True)
    with run_dir_errors(run_dir):
        analyze_traces([run_dir], ReadAhead().start(traces), as_json=False, out=run_dir, quiet=True)


@main.command("apply")
@click.argument("run_dir", metavar="RUN_DIR", type=click.Path())
@click.option("--write", is_flag=True, help="Write the patch into the script's files, in place.")
@click.option("-o", "--output", default=None, metavar="FILE", help="Save the patch to FILE (git apply FILE from the root it names).")
@click.option("--check", is_flag=True,
              help="Time the patched script against the unpatched one in fresh runs (copies of the checkout, "
                   "interleaved as advise ab runs them) and say whether the arm's speed-up held.")
@click.option("--rounds", default=3, show_default=True, type=click.IntRange(min=2),
              help="With --check: pairs of runs (unpatched, patched).")
@click.option("--steps", default=None, type=click.IntRange(min=2),
              help="With --check: measured steps per run (default: as many as the profiled run measured, at least 20).")
@click.option("--warmup", default=None, type=click.IntRange(min=0), help="With --check: warm-up steps per run (default 5).")
def apply_command(run_dir: str, write: bool, output: str | None, check: bool, rounds: int, steps: int | None,
                  warmup: int | None) -> None:
    """Write RUN_DIR's recommended configuration into the profiled script as a patch: advise apply --write advise-report

    The patch (a unified diff, git apply-able from the script's checkout) goes to stdout; each
    change that could not be made safely is one line on stderr naming the file:line and why.
    """
    if not str(run_dir).strip():
        fail("an empty path is not a run dir (an unset variable?)")
    from .apply import apply_run  # apply: libcst and the gate, only for apply

    sys.exit(apply_run(Path(run_dir), write=write, output=output, check=check, rounds=rounds, steps=steps, warmup=warmup))


@main.command("rules")
@click.argument("name", required=False, metavar="[NAME|CODE]")
@click.option("--json", "as_json", is_flag=True, help="Print the catalogue (or the rule) as JSON.")
def rules_command(name: str | None, as_json: bool) -> None:
    """List the rules, or print one rule's documentation: advise rules DL001"""
    from ..engine import describe  # engine: 23 ms, only for the rules
    from ..rules.registry import load_rules  # rules: 17 ms, only for the rules

    catalogue = load_rules()
    for warning in catalogue.warnings:
        click.echo(f"advise: warning: {warning}", err=True)
    if name is None:
        if as_json:
            click.echo(json.dumps([describe(r) for r in catalogue.rules], indent=2))
            return
        width = max((len(r.name) for r in catalogue.rules), default=0)
        for r in catalogue.rules:
            origin = "" if r.origin == "advise" else f"  [{r.origin}]"
            click.echo(f"{r.code:<8} {r.name:<{width}}  {r.summary}{origin}")
        return
    found = catalogue.find(name)
    if found is None:
        fail(f"unknown rule '{name}' (see `advise rules` for the catalogue)")
    if as_json:
        click.echo(json.dumps(describe(found, doc=True), indent=2))
        return
    click.echo(f"# {found.name} ({found.code})\n")
    click.echo(f"From {found.origin}; status: {found.status}.")
    if found.options:
        click.echo("Defaults: " + ", ".join(f"{o.key} = {o.default!r}" for o in found.options) + ".")
    click.echo("")
    click.echo(found.doc.rstrip())


@main.command("schema")
@click.argument("name", default="report", type=click.Choice(["report", "compare", "summary"]))
def schema_command(name: str) -> None:
    """Print the JSON Schema of report.json (or compare.json, or `advise report --format json`'s summary)."""
    click.echo(schema_text(name), nl=False)


def _size(text: str, option: str) -> int:
    try:
        return parse_size(text)
    except ValueError as exc:
        fail(f"{option}: {exc}")


def _percent(text: str, option: str) -> float:
    from ..gate.compare import parse_percent  # compare: 300 ms (pandas, scipy), only for compare

    try:
        return parse_percent(text)
    except ValueError:
        fail(f"{option}: {text!r} is not a percentage (e.g. 5%)")


@main.command()
@click.argument("baseline", metavar="BASELINE.json")
@click.argument("current", metavar="CURRENT.json")
@click.option("--max-regression", default="10%", show_default=True, metavar="PCT",
              help="Slower than this (throughput or median step time) AND significant is a regression.")
@click.option("--max-memory-regression", default="20%", show_default=True, metavar="PCT",
              help="Peak memory higher than this (and by 64 MiB or more) is a regression.")
@click.option("--alpha", default=0.01, show_default=True, type=_Number(0, 0.5, min_open=True),
              help="Significance level of the one-sided Mann-Whitney U test over per-step times.")
@click.option("--format", "fmt", default="terminal", show_default=True, type=click.Choice(list(COMPARE_RENDERERS)))
@click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
@click.option("--junit", default=None, metavar="FILE", help="Also write JUnit XML: one testcase per metric.")
@click.option("--fail-on-new-findings", is_flag=True, help="A finding CURRENT has and BASELINE lacks fails the gate.")
@click.option("--force", is_flag=True, help="Compare even different scripts, devices or schema versions (with a warning).")
@click.option("--ops", is_flag=True, help="Name the ops and kernels whose time per step grew even without a regression.")
@click.option("--inconclusive", default="fail", show_default=True, type=click.Choice(["fail", "pass"]),
              help="What a comparison that cannot tell exits (slower than the threshold, not significant): "
                   "fail (exit 4) or pass (exit 0, the verdict still says it).")
def compare(baseline: str, current: str, max_regression: str, max_memory_regression: str, alpha: float, fmt: str, as_json: bool,
            junit: str | None, fail_on_new_findings: bool, force: bool, ops: bool, inconclusive: str) -> None:
    """Regression gate: exit 3 when CURRENT is slower than BASELINE beyond noise, 4 when it cannot tell.

    BASELINE and CURRENT are report.json files (or run dirs). Markdown is also appended to
    $GITHUB_STEP_SUMMARY when that is set. Two Kineto traces (A.json.gz B.json.gz) are compared
    op by op: the ops and kernels whose time per step grew most (exit 0).
    """
    from .ci_gate import compare_traces, is_trace, run_compare  # the gate's commands: 320 ms (pandas), only for compare

    fmt = "json" if as_json else fmt
    if is_trace(baseline) and is_trace(current):
        sys.exit(compare_traces(baseline, current, TRACE_DIFF_RENDERERS[fmt]))

    sys.exit(run_compare(
        baseline, current, max_regression=_percent(max_regression, "--max-regression"),
        max_memory_regression=_percent(max_memory_regression, "--max-memory-regression"), alpha=alpha,
        renderer=COMPARE_RENDERERS[fmt], junit=junit, fail_on_new_findings=fail_on_new_findings, force=force, ops=ops,
        inconclusive=inconclusive,
    ))


@main.command(context_settings={"allow_interspersed_args": False})
@click.argument("script")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@click.option("--base", "base", required=True, metavar="DIR", help="A checkout of the base revision.")
@click.option("--candidate", "candidate", required=True, metavar="DIR", help="A checkout of the candidate revision.")
@click.option("-m", "module", is_flag=True, help="SCRIPT is a module name, run as `python -m SCRIPT` in each checkout.")
@click.option("--nproc-per-node", "nproc", default=1, show_default=True, type=click.IntRange(min=1),
              help="Start this many ranks per run through torch.distributed.run.")
@click.option("--steps", default=20, show_default=True, type=click.IntRange(min=2), help="Measured steps per run.")
@click.option("--warmup", default=5, show_default=True, type=click.IntRange(min=0), help="Un-measured warm-up steps per run.")
@click.option("--profile-steps", default=3, show_default=True, type=click.IntRange(min=0),
              help="Steps of each run under torch.profiler, for the slower-ops table (0: none).")
@click.option("--rounds", default=6, show_default=True, type=click.IntRange(min=2),
              help="Pairs of runs (base, candidate) before the first look.")
@click.option("--max-rounds", default=20, show_default=True, type=click.IntRange(min=2),
              help="The budget: a suspected regression gets more rounds, up to this many pairs.")
@click.option("--mode", default="duet", show_default=True, type=click.Choice(["duet", "sequential"]),
              help="duet: both revisions' scripts alive at once, taking turns in half-second windows, the pair "
                   "restarted each round (a neighbour's burst falls on both); sequential: whole runs one after the "
                   "other (where both cannot live at once; always with --nproc-per-node above 1).")
@click.option("--turn", "turn_s", default=0.5, show_default=True, type=click.FloatRange(min=0.05),
              help="--mode duet: seconds of each side's turn (a turn holds at least 3 steps).")
@click.option("--turns", default=12, show_default=True, type=click.IntRange(min=3),
              help="--mode duet: turns per side in each restart of the pair.")
@click.option("--window", "window_s", default=6.0, show_default=True, type=click.FloatRange(min=0),
              help="--mode sequential: seconds each run measures: a pilot run times a step, and the runs take as many "
                   "steps as fill this (at least --steps), so a neighbour's burst cannot cover a whole run (0: --steps "
                   "alone, no pilot).")
@click.option("--time-budget", "time_budget_s", default=300.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Seconds for the whole gate: no round starts that would end past it, and the look there is the last.")
@click.option("--max-regression", default="5%", show_default=True, metavar="PCT",
              help="A step time (each run's 5th-percentile step) worse than this, beyond the noise floor and "
                   "significant, fails; the gate passes when its 95% upper bound is below this.")
@click.option("--max-memory-regression", default="20%", show_default=True, metavar="PCT",
              help="Peak memory higher than this (and by 64 MiB or more), significant, fails.")
@click.option("--alpha", default=0.05, show_default=True, type=_Number(0, 0.5, min_open=True),
              help="The gate's false-alarm rate, over all gated metrics and all looks together.")
@click.option("--ops", is_flag=True, help="Name the slower ops even without a regression.")
@click.option("--inconclusive", default="fail", show_default=True, type=click.Choice(["fail", "pass"]),
              help="What a gate that could not tell exits: fail (exit 4: the threshold still inside the interval at "
                   "the last look, or this runner's noise floor above it) or pass (exit 0, the verdict still says it).")
@click.option("--out", default="ab-report", show_default=True, type=click.Path(file_okay=False),
              help="Output dir: base/round-NN and candidate/round-NN run dirs, ab.json, ab.html, summary.md.")
@click.option("--timeout", "timeout_s", default=600.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Seconds before one run's script is stopped.")
@click.option("--format", "fmt", default="terminal", show_default=True, type=click.Choice(list(AB_RENDERERS)))
@click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
@click.option("--history", default=None, metavar="FILE", callback=_history_file,
              help="Append the decision's record (the candidate's commit, the base's, the verdict, the ratio and its "
                   "interval) to FILE: advise history FILE shows the trend.")
def ab(script: str, script_args: tuple[str, ...], base: str, candidate: str, module: bool, nproc: int, steps: int, warmup: int,
       profile_steps: int, rounds: int, max_rounds: int, mode: str, turn_s: float, turns: int, window_s: float, time_budget_s: float, max_regression: str,
       max_memory_regression: str, alpha: float, ops: bool, inconclusive: str, out: str, timeout_s: float, fmt: str,
       as_json: bool, history: str | None) -> None:
    """CI gate: profile SCRIPT in two checkouts, interleaved; exit 3 on a regression, 4 when it cannot tell.

    advise ab --base ../base --candidate . train.py --epochs 1

    SCRIPT (a path relative to each checkout) runs in each checkout: by default both at once, taking
    turns in short windows, the pair restarted each round; the decision reads the paired rounds and
    says the smallest change it could see. Markdown is also appended to $GITHUB_STEP_SUMMARY when
    that is set.
    """
    from ..gate.ab import ABOptions  # ab: 320 ms (pandas), only for ab
    from .ci_gate import run_ab  # the gate's commands: 320 ms (pandas), only for ab

    if max_rounds < rounds:
        fail(f"--max-rounds {max_rounds} is below --rounds {rounds}")
    if profile_steps >= steps:
        fail(f"--profile-steps {profile_steps} leaves no un-profiled step of --steps {steps} to time")
    options = ABOptions(steps=steps, warmup=warmup, profile_steps=profile_steps, module=module, nproc=nproc,
                        timeout_s=timeout_s, rounds=rounds, max_rounds=max_rounds, alpha=alpha,
                        max_regression=_percent(max_regression, "--max-regression"),
                        max_memory_regression=_percent(max_memory_regression, "--max-memory-regression"), ops=ops,
                        inconclusive=inconclusive, window_s=window_s, time_budget_s=time_budget_s, turn_s=turn_s,
                        turns=turns)
    args = list(script_args)
    sys.exit(run_ab(base, candidate, script, args[1:] if args[:1] == ["--"] else args, options, Path(out),
                    AB_RENDERERS["json" if as_json else fmt], mode, history))
