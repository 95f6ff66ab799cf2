"""How a measurement is said: one wording for the terminal, the HTML page and the markdown summary.

A speedup is said one way everywhere: ``1.71× faster (95% CI 1.58–1.84×), verified``. The
functions read the typed result model (:class:`~advisor.model.Experiment`, the recommended
configuration's :class:`~advisor.model.Recommendation`, :class:`~advisor.model.Finding`) and
return plain text; each renderer escapes and styles it. ``state`` is the styling class every
renderer keys on: ``verified``, ``slower``, ``bad``, ``unclear``, ``not-run``, ``estimate``.
"""

from __future__ import annotations

from advisor import format as fmt
from advisor.model import Applicability, Experiment, Finding, Recommendation, Verdict, finite

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

Measured = Experiment | Recommendation


def plural(count, word: str) -> str:
    """`3 steps`, `1 step`."""
    return f"{count} {word}{'' if count == 1 else 's'}"


def verdict_words(verdict) -> tuple[str, str]:
    """(state, label) of a verdict, e.g. ("verified", "verified"); an unknown one is unclear, as written."""
    try:
        return VERDICT_WORDS[Verdict(verdict)]
    except ValueError:
        return "unclear", str(verdict or "")


def state_and_label(result: Measured) -> tuple[str, str]:
    """How `result` fared: verified when it was, else by its verdict, else by its numbers."""
    sp, hi = finite(result.speedup), finite(result.ci_high)
    verdict = getattr(result, "verdict", None)  # a Recommendation has none
    if result.verified and sp is not None:
        return VERDICT_WORDS[Verdict.FASTER]
    if verdict is not None and not (verdict is Verdict.NOT_MEASURED and sp is not None):
        return VERDICT_WORDS[verdict]
    if sp is None:
        return VERDICT_WORDS[Verdict.NOT_MEASURED]
    if sp < 1 and hi is not None and hi < 1:
        return VERDICT_WORDS[Verdict.SLOWER]
    return "unclear", "not verified"


def interval(lo, hi) -> str:
    """`95% CI 1.58–1.84×`, or '' without both ends."""
    text = fmt.interval(lo, hi)
    return f"95% CI {text}" if text else ""


def speedup_with_interval(speedup, lo, hi) -> str:
    """`1.71× faster (95% CI 1.58–1.84×)`, `0.93×, 7% slower (95% CI 0.90–0.96×)`."""
    ivl = interval(lo, hi)
    return fmt.speedup_words(speedup) + (f" ({ivl})" if ivl else "")


def not_applied_words(keys: list[str] | None) -> str:
    """Why a not-applied experiment measured nothing."""
    if not keys:
        return "the override did not take effect in the script"
    return f"{', '.join(keys)} did not take effect in the script"


def _why(result: Measured) -> str:
    if getattr(result, "verdict", None) is Verdict.NOT_APPLIED:
        return not_applied_words(result.not_applied)
    return str(getattr(result, "reason", None) or getattr(result, "error", None) or "")


def _interval_spans_one(result: Measured) -> bool:
    lo, hi = finite(result.ci_low), finite(result.ci_high)
    return lo is not None and hi is not None and lo <= 1 <= hi


def measured_detail(result: Measured) -> str:
    """The result without its label: the speedup and interval (with a remark when they say no gain),
    or why nothing was measured."""
    state, label = state_and_label(result)
    if finite(result.speedup) is None or getattr(result, "verdict", None) is Verdict.NOT_APPLIED:
        return _why(result) or label
    text = speedup_with_interval(result.speedup, result.ci_low, result.ci_high)
    if state == "unclear" and _interval_spans_one(result):
        text += ": the interval includes no gain"
    return text


def measured_sentence(result: Measured) -> str:
    """The whole result in one line: `1.71× faster (95% CI 1.58–1.84×), verified`,
    `0.93×, 7% slower (95% CI 0.90–0.96×)`, `not measured: experiment budget exhausted`."""
    state, label = state_and_label(result)
    if finite(result.speedup) is None or getattr(result, "verdict", None) is Verdict.NOT_APPLIED:
        why = _why(result)
        return f"{label}: {why}" if why else label
    detail = measured_detail(result)
    if state == "slower":
        return detail
    if state == "unclear" and _interval_spans_one(result):
        return f"{detail}, not verified"
    return f"{detail}, {label}"


def estimate_detail(gain) -> str:
    """A rule's own estimate of the step time saved: `up to 3% faster, by the rule's estimate`."""
    return f"up to {fmt.frac(gain)} faster, by the rule's estimate"


def estimate_sentence(gain) -> str:
    return f"estimate: {estimate_detail(gain)} (not measured)"


def has_estimate(finding: Finding) -> bool:
    gain = finite(finding.estimated_gain_frac)
    return gain is not None and gain > 0


def finding_sentence(finding: Finding) -> str:
    """How a finding's fix fared, in one line: the measurement, else the rule's estimate, else not measured."""
    if finding.experiment is not None:
        return measured_sentence(finding.experiment)
    if has_estimate(finding):
        return estimate_sentence(finding.estimated_gain_frac)
    return NOT_MEASURED


def measure_words(m) -> str:
    """A baseline or candidate measurement: samples/s, else steps/s or step time; a number as is."""
    if isinstance(m, dict):
        if finite(m.get("samples_per_s")) is not None:
            return fmt.rate(m["samples_per_s"], "samples/s")
        if finite(m.get("steps_per_s")) is not None:
            return fmt.rate(m["steps_per_s"], "steps/s")
        if finite(m.get("step_time_median_s")) is not None:
            return fmt.time_s(m["step_time_median_s"]) + " / step"
        return ""
    if finite(m) is not None:
        return fmt.value(float(m))
    return "" if m is None else str(m)


def loss_words(check) -> tuple[str, str]:
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
    base, cand, tol = finite(check.get("baseline_mean")), finite(check.get("candidate_mean")), finite(check.get("tolerance"))
    if not detail and base is not None and cand is not None:
        detail = f"mean {cand:.4g} vs {base:.4g}" + (f" (tolerance ±{tol:.2g})" if tol is not None else "")
    head = "loss check passed" if passed is True else "loss check failed" if passed is False else "loss check"
    return head + (f": {detail}" if detail else ""), ("ok" if passed is True else "bad" if passed is False else "")


def applicability_words(applicability) -> str:
    """What a fix's applicability means for the user."""
    try:
        return APPLICABILITY_WORDS[Applicability(applicability)]
    except ValueError:
        return str(applicability or "")


def throughput_basis(tp: dict) -> str:
    """Which steps the throughput rests on: `over 15 steps outside the profiler`."""
    basis, n = tp.get("basis"), tp.get("n_steps")
    if basis == "unprofiled":
        return f"over {plural(n, 'step')} outside the profiler"
    if basis == "all":
        return f"over all {plural(n, 'measured step')}" if n != 1 else "over the one measured step"
    return ""
