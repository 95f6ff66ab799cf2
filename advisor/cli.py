"""The `advise` command: a thin click shell over the library (parse, call, print, exit code).

Exit codes: 0 ok; 1 the user's script failed, timed out or made no steps; 2 bad usage or
input; 3 `compare` found a regression; 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from . import __version__

from .cli_exit import EXIT_USAGE, fail  # noqa: F401  (re-exported for subcommands)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="advise")
def main() -> None:
    """Profile a PyTorch training script, find its bottlenecks, and measure the fixes."""


@main.command(context_settings={"ignore_unknown_options": True})
@click.argument("script", type=click.Path(exists=True, dir_okay=False))
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@click.option("--steps", default=20, show_default=True, type=click.IntRange(min=1), help="Measured steps.")
@click.option("--warmup", default=5, show_default=True, type=click.IntRange(min=0), help="Un-measured warm-up steps.")
@click.option("--profile-steps", default=5, show_default=True, type=click.IntRange(min=0),
              help="How many of the last measured steps run under torch.profiler (0: none).")
@click.option("--out", default="advise-report", show_default=True, type=click.Path(file_okay=False), help="Run dir.")
@click.option("--timeout", "timeout_s", default=600.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Seconds before the script's whole process group is stopped.")
@click.option("--json", "as_json", is_flag=True, help="Print report.json to stdout instead of the summary.")
def profile(script, script_args, steps, warmup, profile_steps, out, timeout_s, as_json):
    """Run SCRIPT under the probe: advise profile train.py -- --lr 0.1"""
    from .pipeline import profile_script

    sys.exit(profile_script(
        script=script, script_args=list(script_args), steps=steps, warmup=warmup, profile_steps=profile_steps,
        out=Path(out), timeout_s=timeout_s, as_json=as_json,
    ))


@main.command()
@click.argument("trace", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the report JSON to stdout.")
@click.option("--out", default=None, type=click.Path(file_okay=False), help="Also write report.json into this dir.")
def analyze(trace, as_json, out):
    """Analyze a Kineto trace (.json or .json.gz) a user already has."""
    from .pipeline import analyze_trace

    sys.exit(analyze_trace(Path(trace), as_json=as_json, out=Path(out) if out else None))
