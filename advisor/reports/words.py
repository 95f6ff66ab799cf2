"""How a measurement is said: one wording for the terminal, the HTML page and the markdown summary.

A speedup is said one way everywhere: ``1.71× faster (95% CI 1.58–1.84×), verified``. The
functions read the typed result model (:class:`~advisor.model.Experiment`, the recommended
configuration's :class:`~advisor.model.Recommendation`, :class:`~advisor.model.Finding`) and
return plain text; each renderer escapes and styles it. ``state`` is the styling class every
renderer keys on: ``verified``, ``slower``, ``bad``, ``unclear``, ``not-run``, ``estimate``.
"""

from __future__ import annotations

import os
from typing import Protocol


from advisor.reports import format as fmt
from advisor import units
from advisor import overrides as vocabulary
from advisor.framework.words import FRAMEWORK_NAMES, in_config_call
from advisor.overrides import one_off
from advisor.report import Report
from advisor.report_blocks import Energy, Experiments, LoopPhase, Memory, Mfu, Rank, Throughput
from advisor.model import (VERIFY_MIN_GAIN, Applicability, Experiment, Finding, Fix, FixKind,
                           SourceLocation, Verdict, estimated_speedup)

# verdict -> (state, label)
VERDICT_WORDS: dict[Verdict, tuple[str, str]] = {
    Verdict.FASTER: ("verified", "verified"),
    Verdict.SLOWER: ("slower", "slower"),
    Verdict.NO_CHANGE: ("unclear", "no clear gain"),
    Verdict.LOSS_CHANGED: ("bad", "loss changed"),
    Verdict.NOT_CONFIRMED: ("unclear", "not confirmed"),
    Verdict.NOT_APPLIED: ("not-run", "not applied"),
    Verdict.FAILED: ("bad", "failed"),
    Verdict.NOT_MEASURED: ("not-run", "not measured"),
}

APPLICABILITY_WORDS = {
    Applicability.SAFE: "safe: numerics unchanged",
    Applicability.UNSAFE: "unsafe: may change numerics or memory; check the loss",
    Applicability.DISPLAY_ONLY: "a code change to make by hand",
}

NOT_MEASURED = "not measured"
MANUAL_NOT_MEASURED = "not measured: a manual fix (the experiments re-run only automatic ones)"
NO_BOTTLENECK = "no bottleneck found"
NOT_PROFILED = "no step ran under the profiler, so the rules had nothing to read"
VERIFIED_MEANS = (f"means the whole 95% interval lies more than {VERIFY_MIN_GAIN:.0%} above 1 (and above the "
                  "drift between the baselines measured around the candidate), confirmed by a second candidate run "
                  "where time allowed, with the loss checked for fixes that change numerics")


class Measured(Protocol):
    """What the wording reads of a measured result: an :class:`~advisor.model.Experiment`, or the
    recommended configuration's :class:`~advisor.model.Recommendation` (whose verdict, sweep,
    one-off cost and the like are None: it has none). Read-only, so an Experiment's `verdict`, never
    None, fits."""

    @property
    def verdict(self) -> Verdict | None: ...
    @property
    def verified(self) -> bool: ...
    @property
    def speedup(self) -> float | None: ...
    @property
    def ci_low(self) -> float | None: ...
    @property
    def ci_high(self) -> float | None: ...
    @property
    def baseline(self) -> dict | None: ...
    @property
    def candidate(self) -> dict | None: ...
    @property
    def overrides(self) -> dict | None: ...
    @property
    def reason(self) -> str | None: ...
    @property
    def error(self) -> str | None: ...
    @property
    def not_applied(self) -> list[str] | None: ...
    @property
    def baseline_drift_frac(self) -> float | None: ...
    @property
    def measured_by(self) -> str | None: ...
    @property
    def switch_s(self) -> float | None: ...
    @property
    def payoff_steps(self) -> int | None: ...
    @property
    def recompiles(self) -> dict | None: ...
    @property
    def script_steps(self) -> int | None: ...
    @property
    def script_steps_said(self) -> str | None: ...
    @property
    def sweep(self) -> list[dict] | None: ...
    @property
    def memory_budget_bytes(self) -> int | None: ...


def plural(count: object, word: str) -> str:
    """`3 steps`, `1 step`, `2 fixes`."""
    if count == 1:
        return f"{count} {word}"
    return f"{count} {word}{'es' if word.endswith(('x', 's', 'sh', 'ch')) else 's'}"


def verdict_words(verdict: object) -> tuple[str, str]:
    """(state, label) of a verdict, e.g. ("verified", "verified"); an unknown one is unclear, as written."""
    try:
        return VERDICT_WORDS[Verdict(verdict)]
    except ValueError:
        return "unclear", str(verdict or "")


def state_and_label(result: Measured) -> tuple[str, str]:
    """How `result` fared: verified when it was, else by its verdict, else by its numbers."""
    sp, hi = units.finite(result.speedup), units.finite(result.ci_high)
    verdict = result.verdict  # a Recommendation has none
    if result.verified and sp is not None:
        return VERDICT_WORDS[Verdict.FASTER]
    if verdict is not None and not (verdict is Verdict.NOT_MEASURED and sp is not None):
        return VERDICT_WORDS[verdict]
    if sp is None:
        return VERDICT_WORDS[Verdict.NOT_MEASURED]
    if sp < 1 and hi is not None and hi < 1:
        return VERDICT_WORDS[Verdict.SLOWER]
    return "unclear", "not verified"


def speedup_with_interval(speedup: float | None, lo: float | None, hi: float | None) -> str:
    """`1.71× faster (95% CI 1.58–1.84×)`, `0.93×, 7% slower (95% CI 0.90–0.96×)`."""
    ivl = fmt.interval(lo, hi, ci=True)
    return fmt.speedup_words(speedup) + (f" ({ivl})" if ivl else "")


def not_applied_words(keys: list[str] | None) -> str:
    """Why a not-applied experiment measured nothing."""
    if not keys:
        return "the override did not take effect in the script"
    return f"{', '.join(keys)} did not take effect in the script"


def _why(result: Measured) -> str:
    if result.verdict is Verdict.NOT_APPLIED:
        return not_applied_words(result.not_applied)
    return str(result.reason or result.error or "")


def _interval_spans_one(result: Measured) -> bool:
    lo, hi = units.finite(result.ci_low), units.finite(result.ci_high)
    return lo is not None and hi is not None and lo <= 1 <= hi


def verified_bar(result: Measured) -> float:
    """How far above 1 the interval's low end had to be for `result` to be verified."""
    return max(VERIFY_MIN_GAIN, units.finite(result.baseline_drift_frac) or 0.0)


# The arms' seconds between their windows' steps, said in the time line from this much (and this share
# of the steps' own): a loop's evaluation and its loader's restarts at every epoch's end took half of
# vision's budget unsaid; a plan's way (about 0.1 s a window) is not worth a clause.
BETWEEN_SAID_S = 1.0
BETWEEN_SAID_FRAC = 0.1
NOISY_DRIFT = 0.25  # baselines this far apart say the machine changed, not that the gain is small


def _below_the_bar(result: Measured) -> str:
    """Why a gain whose interval excludes 1 is still not verified: its low end is not far enough above 1."""
    if result.verdict is not None and result.verdict is not Verdict.NO_CHANGE:  # None: a Recommendation
        return ""
    lo = units.finite(result.ci_low)
    bar = verified_bar(result)
    if lo is None or lo <= 1 or lo > 1 + bar:
        return ""
    if bar > NOISY_DRIFT:
        return (f"the baseline's own windows differ by {units.frac(bar)}: the machine's load changed during the run, "
                "too noisy to call it verified")
    drift = " (the baselines drifted that much between their runs)" if bar > VERIFY_MIN_GAIN else ""
    return f"the interval's low end is within {units.frac(bar)} of 1{drift}, too close to call it verified"


def measured_detail(result: Measured) -> str:
    """The result without its label: the speedup and interval (with a remark when they say no gain,
    or a gain too small for verified), or why nothing was measured."""
    state, label = state_and_label(result)
    if units.finite(result.speedup) is None or result.verdict is Verdict.NOT_APPLIED:
        return _why(result) or label
    text = speedup_with_interval(result.speedup, result.ci_low, result.ci_high)
    if state == "unclear" and _interval_spans_one(result):
        text += ": the interval includes no gain"
    elif state == "unclear" and (remark := _below_the_bar(result)):
        text += f": {remark}"
    elif result.verdict is Verdict.NOT_CONFIRMED and (reason := result.reason):
        text += f": {reason}"
    return text


def measured_sentence(result: Measured) -> str:
    """The whole result in one line: `1.71× faster (95% CI 1.58–1.84×), verified`,
    `0.93×, 7% slower (95% CI 0.90–0.96×)`, `not measured: experiment budget exhausted`."""
    state, label = state_and_label(result)
    if units.finite(result.speedup) is None or result.verdict is Verdict.NOT_APPLIED:
        why = _why(result)
        return f"{label}: {why}" if why else label
    detail = measured_detail(result)
    if state == "slower":
        return detail + _how(result)
    if state == "unclear" and _interval_spans_one(result):
        return f"{detail}, not verified{_how(result)}"
    if state == "unclear" and _below_the_bar(result):
        return detail + _how(result)  # it says why it is not verified
    return f"{detail}, {label}{_how(result)}"


MEASURED_BY = {"in-process": "in the profiled run", "fresh-run": "in fresh runs"}


def _how(result: Measured) -> str:
    """`, in the profiled run` / `, in fresh runs`: how a result was measured, when the report says;
    for torch.compile also what compiling cost (once, kept out of the step times), whether the script's
    own step count pays it back (where its arguments say it) and what recompiled."""
    how = MEASURED_BY.get(result.measured_by or "")
    text = f", {how}" if how else ""
    cost = units.finite(result.switch_s)
    if cost and one_off(result.overrides or {}):
        text += f"; compiling took {units.time_s(cost)}, once"
        payoff = result.payoff_steps
        if payoff:
            text += f", paid back after {payoff:,} steps"
            steps = result.script_steps
            if steps:  # the script's own step count, where its arguments say it
                said = result.script_steps_said
                text += f": this run's {steps:,} steps{f' ({said})' if said else ''} " + (
                    "pay it back" if steps >= payoff else "do not")
    recompiled = (result.recompiles or {}).get("said")
    if recompiled:
        text += f"; {recompiled}"
    return text


def estimate_speedup_words(gain: float | None) -> str:
    """A rule's estimate, in the unit measured speedups use: `about 3.6× faster` for 72% of the step saved.

    Estimates get two significant digits (they are not measurements), measured speedups three."""
    x = estimated_speedup(gain)
    if x is None:
        return ""
    return f"about {x:.2f}× faster" if x < 1.95 else f"about {x:.1f}× faster" if x < 9.95 else f"about {x:.0f}× faster"


def estimate_detail(gain: float | None) -> str:
    """A rule's own estimate of the step time saved: `about 3.6× faster, by the rule's estimate`."""
    return f"{estimate_speedup_words(gain)}, by the rule's estimate"


def estimate_sentence(gain: float | None) -> str:
    """`about 3.6× faster, by the rule's estimate (not measured)`."""
    return f"{estimate_detail(gain)} (not measured)"


def has_estimate(finding: Finding) -> bool:
    return estimated_speedup(finding.estimated_gain_frac) is not None


# Why a finding has no experiment at all, by the state of the run's experiments (see experiments_state).
UNTRIED = {
    "off": "not measured: experiments were off (--no-experiments)",
    "trace": "not measured: a trace alone cannot be re-run",
    "not-run": "not measured: the run did not finish, so no experiment ran",
    "ran": "not measured",
}


def from_trace(report: Report) -> bool:
    """Whether `report` is `advise analyze`'s: its traces are named by absolute path (a profiled
    run's files are relative to its run dir), one or several (`rank_traces`), or it is named for its trace."""
    artifacts = report.artifacts
    trace = artifacts.trace
    return (artifacts.rank_traces is not None or (isinstance(trace, str) and os.path.isabs(trace))
            or bool(report.script) and report.script == trace)


def experiments_state(report: Report) -> str:
    """"ran" (report.json has an `experiments` block), "trace" (`advise analyze`: nothing to re-run),
    "off" (an ok run without one: --no-experiments) or "not-run" (the run did not end well)."""
    if report.experiments is not None:
        return "ran"
    if from_trace(report):
        return "trace"
    return "off" if report.ok else "not-run"


def finding_sentence(finding: Finding, experiments: str = "ran") -> str:
    """How a finding's fix fared, in one line: the measurement; else the rule's estimate (with
    "not measured"); else why it was not measured: a manual fix, or the experiments' state."""
    if finding.experiment is not None:
        sentence = measured_sentence(finding.experiment)
        if has_estimate(finding) and finding.experiment.verdict is Verdict.NOT_MEASURED:
            return f"{estimate_detail(finding.estimated_gain_frac)}; {sentence}"
        return sentence
    if has_estimate(finding):
        return estimate_sentence(finding.estimated_gain_frac)
    if not finding.fix.automatic:
        return MANUAL_NOT_MEASURED
    return UNTRIED.get(experiments, NOT_MEASURED)


def location_words(loc: SourceLocation) -> str:
    """``train.py:42 in train_step (.item(), 2 calls)``: one site of the user's code."""
    what = ", ".join(x for x in (loc.op, plural(loc.count, "call")) if x)
    return f"{loc.short}{f' in {loc.function}' if loc.function else ''} ({what})"


def where_line(finding: Finding) -> str:
    """``at train.py:42 in step (.item(), 1 call); 2 more sites``, or '' when no line is known."""
    if not finding.locations:
        return ""
    more = len(finding.locations) - 1
    return f"at {location_words(finding.locations[0])}" + (f"; {plural(more, 'more site')}" if more else "")


def fix_label(fix: Fix) -> str:
    """One label for a fix, from its kind and applicability: `automatic; safe: numerics unchanged`,
    `automatic; unsafe: ...`, `manual: a code change to make by hand`."""
    if fix.kind is FixKind.MANUAL:
        return f"manual: {APPLICABILITY_WORDS[Applicability.DISPLAY_ONLY]}"
    return f"automatic; {applicability_words(fix.applicability)}"


def no_findings(report: Report) -> str:
    """Why there is no finding: none fired, or none could (no profiled step, an unfinished run)."""
    if not report.ok:
        return "none: the rules need a finished measured window"
    steps = report.steps
    if steps and not any(s.profiled for s in steps) and report.steps_window != "quiet":
        return f"none: {NOT_PROFILED}"
    return f"none: {NO_BOTTLENECK}"


def outcome(findings: list[Finding], recommended: Measured | None, report: Report) -> tuple[str, str]:
    """What the run concluded, in one line, and its state: the recommended configuration's result,
    else why there is none (`no bottleneck found`, `4 fixes measured, none faster`, ...)."""
    if recommended is not None:
        state, _ = state_and_label(recommended)
        return recommended_sentence(recommended), state
    if not report.ok:
        return "none: the run did not finish", "not-run"
    if not findings:
        return no_findings(report), "not-run"
    state = experiments_state(report)
    if state != "ran":
        return f"none: {UNTRIED[state].split(': ', 1)[1]}", "not-run"
    measured = [f.experiment for f in findings if f.experiment is not None and f.experiment.measured]
    if not measured:
        if not any(f.fix.automatic for f in findings):
            return "none: every fix found is a manual code change; nothing could be measured", "not-run"
        return "none: no fix could be measured", "not-run"
    counts: dict[str, int] = {}
    for exp in measured:
        label = state_and_label(exp)[1]
        counts[label] = counts.get(label, 0) + 1
    kinds = ", ".join(f"{n} {label}" for label, n in counts.items())
    return f"none: {plural(len(measured), 'fix')} measured, none faster ({kinds})", "unclear"


def recommended_sentence(rec: Measured) -> str:
    """The recommended configuration's result; for a run over its memory budget also its peak
    against the budget, the reason it was chosen whatever its speed."""
    text = measured_sentence(rec)
    if units.finite(rec.memory_budget_bytes):
        memory = memory_effect(rec)
        text += f"; {memory}" if memory else ""
    return text


def missing_why(result: Measured) -> str:
    """Why a baseline or candidate has no figure: the failure, the override not taken, or no run."""
    verdict = result.verdict
    if verdict is Verdict.FAILED:
        error = result.error
        return f"no run finished: {error}" if error else "no run finished"
    if verdict is Verdict.NOT_APPLIED:
        return not_applied_words(result.not_applied)
    return "not measured"


def pair_words(result: Measured) -> tuple[str, str, str]:
    """(baseline, candidate, why): each side's measurement, a dash for a side with none, and why
    it has none ('' when both have one; all '' when neither was measured)."""
    base, cand = measure_words(result.baseline), measure_words(result.candidate)
    if not base and not cand:
        return "", "", ""
    if base and cand:
        return base, cand, ""
    return base or units.DASH, cand or units.DASH, missing_why(result)


def measure_words(m: object) -> str:
    """A baseline or candidate measurement: samples/s, else steps/s or step time; a number as is."""
    if isinstance(m, dict):
        if units.finite(m.get("samples_per_s")) is not None:
            return units.rate(m["samples_per_s"], "samples/s")
        if units.finite(m.get("steps_per_s")) is not None:
            return units.rate(m["steps_per_s"], "steps/s")
        if units.finite(m.get("step_time_median_s")) is not None:
            return units.time_s(m["step_time_median_s"]) + " / step"
        return ""
    if (x := units.finite(m)) is not None:
        return fmt.value(x)
    return "" if m is None else str(m)


MEMORY_BASIS_SHORT = {"cuda-max-allocated": "max allocated", "cpu-allocator": "CPU allocator",
                      "rss-high-water": "RSS high-water mark"}


def memory_effect(result: Measured) -> str:
    """`peak memory 127.5 MiB → 47.8 MiB (−63%, CPU allocator)`: a fix's memory effect, said next
    to its speed; '' when either side's peak is unknown."""
    base, cand = (result.baseline or {}), (result.candidate or {})
    b, c = units.finite(base.get("peak_memory_bytes")), units.finite(cand.get("peak_memory_bytes"))
    if b is None or c is None or b <= 0:
        return ""
    named = str(base.get("memory_basis") or "")
    basis = MEMORY_BASIS_SHORT.get(named, named)
    text = f"peak memory {units.bytes_(b)} → {units.bytes_(c)} ({fmt.change(c / b - 1)}{', ' + basis if basis else ''})"
    budget = units.finite(result.memory_budget_bytes)
    if budget:
        text += f", {'within' if c <= budget else 'over'} the {units.bytes_(budget)} budget"
    return text


def fix_where(fix: Fix) -> str:
    """Where a framework's fix goes: `where the Hugging Face Trainer is configured, at train.py:31`
    (or on the command line, for TrainingArguments an HfArgumentParser builds); '' for a loop of the
    user's own."""
    framework = fix.framework or {}
    at = framework.get("configured_at") or {}
    if not framework.get("name") or not in_config_call(framework["name"], fix.overrides or {}):
        return ""  # a change made elsewhere (configure_optimizers, the DataModule): its snippet says where
    name = FRAMEWORK_NAMES.get(framework["name"], framework["name"])
    where = f"{os.path.basename(at['file'])}:{at.get('line')}" if at.get("file") else ""
    if framework.get("command_line"):
        return f"on the script's command line (its HfArgumentParser, at {where})"
    return f"where {name} is configured, at {where}" if where else f"where {name} is configured"


ENERGY_SOURCE_WORDS = {"energy-counter": "NVML energy counter", "power-samples": "NVML power samples"}


def energy_source_words(source: str | None) -> str:
    """Where joules were read from, in a few words (a report from before the source was said: NVML)."""
    return ENERGY_SOURCE_WORDS.get(source or "", "NVML")


def energy_effect(result: Measured) -> str:
    """`energy 1.25 → 0.61 J/sample (−51%, NVML energy counter)`: a fix's energy per sample on the GPU
    (bf16 often saves more energy than time); '' where the GPU was not sampled."""
    base, cand = (result.baseline or {}), (result.candidate or {})
    b, c = units.finite(base.get("joules_per_sample")), units.finite(cand.get("joules_per_sample"))
    if b is None or c is None or b <= 0:
        return ""
    source = energy_source_words(base.get("energy_source"))
    return f"energy {b:.3g} → {c:.3g} J/sample ({fmt.change(c / b - 1)}, {source})"


def resource_effects(result: Measured) -> str:
    """A fix's memory and energy effects, said next to its speed (a batch ladder's, rung by rung;
    compile's modes, one by one)."""
    return "; ".join(text for text in (ladder_effect(result), compile_modes_effect(result), memory_effect(result),
                                       energy_effect(result)) if text)


def compile_modes_effect(result: Measured) -> str:
    """`modes tried: default 1.41x (compiling 20.0 s, paid back after 300 steps); reduce-overhead
    1.97x (...)`: each torch.compile mode a sweep measured, with its one-off cost and payoff ('' for
    any other fix), so a ladder none of whose modes helped says how each fared."""
    rows = [r for r in result.sweep or [] if isinstance(r, dict)
            and set(r.get("overrides") or {}) == {"compile"}]
    if len(rows) < 2:
        return ""
    said = []
    for r in rows:
        mode, x = r["overrides"]["compile"], units.finite(r.get("speedup"))
        cost, payoff, again = units.finite(r.get("switch_s")), r.get("payoff_steps"), r.get("recompiles")
        parts = ([f"compiling {units.time_s(cost)}"] if cost else []) + ([f"paid back after {payoff:,} steps"] if payoff else [])
        parts += [f"recompiled {'once' if again == 1 else f'{again} times'}"] if again else []
        said.append(f"{'default' if mode is True else mode} {f'{x:.2f}x' if x is not None else 'not measured'}"
                    + (f" ({', '.join(parts)})" if parts else ""))
    return "modes tried: " + "; ".join(said)


def ladder_effect(result: Measured) -> str:
    """`x8 ran out of memory; x4 fits with 31.2 GiB (44%) to spare, 1.62x per sample`: a batch
    ladder's outcome, from its sweep rows and the budget its rungs were held to ('' for any other fix)."""
    rows = [r for r in result.sweep or [] if isinstance(r, dict)
            and vocabulary.batch_scale(r.get("overrides") or {}) > 1]
    if not rows:
        return ""
    scale = lambda r: vocabulary.batch_scale(r.get("overrides") or {})  # noqa: E731
    oom = sorted((r for r in rows if r.get("oom")), key=scale)
    over = sorted((r for r in rows if r.get("fits") is False and not r.get("oom")), key=scale)
    fitting = sorted((r for r in rows if r.get("fits") and units.finite(r.get("speedup")) is not None), key=scale)
    said = [f"x{scale(oom[0]):g} ran out of memory"] if oom else []
    said += [f"x{scale(over[0]):g} went over the budget"] if over and not oom else []
    budget, best = units.finite(result.memory_budget_bytes), fitting[-1] if fitting else None
    if best is not None:
        peak = units.finite(best.get("peak_memory_bytes"))
        spare = (f" with {units.bytes_(budget - peak)} ({(budget - peak) / budget:.0%}) to spare"
                 if budget and peak is not None and peak <= budget else "")
        said.append(f"x{scale(best):g} fits{spare}, {best['speedup']:.2f}x per sample")
    elif oom or over:
        said.append("no larger batch fits")
    return "; ".join(said)


def loss_words(check: object) -> tuple[str, str]:
    """The numerics check (`checked`, `passed`, `baseline_mean`, `candidate_mean`, `tolerance`, `reason`)
    as words, and its state: "ok", "bad" or "" (no verdict)."""
    if check is None:
        return "", ""
    if isinstance(check, bool):
        return ("loss check passed" if check else "loss check failed"), ("ok" if check else "bad")
    if not isinstance(check, dict):
        return str(check), ""
    if check.get("checked") is False:
        return f"loss not checked: {check.get('reason') or 'not visible to the probe'}", ""
    if check.get("finite") is False:
        return "loss check failed: the loss was not finite", "bad"
    passed = check.get("passed")
    detail = str(check.get("detail") or "")
    base, cand, tol = units.finite(check.get("baseline_mean")), units.finite(check.get("candidate_mean")), units.finite(check.get("tolerance"))
    if not detail and base is not None and cand is not None:
        detail = f"mean {cand:.4g} vs {base:.4g}" + (f" (tolerance ±{tol:.2g})" if tol is not None else "")
    head = "loss check passed" if passed is True else "loss check failed" if passed is False else "loss check"
    return head + (f": {detail}" if detail else ""), ("ok" if passed is True else "bad" if passed is False else "")


def applicability_words(applicability: object) -> str:
    """What a fix's applicability means for the user."""
    try:
        return APPLICABILITY_WORDS[Applicability(applicability)]
    except ValueError:
        return str(applicability or "")


def throughput_basis(tp: Throughput) -> str:
    """Which steps the throughput rests on: `over 15 steps outside the profiler`."""
    basis, n = tp.basis, tp.n_steps
    if basis == "unprofiled":
        return f"over {plural(n, 'step')} outside the profiler"
    if basis == "all":
        return f"over all {plural(n, 'measured step')}" if n != 1 else "over the one measured step"
    return ""


def baseline_vs_headline(tp: Throughput, baseline: dict) -> str:
    """Why the experiments' baseline and the headline throughput differ, when they do by more than 5%."""
    for head_rate, key, unit in ((tp.samples_per_s, "samples_per_s", "samples/s"),  # noqa: B007  (unit: read after the break)
                                 (tp.steps_per_s, "steps_per_s", "steps/s")):
        head, base = units.finite(head_rate), units.finite((baseline or {}).get(key))
        if head and base:
            break
    else:
        return ""
    diff = base / head - 1
    if abs(diff) < 0.05:
        return ""
    runs = baseline.get("runs")
    fresh = plural(runs, "fresh run") if isinstance(runs, int) and runs > 0 else "fresh runs"
    return (f"The experiments' baseline, {units.rate(base, unit)}, is {units.frac(abs(diff))} "
            f"{'below' if diff < 0 else 'above'} the headline {units.rate(head, unit)}: it was measured in {fresh} of the "
            "script without the profiler, beside the candidates, while the headline comes from the profiled run's steps "
            "outside the profiler window. Runs of the same script differ this much here; each speedup compares a "
            "candidate with the baselines run beside it, never with the headline.")


def wall_words(report: Report) -> str:
    """How long the run took: the whole `advise profile` (probe, analysis, experiments) when the
    report says so, with its parts; else the probe run alone, said as such."""
    total, probe = units.finite(report.total_wall_s), units.finite(report.wall_s)
    block = report.experiments
    exp_s, n_runs = (units.finite(block.child_wall_s), block.n_runs) if block is not None else (None, None)
    if total is not None:
        parts = []
        if probe is not None:
            parts.append(f"the profiled run {units.time_s(probe)}")
        if exp_s is not None and n_runs:
            parts.append(f"experiments {units.time_s(exp_s)} in {plural(n_runs, 'run')}")
        return f"took {units.time_s(total)} in all" + (f" ({', '.join(parts)})" if parts else "")
    if probe is not None:
        return f"the profiled run took {units.time_s(probe)}"
    return ""


def memory_words(mem: Memory) -> str:
    """Peak memory as the terminal and the page's header say it: the accelerator's peak of its
    total; else the script's process tree's host memory, on the basis report.json names."""
    if units.finite(mem.peak_allocated_bytes) is not None:
        return f"{units.bytes_(mem.peak_allocated_bytes)} of {units.bytes_(mem.device_total_bytes)}"
    if mem.basis == "pss" and units.finite(mem.peak_pss_bytes) is not None:
        rss = f"; RSS summed {units.bytes_(mem.peak_rss_bytes)}" if units.finite(mem.peak_rss_bytes) is not None else ""
        return f"{units.bytes_(mem.peak_pss_bytes)} (PSS of the script's processes{rss})"
    if units.finite(mem.peak_rss_bytes) is not None:
        return f"{units.bytes_(mem.peak_rss_bytes)} (RSS summed over the script's processes)"
    return ""


def confirmed_words(confirmed: dict | None) -> str:
    """`--confirm`'s fresh runs in one line: `as you will apply it (...): 4.06× faster (95% CI ...), verified`."""
    if not confirmed:
        return ""
    result = Experiment.from_dict(confirmed)
    result.measured_by = None  # the line says how
    return f"as you will apply it (fresh runs of the script, --confirm): {measured_sentence(result)}"


def ranks_words(ranks: list[Rank]) -> str:
    """A launched job in one line: `2 (figures are rank 0's; median step 12.1 ms · 12.4 ms; rank 1 failed)`."""
    if not ranks:
        return ""
    steps = " · ".join(units.time_s(r.step_s) for r in ranks)
    bad = [f"rank {r.rank} {r.status}" for r in ranks if r.status not in (None, "done", "finished")]
    return f"{len(ranks)} (figures above are rank 0's; median step per rank {steps}" + (f"; {', '.join(bad)}" if bad else "") + ")"


def phases_words(phases: list[LoopPhase]) -> str | None:
    """The loop's phases outside its steps, as the terminal and the page say them: "evaluation 18%
    of the wall time, every 50 steps · checkpoint 3%, every 50 steps"."""
    said: list[str] = []
    for phase in phases:
        said.append(f"{phase.name} {units.frac(phase.share)}" + (" of the wall time" if not said else "") + _how_often(phase))
    return " · ".join(said) or None


def _how_often(phase: LoopPhase) -> str:
    every = units.finite(phase.every_steps)
    if not ((phase.steps or phase.count or 0) > 1):  # (a report of an older schema has no `steps`)
        return f", once in {every:.0f} steps" if every is not None else ""
    return f", every {every:.0f} steps" if every is not None and every >= 1.5 else ", every step"


def energy_words(energy: Energy | None) -> tuple[str, str]:
    """The GPU's energy as (headline, detail): `3.1 J/sample` and `412 W mean over 5.2 s`."""
    if energy is None or units.finite(energy.joules) is None:
        return "", ""
    head = (f"{energy.joules_per_sample:.3g} J/sample" if units.finite(energy.joules_per_sample) is not None
            else f"{energy.joules_per_step:.3g} J/step")
    source = energy_source_words(energy.source)
    return head, f"{units.number(energy.watts_mean)} W mean over {units.time_s(energy.seconds)}, {source}"


def step_clock_words(report: Report) -> str:
    """Where a GPU run's step time comes from, and the host's time beside it where the two differ:
    ` on the device (Python queued it in 13.1 ms)`; empty on a CPU."""
    steps = [s for s in report.steps if s.clock == "device"]
    if not steps or len(steps) < len(report.steps) / 2:
        return ""
    device = sorted(d for s in steps if (d := units.finite(s.duration_s)) is not None)
    host = sorted(h for s in steps if (h := units.finite(s.host_s)) is not None)
    if not device or not host:
        return " on the device"
    d, h = device[len(device) // 2], host[len(host) // 2]
    return f" on the device (Python queued it in {units.time_s(h)})" if h < 0.8 * d else " on the device"


def mfu_words(mfu: Mfu | None) -> tuple[str, str]:
    """Model FLOPs utilization as (headline, detail): `35.8%` and `5.62 of 15.7 TFLOP/s, fp32 peak of
    the device`; a CPU run, or a device without a peak, gets the achieved rate alone."""
    if mfu is None:
        return "", ""
    tflops = units.finite(mfu.achieved_tflops)
    if tflops is None:
        return "", ""
    achieved = units.flops(tflops * 1e12) + "/s"
    dtype = mfu.dtype or "?"
    if units.finite(mfu.mfu) is not None:
        return units.frac(mfu.mfu, 1), f"{achieved} of the {units.number(mfu.peak_tflops)} TFLOP/s dense {dtype} peak"
    return f"{achieved} achieved", f"{dtype}; {mfu.peak_source or 'no peak to compare with'}"


def fix_flags(fix: Fix) -> str:
    """A fix said as the script's own flags, before its title: `run it with --dtype=bfloat16, the
    script's own flag, and a change of code (advise apply)`; '' where no flag makes it."""
    if not fix.flags:
        return ""
    own = "the script's own flag" + ("s" if len(fix.flags) > 1 else "")
    return f"run it with {' '.join(fix.flags)}, {own}" + (", and a change of code (advise apply)" if fix.with_code else "")


def patch_line(command: str, notes: int) -> str:
    """The recommendation's last line: the command that writes it into the user's code, and how many
    of its changes it cannot write (``advise apply RUN_DIR`` says which and why)."""
    if not command:
        return "not written into your code automatically: advise apply says why"
    return f"apply it: {command}" + (f" ({plural(notes, 'change')} to make by hand: advise apply says which)"
                                     if notes else "")


def time_spent(block: Experiments | None) -> str | None:
    """Where the experiments' time went, in one line, and what the budget left without a verdict with
    the command that measures it: "fixes measured in 9.8 s of a 10 s budget (automatic): the baseline
    4.1 s in 5 windows, dataloader-starvation (num_workers=4) 2.0 s, ...; not measured: Compile the
    model (predicted 52 s, 40 s of it compiling); not decided when the budget ended: Double the batch
    size (1.36× faster, 95% CI 1.21–1.52×): advise profile --select EXP001 --time-budget 130 train.py".
    None where no arm ran and nothing was left out (`block`: report.json's `experiments`)."""
    if block is None or (not block.arms and not block.left_out):
        return None
    spent = sum(a.seconds or 0.0 for a in block.arms)
    again = (f", {block.window_again_s:.0f} s of it added to measure the disturbed profiled window again"
             if block.window_again_s else "")
    again += (f", {block.disturbed_s:.0f} s of it added for the windows a neighbour disturbed"
              if block.disturbed_s and block.disturbed_s >= 0.5 else "")
    again += (f", {block.held_s:.0f} s of it added while the windows waited for a neighbour to leave the cores"
              if block.held_s and block.held_s >= 0.5 else "")
    budget = (f" of a {block.budget_s:.0f} s budget ({'--time-budget' if block.budget_given else 'automatic'}{again})"
              if block.budget_s else "")
    parts = [f"{'the baseline' if a.arm == 'baseline' else a.arm} {units.time_s(a.seconds)}"
             + (f" ({units.time_s(a.switch_s)} switching)" if (a.switch_s or 0) >= 1 else "")
             + (f" in {a.windows} windows" if a.arm == "baseline" else "") for a in block.arms]
    if block.between_steps_s and block.between_steps_s >= max(BETWEEN_SAID_S, BETWEEN_SAID_FRAC * spent):
        spent += block.between_steps_s
        parts.append(f"between the steps {units.time_s(block.between_steps_s)} (the script waiting while each round "
                     "was planned, switching between windows, and any evaluation, checkpoint or loader restart)")
    if block.cut_window_s and block.cut_window_s >= BETWEEN_SAID_FRAC * spent:
        spent += block.cut_window_s
        parts.append(f"a window the budget ended inside {units.time_s(block.cut_window_s)} (not read)")
    line = f"fixes measured in {units.time_s(spent)}{budget}" + (": " + ", ".join(parts) if parts else "")
    by_command: dict[str | None, list] = {}
    for left in block.left_out:  # one command measures a rule's fixes: said once, after them
        by_command.setdefault(left.command, []).append(left)
    for command, lefts in by_command.items():
        unstarted = [f"{left.fix} (predicted {left.predicted_s or 0:.0f} s"
                     + (f", {left.compile_s:.0f} s of it compiling" if left.compile_s else "") + ")"
                     for left in lefts if left.speedup is None]
        cut = [f"{left.fix} ({', '.join(x for x in (fmt.speedup_words(left.speedup), fmt.interval(left.ci_low, left.ci_high, ci=True)) if x)})"
               for left in lefts if left.speedup is not None]
        said = ([f"not measured: {', '.join(unstarted)}"] if unstarted else []) + \
            ([f"not decided when the budget ended: {', '.join(cut)}"] if cut else [])
        line += "; " + "; ".join(said) + (f": {command}" if command else "")
    return line
