"""`advise analyze`: the Profile and rules from Kineto traces a user already has.

The read choreography lives here, and only here:

1. the traces are being read ahead already (:class:`advisor.trace.ReadAhead`, started once: by
   :mod:`advisor.commands.launch` from argv before the CLI imports, else by the command itself);
2. one trace: its reader is asked for half of what it has left (:meth:`ReadAhead.ask`) and the
   page's renderers import meanwhile; then its frames are collected (:meth:`ReadAhead.frames`);
3. a job's traces (one per rank): each rank's frames are collected in turn and reduced at once to
   its per-rank summary (:mod:`advisor.job.rank_summary`, the one a launched job's ranks send rank 0);
   only the lowest rank keeps its frames (the report's steps and single-rank findings are its),
   so memory holds the few traces being read, whatever the number of ranks;
4. the page's trace tables are built in a forked child while the rules run (:func:`page_tables`).
"""

from __future__ import annotations

import resource
from typing import TYPE_CHECKING, Any

from pathlib import Path

from advisor.reports import terminal

from .. import report as report_mod
from .cli_exit import DISK_ERRNOS, fail
from ..exit_codes import EXIT_OK
from .outputs import diagnose, emit, say_html, write_renderings
from ..profile import Profile
from ..job.rank_summary import summarize, to_profile
from ..analysis.temporal import BASIS
from ..trace import ReadAhead, TraceError, forked, trace_files

if TYPE_CHECKING:
    from ..engine import Settings


def analyze(paths: list[Path], reads: ReadAhead, *, as_json: bool, out: Path | None, rule_settings: Settings | None = None,
            quiet: bool = False) -> int:
    """`advise analyze PATH...`: one trace file, or a job's traces (several files, or folders of them).

    `reads`: the command's read-ahead, started on these paths' traces (:func:`advisor.trace.start_reading`)."""
    if len(paths) == 1 and not Path(paths[0]).is_dir():
        return analyze_trace(Path(paths[0]), reads, as_json=as_json, out=out, rule_settings=rule_settings)
    return analyze_traces(paths, reads, as_json=as_json, out=out, rule_settings=rule_settings, quiet=quiet)


def analyze_trace(path: Path, reads: ReadAhead, *, as_json: bool, out: Path | None, rule_settings: Settings | None = None) -> int:
    """One trace: the same Profile and rules as a run's."""
    reads.ask(path)  # the reader splits what it has left while the renderers import
    _import_renderings()
    try:
        profile = Profile.from_trace(path, read=reads.frames)
    except TraceError as exc:
        fail(str(exc))
    return _analyze(profile, str(path), {"trace": str(path.resolve())}, as_json=as_json, out=out,
                    rule_settings=rule_settings)


def analyze_traces(paths: list[Path], reads: ReadAhead, *, as_json: bool, out: Path | None, rule_settings: Settings | None = None,
                   quiet: bool = False) -> int:
    """A multi-rank job: one trace per rank (files, or folders of them), analysed together.

    The report's steps and single-rank findings are the lowest rank's; the cross-rank rules read
    every rank through ``profile.ranks`` (the lowest rank's Profile, the others' summaries);
    ``ranks`` in report.json has each rank's medians.
    """
    files = rank_trace_files(paths)
    _import_renderings()
    primary, summaries, traces = _read_ranks(files, reads)
    others = [s for s in summaries if s["rank"] != primary.env.rank]
    primary.ranks = [primary] + [to_profile(s) for s in others]
    for s in others:
        primary.meta.notes += [f"rank {s['rank']}: {note}" for note in s.get("notes") or []]
    ranks = [s["rank"] for s in summaries]
    sizes = sorted({s["env"]["world_size"] for s in summaries if s["env"].get("world_size")})
    if len(sizes) > 1:
        primary.meta.notes.append(f"the traces come from jobs of different sizes (world_size {', '.join(map(str, sizes))}): "
                                     "cross-rank figures compare ranks of different jobs")
    script = str(files[0]) if len(files) == 1 else f"{len(files)} traces, ranks {', '.join(map(str, ranks))}"
    per_rank = primary.job.per_rank()
    rows = [{"rank": int(row["rank"]), "trace": traces[rank],
             **{k: float(v) for k, v in row.items() if k != "rank"}}  # NaN: null (report.clean)
            for rank, row in zip(ranks, per_rank.to_dict("records"))] if len(per_rank) == len(summaries) else []
    hta = sorted((row for s in summaries for row in s.get("hta") or []), key=lambda r: r["rank"])
    artifacts = {"trace": str(files[0].resolve()), "rank_traces": [str(f.resolve()) for f in files]}
    return _analyze(primary, script, artifacts, as_json=as_json, out=out, rule_settings=rule_settings, quiet=quiet,
                    ranks=rows, hta_breakdown={"basis": BASIS, "ranks": hta} if hta else None)  # every rank's, not the lowest's alone


def _read_ranks(files: list[Path], reads: ReadAhead) -> tuple[Profile, list[dict], dict[int, str]]:
    """Each rank's trace read, in the order given, and reduced to its summary at once: the lowest
    rank's Profile (frames and all), every rank's summary by rank, and each rank's trace path.

    A rank is the trace's distributedInfo rank, else the trace's position among `files`; two
    traces of one rank: one line, exit 2."""
    lowest: Profile | None = None
    lowest_rank = 0
    summaries: dict[int, dict] = {}
    where: dict[int, Path] = {}
    for i, path in enumerate(files):
        try:
            profile = Profile.from_trace(path, read=reads.frames)
        except TraceError as exc:
            fail(str(exc))
        rank = profile.env.rank
        rank = i if rank is None else int(rank)
        if rank in where:
            fail(f"{where[rank]} and {path} are both rank {rank}: give one trace per rank")
        where[rank] = path
        summaries[rank] = summarize(profile, {"status": "trace"}, rank, 0)  # sets env.rank
        if lowest is None or rank < lowest_rank:
            lowest, lowest_rank = profile, rank  # the one kept whole; the others live on as their summaries
        del profile
    assert lowest is not None  # trace_files gives at least one file
    return lowest, [summaries[r] for r in sorted(summaries)], {r: str(p) for r, p in where.items()}


def rank_trace_files(paths: list[Path]) -> list[Path]:
    """The trace files named (a folder stands for its traces: :func:`advisor.trace.trace_files`)."""
    try:
        return trace_files(paths)
    except ValueError as exc:
        fail(str(exc))


def _import_renderings() -> None:
    """Import the page's renderers (Jinja and the views) before the trace is collected: while a
    forked reader still reads that time is shared, after it every millisecond is the user's."""
    from advisor.reports import html, markdown, ruledoc  # noqa: F401 - 290 ms, imported while the trace is read


def _small_heap(limit: int = 512 << 20) -> bool:
    """This process's peak RSS is under `limit`: a fork of a bigger heap costs more to set up, and
    its copy-on-write pages count twice in the tree's RSS (a 1 GiB trace: 2.2 GiB instead of 1.1)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 < limit  # KiB on Linux


def page_tables(profile: Profile) -> dict:
    """The page's trace tables (roofline, top ops and kernels), built in a forked child while the
    rules run. The views keep every table they build in ``profile.memo`` (:meth:`Profile.derived`,
    by their own keys), so the child's memo is what the parent's page would build: merged into the
    parent's Profile, the views find their tables there."""
    from advisor.reports import ops_view, roofline_view  # in the forked child; the parent imports them with the page

    roofline_view.roofline_table(profile)
    ops_view.top_tables(report_mod.Report(), profile)  # the report is read only where there is no trace
    return profile.memo


def _analyze(profile: Profile, script: str, artifacts: dict, *, as_json: bool, out: Path | None,
             rule_settings: Settings | None = None, quiet: bool = False, **job: Any) -> int:  # job: ranks=, hta_breakdown=
    """Rules over the Profile, report.json (with `out`), the renderings and (unless `quiet`) the summary."""
    warnings = profile.meta.notes + (
        [] if len(profile.steps) else ["the trace has no ProfilerStep#N spans: per-step numbers are unavailable"])
    ahead = forked.start(page_tables, profile) if profile.trace is not None and _small_heap() else None  # on the other core
    findings, rule_warnings = diagnose(profile, rule_settings)
    report = report_mod.build_report(
        profile, status="ok", script=script, argv=[], started_at=report_mod.now_iso(),
        warnings=warnings + rule_warnings, findings=findings, artifacts=artifacts, **job,
    )
    if out is not None:
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            if exc.errno in DISK_ERRNOS:
                raise
            fail(f"cannot create the output dir {out}: {exc.strerror}")
        report_mod.write_report(report, out / "report.json")
    if ahead is not None:
        try:
            profile.memo.update(ahead.result())
        except Exception:  # noqa: BLE001 - the page builds its tables itself (and says what went wrong)
            pass
    con = terminal.console(stderr=as_json)
    html_path = write_renderings(report, out, profile, con, summary=not quiet)
    if not quiet:
        emit(report, as_json, str(out) if out else None)
        say_html(html_path, con, as_json)
    return EXIT_OK
