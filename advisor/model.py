"""The result model: what a rule finds, what can be done about it, and what a measurement showed.

One set of types through the whole pipeline: rules return :class:`Finding` objects, the
experiments fill their :class:`Experiment`, :mod:`advisor.report` serialises them once into
report.json (``to_dict``), and every renderer reads them back (``from_dict``) in the one order
:func:`rank` gives. Enumerations stand where a typo would otherwise pass silently; their values
are the strings of the report.json contract.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from typing import ClassVar, Protocol, TypeVar

from . import overrides as vocabulary
from .framework import words as framework_words
from .units import finite


class _Str(str, Enum):
    def __str__(self) -> str:
        return self.value


class Severity(_Str):
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


class FixKind(_Str):
    AUTOMATIC = "automatic"  # declarative overrides the experiments inject and measure
    MANUAL = "manual"        # a code change: the snippet


class Applicability(_Str):
    """ruff's three levels, read for training."""

    SAFE = "safe"                  # numerics unchanged (workers, pinned memory, fused optimizer)
    UNSAFE = "unsafe"              # may change numerics, convergence or memory (TF32, bf16, batch size)
    DISPLAY_ONLY = "display-only"  # shown for the user to apply by hand


class Verdict(_Str):
    FASTER = "faster"
    SLOWER = "slower"
    NO_CHANGE = "no-significant-change"
    LOSS_CHANGED = "loss-changed"
    NOT_CONFIRMED = "not-confirmed"
    NOT_APPLIED = "not-applied"    # the child reported the override had no effect
    FAILED = "failed"
    NOT_MEASURED = "not-measured"


E = TypeVar("E", bound=_Str)


def _enum(kind: type[E], value: object, what: str) -> E:
    try:
        return kind(value)
    except ValueError:
        raise ValueError(f"{what} {value!r} is not one of {', '.join(m.value for m in kind)}") from None


@dataclass
class Fix:
    """What the user (or the experiments) can do about a finding. Build it with
    :meth:`safe`, :meth:`unsafe` or :meth:`manual`; the kind and applicability follow."""

    title: str
    kind: FixKind = FixKind.MANUAL
    applicability: Applicability = Applicability.DISPLAY_ONLY
    snippet: str = ""
    overrides: dict | None = None
    proposed_overrides: dict | None = None  # the rule's own proposal, when a sweep measured better
    framework: dict | None = None  # the framework the snippet speaks (name, settings, configured_at): speak()
    ladder: list[dict] | None = None  # the other values of one fix, measured with `overrides` as one sweep
    # the script's own flags (or variables) that make it, said before its code (advise apply's reading of
    # where its values come from); `with_code`: a change of code goes with them (advise apply shows it)
    flags: list[str] | None = None
    with_code: bool = False

    def __post_init__(self) -> None:
        self.kind = _enum(FixKind, self.kind, "fix kind")
        self.applicability = _enum(Applicability, self.applicability, "fix applicability")

    @classmethod
    def safe(cls, title: str, overrides: dict, ladder: list[dict] | None = None) -> "Fix":
        """An automatic fix that leaves numerics unchanged. Its snippet is the vocabulary's for its
        overrides: one snippet per fix in every renderer and in the rule docs. `ladder`: as :meth:`unsafe`'s."""
        return cls(title, FixKind.AUTOMATIC, Applicability.SAFE, _snippet(overrides), overrides, ladder=ladder)

    @classmethod
    def unsafe(cls, title: str, overrides: dict, ladder: list[dict] | None = None) -> "Fix":
        """An automatic fix that may change numerics: measured only without --safe-only, loss checked.
        `ladder`: other override sets that answer the same finding (FP32 matmuls: TF32, bf16
        autocast, both), measured beside `overrides` as one sweep whose best verified value wins."""
        return cls(title, FixKind.AUTOMATIC, Applicability.UNSAFE, _snippet(overrides), overrides, ladder=ladder)

    @classmethod
    def manual(cls, title: str, snippet: str) -> "Fix":
        """A code change to make by hand, shown as a snippet."""
        return cls(title, FixKind.MANUAL, Applicability.DISPLAY_ONLY, snippet)

    @property
    def automatic(self) -> bool:
        return self.kind is FixKind.AUTOMATIC

    def problem(self) -> str | None:
        """Why this fix breaks the contract, or None."""
        if self.automatic and not self.overrides:
            return "an automatic fix needs overrides"
        for point in self.ladder or []:
            if problem := vocabulary.problem(point):
                return f"ladder: {problem}"
        return vocabulary.problem(self.overrides) if self.overrides else None

    def points(self) -> list[dict]:
        """The override sets this fix measures: its own, then its ladder's, each once."""
        out = [self.overrides] if self.overrides else []
        for point in self.ladder or []:
            if point not in out:
                out.append(point)
        return out

    def adopt(self, measured: dict) -> None:
        """A sweep beat the rule's proposal: the fix becomes what was measured, the proposal is kept.

        The rule's title and snippet say its own guess (say 4 workers); a user reading or copying
        them should get the value that was verified (say 8) and no other, so both are rebuilt from
        the measured override (the guess stays in `proposed_overrides`).
        """
        if measured == self.overrides:
            return
        self.proposed_overrides, self.overrides = self.overrides, measured
        self.snippet = _snippet(measured, self.framework)
        self.title = vocabulary.said(measured)

    def speak(self, framework: dict | None) -> None:
        """Say an automatic fix in the words of the framework that runs the step (the Hugging Face
        Trainer's ``bf16=True``, Lightning's ``precision="bf16-mixed"``): the same override is
        measured, only the snippet changes. A manual fix keeps its own words."""
        if framework and self.automatic and self.overrides:
            self.framework = framework
            self.snippet = _snippet(self.overrides, framework)

    def to_dict(self) -> dict:
        out: dict[str, object] = {"title": self.title, "kind": self.kind.value, "applicability": self.applicability.value,
               "snippet": self.snippet, "overrides": self.overrides}
        if self.proposed_overrides is not None:
            out["proposed_overrides"] = self.proposed_overrides
        if self.framework is not None:
            out["framework"] = self.framework
        if self.ladder:
            out["ladder"] = self.ladder
        if self.flags:
            out["flags"], out["with_code"] = self.flags, self.with_code
        return out

    @classmethod
    def from_dict(cls, d: dict) -> "Fix":
        return cls(str(d.get("title") or ""), d.get("kind") or FixKind.MANUAL,
                   d.get("applicability") or Applicability.DISPLAY_ONLY, str(d.get("snippet") or ""),
                   d.get("overrides"), d.get("proposed_overrides"),
                   d.get("framework") if isinstance(d.get("framework"), dict) else None,
                   d.get("ladder") if isinstance(d.get("ladder"), list) else None,
                   [str(x) for x in d["flags"]] if isinstance(d.get("flags"), list) else None,
                   bool(d.get("with_code")))


def _snippet(overrides: dict, framework: dict | None = None) -> str:
    return "\n".join(framework_words.snippet(k, v, framework) for k, v in (overrides or {}).items())


@dataclass
class Experiment:
    """A fix measured against the baseline (or why it was not): the throughput ratio, its 95%
    interval, the verdict, and the numbers behind them."""

    verdict: Verdict
    verified: bool = False
    speedup: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    baseline: dict | None = None    # pooled summary: runs, samples_per_s, steps_per_s, step_time_median_s
    candidate: dict | None = None
    overrides: dict | None = None
    loss_check: dict | None = None
    estimate: bool = False
    reason: str | None = None       # why it was not measured
    error: str | None = None        # why the measurement failed
    baseline_drift_frac: float | None = None
    sweep: list[dict] | None = None  # each value tried: label, overrides, speedup, ci_low, ci_high, verdict
    applicability: str | None = None
    runs: list[dict] | None = None   # the two pairs behind a confirmed result
    not_applied: list[str] | None = None  # override keys the child reported no effect for
    measured_by: str | None = None   # "in-process" (arms of the profiled run) or "fresh-run" (a re-run per arm)
    switch_s: float | None = None    # in-process: one-off cost of switching the arm on (workers, compile)
    payoff_steps: int | None = None  # compile: the steps after which its one-off cost is paid back by the time saved
    # compile: the steps the script runs as launched, where its own arguments say (advisor.apply.script_steps)
    script_steps: int | None = None
    script_steps_said: str | None = None  # how that is known: "--max_iters 5000", "max_iters = 600000 in train.py"
    # compile: what recompiled in its windows and why (advisor.experiments.recompiles), `said` in one line
    recompiles: dict | None = None
    memory_change_frac: float | None = None  # candidate's peak memory / baseline's - 1 (negative: less)
    memory_budget_bytes: int | None = None   # the budget a memory fix or batch search was judged by
    oom: bool | None = None          # the candidate ran out of memory (True), else not said

    def __post_init__(self) -> None:
        self.verdict = _enum(Verdict, self.verdict, "experiment verdict")

    @classmethod
    def not_measured(cls, reason: str) -> "Experiment":
        return cls(Verdict.NOT_MEASURED, estimate=True, reason=reason)

    @property
    def measured(self) -> bool:
        return finite(self.speedup) is not None

    def to_dict(self) -> dict:
        out = asdict(self)
        out["verdict"] = self.verdict.value
        return {k: v for k, v in out.items() if v is not None or k in _EXPERIMENT_ALWAYS}

    @classmethod
    def from_dict(cls, d: dict) -> "Experiment":
        known = {f.name for f in fields(cls)}
        verdict = d.get("verdict") or (Verdict.FASTER if d.get("verified") else Verdict.NOT_MEASURED)
        return cls(**{**{k: v for k, v in d.items() if k in known}, "verdict": verdict})


# The keys every experiment in report.json carries, null or not (the schema-1 shape).
_EXPERIMENT_ALWAYS = ("verified", "verdict", "speedup", "ci_low", "ci_high", "estimate")


@dataclass
class SourceLocation:
    """A line of the user's code a finding points at: the innermost frame in the user's own files
    (not torch, site-packages or advise) around the operations the rule counts, and how often."""

    file: str
    line: int
    function: str = ""
    count: int = 1
    op: str = ""  # what was called there (".item()", "linear", "DataLoader fetch")

    @property
    def short(self) -> str:
        """``train.py:42``: the file's name and the line."""
        return f"{self.file.replace(chr(92), '/').rsplit('/', 1)[-1]}:{self.line}"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "SourceLocation":
        return cls(str(d.get("file") or ""), int(d.get("line") or 0), str(d.get("function") or ""),
                   int(d.get("count") or 1), str(d.get("op") or ""))


SCREEN = "screen"  # evidence key of a screened finding (see Finding.screen)
AFTER = "after"  # evidence key of a fix measured only stacked on a winning fix of this override (Finding.after)


@dataclass
class Finding:
    """One occurrence of a rule's pattern, with the numbers that show it and what to do."""

    title: str
    summary: str
    severity: Severity
    evidence: dict
    fix: Fix
    estimated_gain_frac: float | None = None  # the rule's own estimate of the step time saved (never measured)
    rule: str = ""  # filled by the engine from the rule that yielded it
    code: str = ""
    experiment: Experiment | None = None
    locations: list[SourceLocation] = field(default_factory=list)  # where in the user's code, most calls first
    cause: str | None = None  # the code of the finding this one is a symptom of (its fix says: fix that first)
    fallback: Fix | None = None  # its own fix where that finding is not in the report (GPU001's compile ladder)

    # Written out (the dataclass keeps its fields, repr and eq) so the severity may be given as its
    # string ("high", as the rule plugin docs write it) and is held as a Severity: a field added
    # above is added here too.
    def __init__(self, title: str, summary: str, severity: Severity | str, evidence: dict, fix: Fix,
                 estimated_gain_frac: float | None = None, rule: str = "", code: str = "",
                 experiment: Experiment | None = None, locations: list[SourceLocation] | None = None,
                 cause: str | None = None, fallback: Fix | None = None) -> None:
        self.title, self.summary, self.evidence, self.fix = title, summary, evidence, fix
        self.severity = _enum(Severity, severity, "severity")
        self.estimated_gain_frac, self.rule, self.code = estimated_gain_frac, rule, code
        self.experiment = experiment
        self.locations = [] if locations is None else locations
        self.cause, self.fallback = cause, fallback

    def without_cause(self) -> None:
        """The finding it names as its cause is not in the report (that rule did not fire): its fix
        must not send the user to it. Its own fix takes over where it has one (a fix to measure);
        otherwise the fix says what to look at instead."""
        if self.cause is None:
            return
        self.fix = self.fallback or Fix.manual(
            "Find what keeps the GPU waiting: the rule for its main cause reported nothing in this run (its "
            "documentation says what it looks for)", f"advise rules {self.cause}")
        self.cause = self.fallback = None

    @property
    def screen(self) -> bool:
        """A fix put in front of the experiments with no rule's pattern behind it (EXP001): it
        belongs in the report only when the experiments verified a gain."""
        return bool(self.evidence.get(SCREEN))

    @property
    def after(self) -> str | None:
        """The override a winning fix must set before this fix is measured, and then only stacked on
        it (EXP001's compute fixes behind a waiting loop, and a rule's fix that owns one of them: alone
        they would measure the loader)."""
        return self.evidence.get(AFTER)

    def problem(self) -> str | None:
        """Why this finding breaks the report.json contract, or None when it is well formed."""
        if not self.title or "\n" in self.title:
            return "a finding needs a one-line title"
        if not isinstance(self.fix, Fix):
            return "a finding needs a Fix"
        return self.fix.problem() or (self.fallback.problem() if self.fallback is not None else None)

    def to_dict(self) -> dict:
        evidence = dict(self.evidence)
        if self.estimated_gain_frac is not None:  # schema 1 kept it in the evidence; it stays there too
            evidence["estimated_gain_frac"] = self.estimated_gain_frac
        return {"rule": self.rule, "code": self.code, "severity": self.severity.value, "title": self.title,
                "summary": self.summary, "evidence": evidence, "estimated_gain_frac": self.estimated_gain_frac,
                "fix": self.fix.to_dict(), "experiment": self.experiment.to_dict() if self.experiment else None,
                "locations": [loc.to_dict() for loc in self.locations]}

    @classmethod
    def from_dict(cls, d: dict) -> "Finding":
        evidence = dict(d.get("evidence") or {})
        gain = d.get("estimated_gain_frac", evidence.get("estimated_gain_frac"))
        evidence.pop("estimated_gain_frac", None)
        exp = d.get("experiment")
        return cls(str(d.get("title") or d.get("rule") or d.get("code") or ""), str(d.get("summary") or ""),
                   d.get("severity") or Severity.LOW, evidence, Fix.from_dict(d.get("fix") or {}), finite(gain),
                   str(d.get("rule") or ""), str(d.get("code") or ""),
                   Experiment.from_dict(exp) if isinstance(exp, dict) else None,
                   [SourceLocation.from_dict(x) for x in d.get("locations") or [] if isinstance(x, dict)])


@dataclass
class PatchPart:
    """One fix of the recommendation written into the user's code (``advise apply``): its change
    alone as a unified diff, the changes that could not be made safely, each in one line naming
    the file:line and why, and a change said rather than written (a command-line flag)."""

    key: str  # the override's key in the vocabulary (dataloader, autocast, ...)
    title: str = ""  # the override in one line: num_workers=8, persistent_workers=True
    diff: str = ""
    refused: list[str] = field(default_factory=list)
    told: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)  # the script's own flags (or variables) that make it: --workers 2


@dataclass
class PatchFile:
    """A file the patch changes, as the diff names it, and the hash of the text it was made against
    (``advise apply`` refuses a file that changed since: the probe's lines may have moved)."""

    path: str
    sha256: str


@dataclass
class Patch:
    """The recommendation as a patch of the user's own files, ``git apply``-able from `root` (the
    script's git checkout, else the working directory): every fix together (`diff`) and each alone."""

    root: str
    diff: str = ""
    parts: list[PatchPart] = field(default_factory=list)
    files: list[PatchFile] = field(default_factory=list)
    command: str = ""  # the command that writes it: advise apply RUN_DIR --write
    run_with: str = ""  # the profiled run's command with the parts' flags set, where any part has one

    @property
    def refused(self) -> list[str]:
        return [line for part in self.parts for line in part.refused]

    @classmethod
    def from_dict(cls, d: dict) -> "Patch":
        return cls(str(d.get("root") or ""), str(d.get("diff") or ""),
                   [PatchPart(str(p.get("key") or ""), str(p.get("title") or ""), str(p.get("diff") or ""),
                              [str(x) for x in p.get("refused") or []], [str(x) for x in p.get("told") or []],
                              [str(x) for x in p.get("flags") or []])
                    for p in d.get("parts") or [] if isinstance(p, dict)],
                   [PatchFile(str(f.get("path") or ""), str(f.get("sha256") or ""))
                    for f in d.get("files") or [] if isinstance(f, dict)],
                   str(d.get("command") or ""), str(d.get("run_with") or ""))


@dataclass
class Recommendation:
    """The winners stacked into one configuration and measured together against the baseline."""

    fixes: list[str]
    overrides: dict
    verified: bool = False
    speedup: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    loss_check: dict | None = None
    applicability: str = Applicability.SAFE.value
    baseline: dict | None = None
    candidate: dict | None = None
    snippets: list[dict] = field(default_factory=list)
    measured_by: str | None = None
    confirmed: dict | None = None  # --confirm: the same overrides in fresh runs (an Experiment's dict)
    memory_budget_bytes: int | None = None  # the run was over this budget: the configuration includes the fastest fix that fits it
    patch: Patch | None = None  # the configuration written into the user's files (advisor.apply)
    # What an Experiment says and a configuration measured together has not (class constants, not
    # fields: never written): the reports' wording reads both alike (advisor.reports.words.Measured).
    verdict: ClassVar[None] = None
    reason: ClassVar[None] = None
    error: ClassVar[None] = None
    not_applied: ClassVar[None] = None
    baseline_drift_frac: ClassVar[None] = None
    switch_s: ClassVar[None] = None
    payoff_steps: ClassVar[None] = None
    recompiles: ClassVar[None] = None
    script_steps: ClassVar[None] = None
    script_steps_said: ClassVar[None] = None
    sweep: ClassVar[None] = None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Recommendation":
        known = {f.name for f in fields(cls)}
        patch = d.get("patch")
        return cls(**{"fixes": [], "overrides": {}, **{k: v for k, v in d.items() if k in known},
                      "patch": Patch.from_dict(patch) if isinstance(patch, dict) else None})


# `verified` needs the speedup interval's low end above 1 by more than this (and by more than the
# drift between the baselines measured around the candidate): the experiments apply it, the
# reports say it.
VERIFY_MIN_GAIN = 0.03
MAX_ESTIMATED_GAIN = 0.99  # a rule's estimate of the step time saved, capped: 100× at most


def estimated_speedup(gain: object) -> float | None:
    """A rule's estimate of the step time saved, `f`, as a speedup in the unit measurements use:
    saving f of each step makes the step 1 - f as long, so 1 / (1 - f) times as many per second
    (0.72 of the step spent waiting on data: about 3.6× faster). None without a positive estimate."""
    f = finite(gain)
    if f is None or f <= 0:
        return None
    return 1.0 / (1.0 - min(f, MAX_ESTIMATED_GAIN))


SEVERITY_RANK = {Severity.HIGH: 0, Severity.MEDIUM: 1, Severity.LOW: 2}


def rank_key(finding: Finding, index: int = 0) -> tuple:
    """The one order every renderer shows: measured gain first (verified, then measured but not
    verified, then the rules' estimates; bigger first), then severity, then the rules' order.
    A fix measured slower ranks with the unmeasured."""
    exp = finding.experiment
    speedup = finite(exp.speedup) if exp is not None else None
    estimate = estimated_speedup(finding.estimated_gain_frac)
    if exp is not None and speedup is not None and exp.verified:
        tier, value = 0, speedup
    elif speedup is not None and speedup >= 1:
        tier, value = 1, speedup
    elif estimate:
        tier, value = 2, estimate
    else:
        tier, value = 3, 0.0
    return tier, -value, SEVERITY_RANK[finding.severity], index


MEASURED_HIGH = 1.25    # a verified speedup this large is [high] ...
MEASURED_MEDIUM = 1.08  # ... this large [medium]; smaller ones, and fixes measured slower, [low]


def settle_severity(finding: Finding) -> Finding:
    """Severity follows the measured effect once there is one, whatever the rule estimated: a
    fix measured slower is [low] (a [high] finding whose own fix slows the run is a false alarm),
    one measured without a verified gain at most [medium], a verified gain by its size (a CPU bf16
    win the rule capped at [medium] is [high] when it measures 1.5x)."""
    exp = finding.experiment
    speedup = finite(exp.speedup) if exp is not None else None
    if exp is None or speedup is None:
        return finding
    if exp.verified:
        finding.severity = (Severity.HIGH if speedup >= MEASURED_HIGH else
                            Severity.MEDIUM if speedup >= MEASURED_MEDIUM else Severity.LOW)
    elif speedup < 1 or exp.verdict is Verdict.SLOWER:
        finding.severity = Severity.LOW
    elif finding.severity is Severity.HIGH:
        finding.severity = Severity.MEDIUM
    return finding


def split_screened(findings: list[Finding]) -> tuple[list[Finding], list[Finding]]:
    """(the findings to report, the screened ones left out: not verified faster)."""
    keep = [f for f in findings if not f.screen or (f.experiment is not None and f.experiment.verified)]
    return keep, [f for f in findings if not any(f is k for k in keep)]


def rank(findings: list[Finding]) -> list[Finding]:
    """`findings` in the order every renderer shows them (stable for ties)."""
    return [f for _, f in sorted(enumerate(findings), key=lambda item: rank_key(item[1], item[0]))]


class _Reported(Protocol):
    findings: list[Finding]


def findings_of(report: _Reported) -> list[Finding]:
    """A report's findings (an :class:`advisor.report.Report`, built or read back: the report imports
    the model, never the other way), ranked."""
    return rank(list(report.findings))

