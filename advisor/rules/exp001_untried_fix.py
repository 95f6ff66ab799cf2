"""## What it does
Measures cheap fixes that apply to this run though no other rule proposed them.

They are bf16 autocast where the device computes bf16 natively and the model trains in FP32,
`torch.compile`, the fused optimizer step, as many intra-op threads as the rank's cores, loading
in the training process where the loop waits on DataLoader workers for under 30% of the step (a
worker's hand-over, and the cores its process takes from the training threads, can cost more
than a small batch takes to load: minGPT's adder, 12% data wait with 4 workers on 2 cores, is
1.14x faster by hand with none), and a batch twice as large where a DataLoader sets it.

Screening is cheap, not free (a short window each; compile's compilation, seconds), and where
the loop waits on data for over half the step the loading comes first: a fix of the compute is
not screened alone there (it would measure the loader's hand-overs, not what it gains once the
loading is fixed), nor a larger batch (the loop is input-bound: a larger batch loads no more
samples a second). bf16 and the fused step, whose gain the profile estimates, are measured
stacked on the loading fix once one wins (`evidence.after`): on a starved loop whose AdamW step
is 5% of its step, both took 3 workers from 1.80x to 2.03x by hand. A rule that proposes one of
them (CPU002's fused step) takes over the screen and its wait. Compile and the threads wait for a
second `advise profile`.

Each screen carries an estimate where the profile has evidence for one, so the time budget goes
to the likeliest first (:mod:`advisor.experiments.worth`): bf16 half the share of the step its
FP32 GEMMs of 100 MFLOP or more take on a CPU (smaller ones gain nothing: minGPT's adder, 0.84x by
hand), the fused step 65% of the optimizer's share on a CPU (the single-tensor loop it replaces;
30% over foreach kernels, a GPU's default), loading in the process the loop's wait on the workers. The rest
(compile, a larger batch, threads) say nothing in a profile about their gain: the engine's guess.

A rule's threshold decides what is explained first; it never hides a fix that can be measured.
This rule explains nothing by itself: its findings stay in the report only when the experiments
verify a gain. Unmeasured (`--no-experiments`, `advise analyze`, `--fresh-runs`) or not faster,
they are left out, and report.json's `experiments.screened` lists what was tried.

## Why is this bad?
The rules look for known patterns with thresholds set to avoid false alarms; a fix whose gain
depends on the model, the machine and the library versions (bf16 units, compile's fusion, a
fused kernel) can be worth 1.1-1.7x below every threshold. On nanoGPT's and minGPT's CPU recipes
bf16 autocast was 1.14x and 1.73x by hand, while the rule on FP32 matmuls stayed silent.

## Example
```python
for x, y in loader:
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
```

Use instead:
```fix
{"autocast": "bfloat16"}
```

## Fix safety
Per fix: bf16 autocast, `torch.compile` and a larger batch change numerics (unsafe: the
experiment compares losses; a larger batch usually wants its learning rate re-tuned); the fused
optimizer step, the thread count and the workers do not (safe).

## Options
- `fixes` (default "autocast,compile,optimizer,threads,workers,batch"): which fixes to screen,
  comma-separated.
"""

from __future__ import annotations

from typing import Iterator

from advisor.overrides.cores import cores_per_rank

from advisor.model import AFTER, SCREEN
from advisor.profile import Profile

from . import helpers as h
from .registry import Finding, Fix, rule

WORKERS_MAX_WAIT = 0.3  # above it, loading in the loop would surely cost more than the hand-over it saves
COMPUTE_MAX_WAIT = 0.5  # above it the loading comes first: a compute fix would measure the loader
BATCH_MAX_WAIT = 0.5    # above it, the loop is input-bound: a larger batch does not load faster
_FUSED = {"Adam", "AdamW", "SGD", "Adagrad"}
_COMPILED = ("CompiledFunction", "Torch-Compiled Region", "CompiledFxGraph")


@rule(code="EXP001", name="untried-fix")
def check(profile: Profile, *, fixes: str = "autocast,compile,optimizer,threads,workers,batch") -> Iterator[Finding]:
    wanted = {f.strip() for f in fixes.split(",") if f.strip()}
    if not h.is_training(profile):
        return
    dev = h.device(profile)
    waits = h.data_wait_frac(profile) or 0.0
    after = None
    if waits > COMPUTE_MAX_WAIT:  # input-bound: the compute's fixes are measured on the loading fix, or not at all
        wanted -= {"compile", "threads"}
        after = "dataloader"
    if waits > BATCH_MAX_WAIT:  # loading sets the pace: a larger batch loads as many samples a second
        wanted.discard("batch")
    if "autocast" in wanted and dev.bf16 and _fp32_matmuls(profile):
        yield _screen("bf16 autocast", Fix.unsafe("Run the forward pass under bf16 autocast", {"autocast": "bfloat16"}),
                      f"this {'CPU' if dev.kind == 'cpu' else 'GPU'} computes bf16 natively and the model's matmuls run in FP32",
                      _times(h.BF16_GEMM_SAVES, h.cpu_fp32_gemm_share(profile)[0] if dev.kind == "cpu" else None), after)
    if "compile" in wanted and not _compiled(profile):
        yield _screen("torch.compile", Fix.unsafe("Compile the model with torch.compile", {"compile": True}),
                      "the model runs eagerly")
    optimizers = [o for o in profile.observed.optimizers if o.cls in _FUSED and not o.fused]
    if "optimizer" in wanted and optimizers:
        names = ", ".join(sorted({o.cls for o in optimizers}))
        single = dev.kind == "cpu" and not any(o.foreach for o in optimizers)  # a GPU's default is foreach
        yield _screen("fused optimizer step", Fix.safe(f"Build {names} with fused=True", {"optimizer": {"fused": True}}),
                      f"{names} steps one tensor or one group at a time",
                      _times(h.FUSED_SAVES_OVER_SINGLE if single else h.FUSED_SAVES_OVER_FOREACH, h.optimizer_frac(profile)),
                      after)
    loaders = profile.observed.dataloaders
    workers = profile.observed.max_workers
    if "workers" in wanted and workers and waits < WORKERS_MAX_WAIT:
        yield _screen("loading in the training process", Fix.safe("Load batches in the training process (num_workers=0)",
                                                                 {"dataloader": {"num_workers": 0}}),
                      f"the loop waits on the DataLoader's {workers} workers for under {WORKERS_MAX_WAIT:.0%} of the step, and "
                      "a worker's hand-over and the cores its process takes have costs of their own", h.data_wait_frac(profile))
    if "batch" in wanted and any(dl.batch_size for dl in loaders):
        yield _screen("a batch twice as large", Fix.unsafe("Double the batch size (and re-tune the learning rate)",
                                                           {"batch_size_scale": 2}),
                      "the DataLoader sets the batch size, and a larger batch often does more per second")
    cores, threads = cores_per_rank(profile.env), profile.env.torch_threads
    if "threads" in wanted and not profile.has_gpu and cores and threads and threads < cores:
        yield _screen(f"{cores} intra-op threads", Fix.safe(f"Run {cores} intra-op threads", {"torch_threads": cores}),
                      f"the script runs {threads} intra-op thread{'s' if threads > 1 else ''} on {cores} cores")


def _screen(what: str, fix: Fix, why: str, gain: float | None = None, after: str | None = None) -> Finding:
    """A fix to screen; `gain`: the share of the step the profile says it may save (None: no
    evidence); `after`: the override a winning fix must set first, this one then measured stacked on it."""
    return Finding(
        title=f"{what[0].upper()}{what[1:]} was measured: no rule predicted its effect",
        summary=f"No rule's threshold was met, but {why}, so the experiments measured {what} in this run.",
        severity="low",
        evidence={SCREEN: True, "why": why, **({AFTER: after} if after else {})},
        fix=fix,
        estimated_gain_frac=h.r3(gain) if gain is not None else None,
    )


def _times(saves: float, share: float | None) -> float | None:
    """The share of the step a fix saves: `saves` of `share` (None: the profile does not say)."""
    return saves * share if share is not None else None


def _fp32_matmuls(profile: Profile) -> bool:
    """Matmuls or convolutions ran, mostly in FP32 (not already under autocast)."""
    ops = h.gemm_ops(profile)
    known = ops[ops["dtype"].notna()] if not ops.empty else ops
    if known.empty:
        return False
    low = known.loc[known["dtype"].isin(h.LOW_PRECISION), "flops"].sum()
    return bool(known["dtype"].isin(h.FP32).any()) and low < 0.5 * known["flops"].sum()


def _compiled(profile: Profile) -> bool:
    names = set(profile.ops["name"].astype(str)) if not profile.ops.empty else set()
    return any(marker in name for name in names for marker in _COMPILED)
