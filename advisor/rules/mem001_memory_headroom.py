"""## What it does
Compares peak memory with the budget: over it or near OOM, fixes measured; far under, a bigger batch.

The budget is `--memory-budget`, else the device's capacity. Over budget or close to
out-of-memory, the rule says where the memory goes and proposes fixes that are measured for
memory and speed; far under budget, it proposes the largest batch that fits (searched through
the script's DataLoader; a script that builds its own batches gets the change as a manual fix).

The peak is the probe's, measured per window (`torch.cuda.max_memory_allocated` on GPU; on CPU
the process's resident-set high-water mark, which includes the interpreter and torch), or the
trace's memory events. The breakdown comes from the live model and optimizer: parameters,
gradients, optimizer state (its state tensors), and the rest of the peak (activations and
other buffers; on CPU also the interpreter and torch, counted apart).

Over budget (or near OOM) each fix is its own finding, with the same breakdown:

- activation checkpointing of the model's repeated blocks (a Hugging Face model through
  `gradient_checkpointing_enable()`), injected without editing the script;
- a halved micro-batch with gradient accumulation keeping the effective batch;
- bf16 autocast, where the device has native bf16;
- on a GPU whose allocator reserves 1.3x or more of what its tensors use at the peak
  (fragmentation), expandable segments (`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`),
  measured in fresh runs (the allocator reads the setting before its first allocation);
- where optimizer state and gradients dominate: ZeRO-style sharding with FSDP2 `fully_shard`
  over the job's ranks, or optimizer-state offload on one device (an estimate from the
  breakdown, not measured).

On CPU the rule judges only a budget given with `--memory-budget` (the machine's RAM is no
training budget). Training runs only.

## Why is this bad?
A run over its budget does not fit where it must run (a smaller GPU, a shared node, a
container limit); one within a few percent of capacity fails on the first larger input, and
the allocator's retries and fragmentation already slow it down. Checkpointing, smaller
micro-batches and bf16 trade some speed for memory: the trade is measured, not guessed. At the
other end, a small batch leaves the device underused: memory is the budget for a bigger one.

## Example
```python
for block in self.blocks:           # 32 blocks, each keeping its activations for backward
    x = block(x)
```

Use instead:
```python
from torch.utils.checkpoint import checkpoint
for block in self.blocks:           # activations recomputed in backward
    x = checkpoint(block, x, use_reentrant=False)
```

## Fix safety
Checkpointing is safe: the same computation, recomputed (non-reentrant checkpointing restores
the RNG state, so dropout draws the same masks). A smaller micro-batch, bf16 and a larger
batch are unsafe: they change numerics or the optimization (batch-norm statistics, the
learning rate a larger batch wants). Sharding and offload are manual, shown for display.

## Options
- `max-used-frac` (default 0.4): report headroom when the peak is at most this share of the
  budget.
- `near-oom-frac` (default 0.92): report OOM risk when the peak (reserved, on GPU) reaches
  this share of the budget.
- `max-gpu-busy-frac` (default 0.9): report headroom only when the GPU was busy for less than
  this share of the step (a saturated GPU gains little from a larger batch).
- `state-dominates-frac` (default 0.5): propose sharding or offload when optimizer state and
  gradients are at least this share of the script's peak.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

import msgspec
import numpy as np

from advisor import units
from advisor.analysis import memory as mem
from advisor.analysis.memory import DEVICE_MARGIN
from advisor.profile import Profile
from advisor.run_dir.seen import MemoryAccount

from . import helpers as h
from .registry import Finding, Fix, rule

if TYPE_CHECKING:
    import pandas as pd


FRAGMENTED = 1.3  # reserved over allocated at the peak: the allocator holds this much more than the tensors use


@rule(code="MEM001", name="memory-headroom")
def check(profile: Profile, *, max_used_frac: float = 0.4, near_oom_frac: float = 0.92,
          max_gpu_busy_frac: float = 0.9, state_dominates_frac: float = 0.5) -> Iterator[Finding]:
    if not h.is_training(profile):
        return
    info = profile.memory
    explicit = info.budget_source == "option"
    if not profile.has_gpu and not explicit:
        return
    peak, reserved, total, source = _peaks(profile)
    budget = info.budget_bytes if explicit or not total else total
    if not budget or peak is None:
        return
    used = peak / budget
    near = max(used, (reserved or 0) / total if total else 0.0)
    runtime = info.runtime_bytes if source == "rss-high-water" else 0  # the interpreter, in an RSS peak only
    parts = mem.breakdown(peak, {**info.tensors, "runtime_bytes": runtime or 0})
    evidence = {
        "peak_memory_bytes": int(peak),
        "memory_basis": info.memory_basis if source == "probe" else source,
        "budget_bytes": int(budget),
        "budget_source": info.budget_source or "device",
        "peak_budget_frac": h.r3(used),
        "peak_reserved_bytes": int(reserved) if reserved else None,
        "device_total_bytes": int(total) if total else None,
        "source": source,
        **(parts or {}),
    }
    if profile.has_gpu and total:  # the schema-1 evidence of GPU runs
        evidence.update(peak_allocated_bytes=int(peak), peak_allocated_frac=h.r3(peak / total),
                        peak_reserved_frac=h.r3((reserved or peak) / total))
    evidence = {k: v for k, v in evidence.items() if v is not None}
    if peak > budget or near >= near_oom_frac:
        yield from _memory_fixes(profile, evidence, parts, peak, budget, state_dominates_frac)
        return
    if used > max_used_frac:
        return
    busy = _gpu_busy_frac(profile)
    wait = h.data_wait_frac(profile)
    if busy is not None and busy >= max_gpu_busy_frac:
        return
    if wait is not None and wait >= 0.10:
        return  # input-bound: a larger batch only loads more data per step
    fixed = sum(parts[k] for k in mem.PARTS[:4]) if parts else 0
    scale = 2
    while scale < 8 and _predicted(peak, fixed, scale * 2) <= 0.8 * budget:
        scale *= 2
    if _predicted(peak, fixed, scale) > 0.8 * budget:
        return
    evidence.update(gpu_busy_frac=h.r3(busy), data_wait_frac=h.r3(wait), suggested_batch_scale=scale,
                    fixed_bytes=int(fixed))
    where = "GPU memory" if profile.has_gpu and not explicit else "the memory budget"
    yield Finding(
        title=f"The run uses {used:.0%} of {where}: room for {_a(scale)}x larger batch",
        summary=(f"Peak memory is {units.bytes_(peak)} of {units.bytes_(budget)}"
                 f"{' while the GPU is busy for ' + format(busy, '.0%') + ' of the step' if busy is not None else ''}: "
                 f"{_a(scale)}x batch would still fit under 80%{_basis(fixed, peak)}. {_ladder_words(profile, explicit)}"),
        severity="low",
        evidence={k: v for k, v in evidence.items() if v is not None},
        fix=_batch_fix(profile, scale),
    )


def _basis(fixed: float, peak: float) -> str:
    """What the estimate rests on: the activations, not a ratio of totals."""
    if not fixed:
        return ""
    return (f" (an estimate: parameters, gradients and optimizer state, {units.bytes_(fixed)}, stay; the rest of the "
            f"peak, {units.bytes_(max(0.0, peak - fixed))}, grows with the batch)")


def _ladder_words(profile: Profile, explicit: bool) -> str:
    """How the batch ladder is measured, or why it is not."""
    if profile.probed and not profile.observed.dataloaders:
        return "The script builds its own batches, so no larger batch is injected: the change is yours to make."
    kept = "" if explicit else (f", each held to {1 - DEVICE_MARGIN:.0%} of the device's memory (the rest stays free "
                                "for the allocator's fragmentation and an evaluation step)")
    return (f"The ladder is measured rung by rung, smallest first{kept}; a rung that runs out of memory ends the "
            "ladder, and the rungs below it stand.")


def _batch_fix(profile: Profile, scale: int) -> Fix:
    """The batch is scaled through the script's DataLoader; a script that builds its own batches
    (tensors sliced in a loop, a generator) gets the change as a manual fix, since nothing can be
    injected there and a measured claim would be a false one."""
    lr = f"optimizer = torch.optim.AdamW(model.parameters(), lr={scale} * lr)  # or sqrt({scale}) * lr"
    if profile.probed and not profile.observed.dataloaders:  # a probed run (not a bare trace) without one
        return Fix.manual(f"Build {scale}x larger batches where the script makes them (and scale the learning rate)",
                          f"batch_size = {scale} * batch_size  # where the loop slices or generates its batches\n{lr}")
    return Fix.unsafe(f"Try {_a(scale)}x larger batch (and scale the learning rate)", {"batch_size_scale": scale})


def _predicted(peak: float, fixed: float, scale: float) -> float:
    """The peak at `scale` times the batch: what does not grow with it stays (parameters, state, runtime)."""
    return fixed + scale * max(0.0, peak - fixed)


def where_it_goes(parts: dict | None, peak: float) -> str:
    """`activations and other 420 MiB (65%), interpreter and torch 222 MiB, ...`: the breakdown in words."""
    if not parts:
        return "no breakdown (the probe saw no optimizer)"
    order = sorted(mem.PARTS, key=lambda k: -parts.get(k, 0))
    return ", ".join(f"{mem.PART_WORDS[k]} {units.bytes_(parts.get(k, 0))} ({h.frac(parts.get(k, 0), peak):.0%})"
                     for k in order if k != "runtime_bytes" or parts.get(k))


def _memory_fixes(profile: Profile, evidence: dict, parts: dict | None, peak: float, budget: float,
                  state_dominates_frac: float) -> Iterator[Finding]:
    """One finding per fix that applies here, each with the breakdown; a manual one when none does."""
    found = list(_each_fix(profile, evidence, parts, peak, budget, state_dominates_frac))
    yield from found
    if not found:
        yield Finding(
            title=_head(evidence, peak, budget),
            summary=f"{_head(evidence, peak, budget)}. Where it goes: {where_it_goes(parts, peak)}.",
            severity="high" if peak > budget else "medium", evidence=evidence,
            fix=Fix.manual(
                "Cut activation memory: accumulation, checkpointing or bf16",
                ("# halve the micro-batch and accumulate gradients over 2 of them\n"
                 "loss = loss_fn(model(x), y) / 2\nloss.backward()\n"
                 "if (i + 1) % 2 == 0:\n    optimizer.step(); optimizer.zero_grad(set_to_none=True)\n"
                 "# or: torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)\n"
                 '# or: with torch.autocast("cuda", dtype=torch.bfloat16): ...')))


def _head(evidence: dict, peak: float, budget: float) -> str:
    if peak > budget:
        return f"Peak memory {units.bytes_(peak)} is over the {units.bytes_(budget)} budget"
    return (f"Peak memory is {evidence.get('peak_reserved_frac') or evidence['peak_budget_frac']:.0%} of "
            f"{units.bytes_(budget)}: close to out-of-memory")


def _each_fix(profile: Profile, evidence: dict, parts: dict | None, peak: float, budget: float,
              state_dominates_frac: float) -> Iterator[Finding]:
    over = peak > budget
    head = _head(evidence, peak, budget)
    where = f"{head}. Where it goes: {where_it_goes(parts, peak)}."
    severity = "high" if over else "medium"
    script = peak - (parts["runtime_bytes"] if parts else 0)
    activations = parts["activations_other_bytes"] if parts else script
    target = profile.memory.checkpointable
    if target and activations >= 0.25 * script:
        what = (f"the {target.blocks} {target.block} blocks of `{target.path}`" if target.how == "blocks"
                else f"{target.model} (gradient_checkpointing_enable)")
        yield Finding(
            title=f"{head}: checkpoint activations of {what}",
            summary=f"{where} Checkpointing keeps only each block's input and recomputes the rest in backward.",
            severity=severity, evidence={**evidence, "checkpoint_target": msgspec.to_builtins(target)},
            fix=Fix.safe(f"Checkpoint {what} (use_reentrant=False)", {"activation_checkpointing": True}))
    if profile.observed.dataloaders and activations >= 0.25 * script:
        yield Finding(
            title=f"{head}: halve the micro-batch, accumulate 2",
            summary=f"{where} Half the micro-batch holds about half the activations; accumulating two keeps the effective batch.",
            severity=severity, evidence=evidence,
            fix=Fix.unsafe("Halve the micro-batch and accumulate gradients over 2 micro-batches", {"batch_size_scale": 0.5}))
    if profile.env.bf16_supported and (profile.observed.loss_dtype or "float32") == "float32":
        yield Finding(
            title=f"{head}: run the forward in bf16",
            summary=f"{where} bf16 autocast halves the activations the matmuls keep for backward.",
            severity=severity, evidence=evidence,
            fix=Fix.unsafe("Run forward and loss under bf16 autocast", {"autocast": "bfloat16"}))
    reserved = evidence.get("peak_reserved_bytes")
    conf = profile.env.cuda_alloc_conf or ""
    if profile.has_gpu and reserved and reserved >= FRAGMENTED * peak and "expandable_segments:True" not in conf:
        yield Finding(
            title=f"{head}: the allocator holds {reserved / peak:.1f}x what the tensors use",
            summary=(f"{where} The caching allocator reserved {units.bytes_(reserved)} for a peak of "
                     f"{units.bytes_(peak)} allocated: freed blocks of odd sizes cannot be reused (fragmentation). "
                     "Expandable segments grow in place instead; the allocator reads the setting at its first "
                     "allocation, so fresh runs of the script measure it."),
            severity=severity, evidence={**evidence, "reserved_allocated_ratio": h.r3(reserved / peak)},
            fix=Fix.safe("Let the CUDA allocator expand its segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)",
                         {"expandable_segments": True}))
    if parts and parts["optimizer_state_bytes"] + parts["gradients_bytes"] >= state_dominates_frac * script:
        ranks = profile.env.world_size or 1
        est = mem.sharding_estimate(parts, ranks)
        if ranks > 1:
            title = f"{head}: shard optimizer state and gradients over the {ranks} ranks"
            text = (f"by the breakdown's estimate (not measured), per rank: ZeRO-1 (optimizer state) saves "
                    f"{units.bytes_(est['zero1_saved_bytes'])}, ZeRO-2 (+ gradients) {units.bytes_(est['zero2_saved_bytes'])}, "
                    f"ZeRO-3 (+ parameters) {units.bytes_(est['zero3_saved_bytes'])}")
            snippet = ("from torch.distributed.fsdp import fully_shard   # FSDP2: ZeRO-3 style\n"
                       "for block in model.blocks:\n    fully_shard(block)\nfully_shard(model)\n"
                       "optimizer = torch.optim.AdamW(model.parameters(), lr=lr)  # built after sharding")
        else:
            title = f"{head}: offload optimizer state to the host"
            text = (f"by the breakdown's estimate (not measured), offloading optimizer state frees "
                    f"{units.bytes_(est['offload_saved_bytes'])}; over N ranks FSDP2 fully_shard would save "
                    f"(N-1)/N of optimizer state, gradients and parameters")
            snippet = ("# optimizer state on the host, its step there too (one device):\n"
                       "from torch.distributed.fsdp import fully_shard, CPUOffloadPolicy\n"
                       "fully_shard(model, offload_policy=CPUOffloadPolicy())   # or DeepSpeed ZeRO-Offload")
        yield Finding(
            title=title, summary=f"{where} Optimizer state and gradients dominate: {text}.", severity=severity,
            evidence={**evidence, **{f"estimated_{k}": v for k, v in est.items() if k != "ranks"}, "ranks": ranks},
            fix=Fix.manual(title.split(": ", 1)[1].capitalize() + " (an estimate, not measured)", snippet))


def _peaks(profile: Profile) -> tuple[float | None, float | None, float | None, str | None]:
    """(peak, peak reserved, device total, source): the probe's figures, else the trace's memory events."""
    info = profile.memory
    total = info.device_total_bytes or (profile.env.device_memory_bytes if profile.has_gpu else None)
    if info.peak_allocated_bytes is not None:
        return float(info.peak_allocated_bytes), info.peak_reserved_bytes, total, "probe"
    ev = profile.memory_events
    if not profile.has_gpu:
        return _cpu_peak(info, ev)
    if ev.empty:
        return None, None, total, None
    gpu = ev[ev["device_type"] == 1]
    if gpu.empty or not gpu["total_allocated"].notna().any():
        return None, None, total, None  # old traces: deltas only, the baseline is unknown
    reserved = gpu["total_reserved"].max()
    return float(gpu["total_allocated"].max()), (float(reserved) if np.isfinite(reserved) else None), total, "trace"


def _cpu_peak(info: MemoryAccount, ev: pd.DataFrame) -> tuple[float | None, float | None, float | None, str | None]:
    """On CPU, the allocator's peak where the trace has memory events (what the profiled steps
    allocated on top of the persistent tensors), as the experiments measure it; else the probe's
    resident-set high-water mark."""
    cpu = ev[ev["device_type"] == 0] if not ev.empty else ev
    tensors = info.tensors
    if not cpu.empty and cpu["total_allocated"].notna().any() and tensors:
        persistent = sum(tensors.get(k, 0) for k in ("parameters_bytes", "live_gradients_bytes", "optimizer_state_bytes"))
        return float(cpu["total_allocated"].max()) + persistent, None, None, "cpu-allocator"
    if info.peak_memory_bytes:
        return float(info.peak_memory_bytes), None, None, info.memory_basis or "probe"
    return None, None, None, None


def _gpu_busy_frac(profile: Profile) -> float | None:
    steps = h.trace_steps(profile)
    if len(steps):
        return float(np.median(steps["gpu_busy_us"] / steps["dur_us"]))
    util = profile.samples["gpu_util_percent"] if "gpu_util_percent" in profile.samples else None
    if util is not None and util.notna().any():
        return float(util.mean()) / 100.0
    return None


def _a(scale: int) -> str:
    """"a 4", "an 8", "an 11", "an 18": the article as the number is said."""
    return f"{'an' if str(scale).startswith('8') or scale in (11, 18) else 'a'} {scale}"
