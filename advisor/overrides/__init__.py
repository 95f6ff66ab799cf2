"""The override vocabulary: every fix advise can inject without editing the user's code.

One table, torch-free, read by everyone who deals in overrides: the rules propose them
(:class:`advisor.model.Fix`), the probe applies them (``advisor.probe.overrides``), the
experiments sweep and combine them, and the reports show the code change that makes each one
permanent. A key's validator, description, snippet, sweep ladder, "did it take effect" check
and the name of the probe's switch that carries it sit together here, so adding a knob is one
entry here and, for a new kind of change, one switch in ``advisor.probe.switches``. The same
change in a framework's own words (the Hugging Face Trainer's ``bf16=True``) is
:mod:`advisor.framework.words`'s; the cores a rank may plan for, :mod:`advisor.overrides.cores`'s.

An override is plain data: ``{"dataloader": {"num_workers": 4}, "autocast": "bfloat16"}``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Callable

DATALOADER_KEYS: dict[str, type] = {"num_workers": int, "pin_memory": bool, "persistent_workers": bool,
                                    "prefetch_factor": int}
AUTOCAST_DTYPES = ("bfloat16", "float16")
WORKER_LADDER = (2, 4, 8, 16, 32)
MAX_WORKERS = 32
IO_WORKERS_PER_CORE = 4  # workers that wait on I/O (disk, network, sleep) need no core of their own
# Where the training process computes on one thread, its workers may take every core and one more: a
# worker blocked on its full queue leaves its core to the others. On 2 cores, a loader-starved loop
# on 1 thread measured by hand 1.24x with 1 worker, 1.54x with 2, 1.73x with 3, 1.59x with 4. Only
# on a small machine does that value fall between the ladder's doublings.
ONE_THREAD_EXTRA_UP_TO = 4  # cores
BATCH_LADDER = (2, 4, 8)
MICRO_BATCH_CUTS = (0.5, 0.25)  # batch_size_scale below 1: the micro-batch cut, accumulation keeps the effective batch


class OverrideError(ValueError):
    """An override nobody can apply: unknown key or value. The message is one line."""


@dataclass(frozen=True)
class SweepContext:
    """What a ladder needs to know about the machine."""

    cpu_count: int = 1
    io_like: bool = False  # loading waits (disk, sleep) rather than computes: workers may exceed cores
    one_thread: bool = False  # the override runs the training process on one thread (torch_threads=1)
    script_workers: int | None = None  # the script's own loader workers (None: unknown): the baseline's value
    threads: int | None = None  # the training process's intra-op threads, as the script runs

    def oversubscribed(self) -> bool:
        """The script's workers and threads want more cores than there are, and its loader computes:
        fewer workers than its own can win (a worker left to wait frees a core for the step)."""
        own = self.script_workers or 0
        return bool(own) and not self.io_like and own + (self.threads or 1) > self.cpu_count


@dataclass(frozen=True)
class Knob:
    """One override key: how to check a value, say it, make it permanent, sweep it, and see it applied."""

    key: str
    description: str
    # a value's type is its key's (a dict, a dtype's name, a number), checked by `valid`: the callables take any
    valid: Callable[[Any], bool]
    snippet: Callable[[Any], str]
    said: Callable[[Any], str]  # the change in words, as a fix's title says a value that was measured
    took_effect: Callable[[Any, dict], bool]
    switch: str  # the probe's switch that turns it on and off (advisor.probe.switches)
    ladder: Callable[[Any, SweepContext], list[Any]] | None = None  # values to try when the best is unknowable
    # the step's column that is all this value can speed up (its Amdahl bound); None: anything
    part: Callable[[Any], str | None] = lambda v: None
    # samples per step under this value, relative to the script's (the judge then compares samples/s,
    # a memory search sizes by it, and its windows are timed shorter); None: the knob leaves the batch
    batch_scale: Callable[[Any], float] | None = None
    warmup: Callable[[Any], int] = lambda v: 0  # more untimed steps a window needs under this value
    one_off: bool = False  # a cost paid once when switched on (compilation): kept out of the steps, said with its payoff
    fresh_only: str | None = None  # why no live process can switch it (then only fresh runs measure it)


def _dataloader_valid(v: object) -> bool:
    return isinstance(v, dict) and bool(v) and all(k in DATALOADER_KEYS and type(x) is DATALOADER_KEYS[k]
                                                   for k, x in v.items())


def _dataloader_snippet(v: dict) -> str:
    extra = ", ".join(f"{k}={v[k]!r}" for k in DATALOADER_KEYS if k in v)
    text = f"- loader = DataLoader(dataset, batch_size=B, ...)\n+ loader = DataLoader(dataset, batch_size=B, ..., {extra})"
    if v.get("pin_memory"):  # pinned batches pay off only when copied asynchronously
        text += "\n- x = x.to(device)\n+ x = x.to(device, non_blocking=True)"
    return text


def _dataloader_effect(v: dict, applied: dict) -> bool:
    loaders = applied.get("dataloaders") or []
    want = v.get("num_workers")
    return any(want is None or dl.get("num_workers") == want for dl in loaders)


def _workers_ladder(v: dict, ctx: SweepContext) -> list[dict]:
    """The rule's proposal first, then the ladder's other values on the side of the script's own that
    the proposal points to, nearest the proposal first. The script's own value is the baseline, never
    an arm; fewer workers than its own only where its workers and threads oversubscribe the cores
    (:meth:`SweepContext.oversubscribed`): a 4-worker loader that waits on I/O got a sweep of 2, 4
    and 8, and 2 workers, slower than the script, took 7 of its 10 s."""
    proposal = v["num_workers"]
    cap = max(2, min(MAX_WORKERS, ctx.cpu_count * (IO_WORKERS_PER_CORE if ctx.io_like else 1)))
    values = set(WORKER_LADDER)
    if ctx.one_thread and not ctx.io_like and ctx.cpu_count <= ONE_THREAD_EXTRA_UP_TO:
        cap = ctx.cpu_count + 1
        values.add(cap)
    values = {w for w in values if w <= cap} | {proposal}
    own = ctx.script_workers
    if own is not None:
        more = proposal > own
        fewer_too = ctx.oversubscribed()
        values = {w for w in values if w != own and (w > own if more else w < own) or (w < own and fewer_too)}
        values.add(proposal)
    ordered = sorted(values, key=lambda w: (w != proposal, abs(w - proposal), w))
    return [{**v, "num_workers": w} for w in ordered]


def sweep_reason(point: dict, proposal: dict, ctx: SweepContext) -> str:
    """Why a sweep tries `point` for the rule's `proposal`, in a few words."""
    if point == proposal:
        return "the rule's proposal"
    w, p = (point.get("dataloader") or {}).get("num_workers"), (proposal.get("dataloader") or {}).get("num_workers")
    own = ctx.script_workers
    if w is None or p is None:
        return "a value of the fix's ladder"
    if own is not None and w < own:
        return (f"fewer than the script's {own}: its {own} workers and {ctx.threads or 1} threads oversubscribe "
                f"{ctx.cpu_count} cores")
    if ctx.one_thread and w == ctx.cpu_count + 1:
        return f"every core and one more: the step computes on one thread ({ctx.cpu_count} cores)"
    side = "beyond" if (w > p) == (p > (own or 0)) else "short of"
    return f"{side} the proposal's {p}" + (f", on its side of the script's {own}" if own is not None else "")


def _dataloader_said(v: dict) -> str:
    workers = v.get("num_workers")
    if workers is None:
        text = "Pin the DataLoader's batches in memory" if v.get("pin_memory") else "Load batches"
    else:
        text = f"Load batches in {workers} worker process{'es' if workers > 1 else ''}" if workers else \
            "Load batches in the training process"
        text += " into pinned memory" if v.get("pin_memory") else ""
    return text + (f", {v['prefetch_factor']} batches ahead per worker" if "prefetch_factor" in v else "")


def _autocast_snippet(v: str) -> str:
    lines = [f"+ with torch.autocast(device_type=inputs.device.type, dtype=torch.{v}):",  # cpu or cuda alike
             "      loss = loss_fn(model(inputs), targets)"]
    if v == "float16":
        lines = ['+ scaler = torch.amp.GradScaler("cuda")', *lines,
                 "- loss.backward(); optimizer.step()", "+ scaler.scale(loss).backward()",
                 "+ scaler.step(optimizer); scaler.update()"]
    return "\n".join(lines)


def _optimizer_snippet(v: dict) -> str:
    flags = ", ".join(f"{k}=True" for k, on in v.items() if on)
    return (f"- optimizer = torch.optim.Adam(params, lr=lr)  # your optimizer: Adam, AdamW, SGD, ...\n"
            f"+ optimizer = torch.optim.Adam(params, lr=lr, {flags})")


def _batch_scale_valid(v: object) -> bool:
    return (type(v) is int and v >= 2) or v in MICRO_BATCH_CUTS


def _batch_scale_snippet(v: float) -> str:
    if v in MICRO_BATCH_CUTS:
        k = round(1 / v)
        return (f"- DataLoader(dataset, batch_size=B)\n+ DataLoader(dataset, batch_size=B // {k})\n"
                f"+ loss = loss_fn(model(x), y) / {k}   # accumulate {k} micro-batches: the same effective batch\n"
                f"  loss.backward()\n+ if (i + 1) % {k} == 0:\n      optimizer.step(); optimizer.zero_grad(set_to_none=True)")
    return f"- DataLoader(dataset, batch_size=B)\n+ DataLoader(dataset, batch_size=B * {v})  # re-tune the learning rate"


def _batch_scale_said(v: float) -> str:
    if v in MICRO_BATCH_CUTS:
        k = round(1 / v)
        return f"Cut the micro-batch to 1/{k} and accumulate gradients over {k} micro-batches"
    return f"Use {v}x larger batches (and re-tune the learning rate)"


def _checkpoint_snippet(v: object) -> str:
    return ("+ from torch.utils.checkpoint import checkpoint\n"
            "- for block in self.blocks:\n-     x = block(x)\n"
            "+ for block in self.blocks:\n+     x = checkpoint(block, x, use_reentrant=False)\n"
            "# a Hugging Face model: model.gradient_checkpointing_enable()")


COMPILE_WARMUP = 3  # more untimed steps for a compiled model's window (a guard on the grad mode, a new shape: recompiles)
# torch.compile's modes besides the default (`True`): CUDA graphs replay a whole step's launches;
# max-autotune's GEMM search without them
REDUCE_OVERHEAD, MAX_AUTOTUNE = "reduce-overhead", "max-autotune-no-cudagraphs"
COMPILE_MODES = (REDUCE_OVERHEAD, MAX_AUTOTUNE)


def _compile_snippet(v: bool | str) -> str:
    return "+ model = torch.compile(model)" if v is True else f'+ model = torch.compile(model, mode="{v}")'


def compile_ladder(gpu: bool) -> list[dict]:
    """The compile override sets one fix of a host-bound step measures as one sweep: the default
    mode first, then on a GPU CUDA graphs (reduce-overhead: one replay per step instead of a launch
    per kernel) and max-autotune without them. On a CPU the default alone: there are no CUDA graphs,
    and max-autotune has no matmul to search in a training step (Inductor's CPU GEMM templates need
    frozen weights): it benchmarked nothing and compiled as long as the default (a two-layer GPT's
    first step on 2 cores, two runs each: 31.0 and 30.8 s of CPU time, against 30.5 and 34.6 s), so
    its arm would cost a compile to measure the same kernels again."""
    return [{"compile": True}] + ([{"compile": mode} for mode in COMPILE_MODES] if gpu else [])


def _present(key: str) -> Callable[[object, dict], bool]:
    return lambda v, applied: applied.get(key) not in (None, False, [])


VOCABULARY: dict[str, Knob] = {k.key: k for k in (
    Knob("dataloader", "DataLoader keyword arguments forced onto every DataLoader(...)",
         _dataloader_valid, _dataloader_snippet, _dataloader_said, _dataloader_effect, "dataloader",
         ladder=lambda v, ctx: _workers_ladder(v, ctx) if "num_workers" in v else [v],
         # workers take the loading off the loop: at most its wait goes (fewer workers free cores for compute)
         part=lambda v: "data_wait_s" if v.get("num_workers") else None),
    Knob("batch_size_scale", "every DataLoader's batch_size multiplied (below 1: a smaller micro-batch)",
         _batch_scale_valid, _batch_scale_snippet, _batch_scale_said,
         _present("batch_size_scale"), "dataloader", ladder=lambda v, ctx: [v] if v in MICRO_BATCH_CUTS else list(BATCH_LADDER),
         batch_scale=float),
    Knob("activation_checkpointing", "activations recomputed in backward: a Hugging Face model's "
         "gradient_checkpointing_enable(), else each block of the model's largest ModuleList/Sequential "
         "of repeated blocks under torch.utils.checkpoint (use_reentrant=False)",
         lambda v: v is True, _checkpoint_snippet, lambda v: "Checkpoint activations (use_reentrant=False)",
         _present("activation_checkpointing"), "checkpointing"),
    Knob("autocast", "forward and loss under torch.autocast (fp16 with a GradScaler)",
         lambda v: v in AUTOCAST_DTYPES, _autocast_snippet,
         lambda v: "Run the forward pass under " + ("bf16 autocast" if v == "bfloat16" else "fp16 autocast with a GradScaler"),
         lambda v, applied: applied.get("autocast") == v, "module"),
    Knob("float32_matmul_precision", "torch.set_float32_matmul_precision (TF32 / bf16 tensor cores for float32)",
         lambda v: v in ("high", "medium"), lambda v: f'+ torch.set_float32_matmul_precision("{v}")',
         lambda v: f"Run float32 matmuls on the tensor cores ({'TF32' if v == 'high' else 'bf16'})",
         _present("float32_matmul_precision"), "backend"),
    Knob("cudnn_benchmark", "torch.backends.cudnn.benchmark on",
         lambda v: v is True, lambda v: "+ torch.backends.cudnn.benchmark = True", lambda v: "Enable cudnn.benchmark",
         _present("cudnn_benchmark"), "backend"),
    Knob("optimizer", "fused= / foreach= forced onto every torch.optim optimizer that has it",
         lambda v: v in ({"fused": True}, {"foreach": True}), _optimizer_snippet,
         lambda v: f"Build the optimizer with {next(iter(v))}=True",
         lambda v, applied: any(o.get(k) for o in applied.get("optimizers") or [] for k in v), "optimizer",
         part=lambda v: "optimizer_s"),
    Knob("compile", "each top-level module call goes through torch.compile (true: its default mode; or the "
         f"mode: {', '.join(COMPILE_MODES)})",
         lambda v: v is True or v in COMPILE_MODES, _compile_snippet,
         lambda v: "Compile the model with torch.compile" + ("" if v is True else f' (mode="{v}")'),
         lambda v, applied: applied.get("compile") == v, "module",
         warmup=lambda v: COMPILE_WARMUP if v else 0, one_off=True),
    Knob("channels_last", "conv models and their 4-D inputs in channels_last memory format",
         lambda v: v is True,
         lambda v: "+ model = model.to(memory_format=torch.channels_last)\n"
                   "+ images = images.to(memory_format=torch.channels_last)",
         lambda v: "Use the channels_last memory format for the model and its inputs", _present("channels_last"), "module"),
    Knob("torch_threads", "torch.set_num_threads (intra-op threads)",
         lambda v: type(v) is int and v >= 1, lambda v: f"+ torch.set_num_threads({v})",
         lambda v: f"Run {v} intra-op thread{'s' if v > 1 else ''}", _present("torch_threads"), "backend"),
    Knob("expandable_segments", "the CUDA caching allocator grows segments in place "
         "(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True), so freed blocks of odd sizes are reused",
         lambda v: v is True, lambda v: "+ PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python train.py ...",
         lambda v: "Let the CUDA allocator expand its segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)",
         _present("expandable_segments"), "allocator",
         fresh_only="the CUDA allocator reads PYTORCH_CUDA_ALLOC_CONF once, before its first allocation"),
    Knob("zero_grad_set_to_none", "Optimizer.zero_grad / Module.zero_grad called with set_to_none=False get set_to_none=True",
         lambda v: v is True,
         lambda v: "- optimizer.zero_grad(set_to_none=False)\n+ optimizer.zero_grad()  # set_to_none=True, the default",
         lambda v: "Call zero_grad with set_to_none=True",
         _present("zero_grad_set_to_none"), "zero_grad"),
)}
KEYS = tuple(VOCABULARY)


def _knobs(overrides: dict | None) -> list[tuple[Knob, Any]]:
    """(the knob, its value) of each key of `overrides` the vocabulary has: the traits are read from these."""
    return [(VOCABULARY[key], value) for key, value in (overrides or {}).items() if key in VOCABULARY]


def batch_scale(overrides: dict) -> float:
    """Samples per step under `overrides`, relative to the script's (1: the batch is the script's)."""
    return float(math.prod(knob.batch_scale(value) for knob, value in _knobs(overrides) if knob.batch_scale is not None))


def cost(overrides: dict) -> tuple[int, float]:
    """What a sweep value costs beside another of the same fix, for a tie between them: the worker
    processes it starts, then the samples per step it holds in memory (fewer and smaller are cheaper)."""
    workers = (overrides.get("dataloader") or {}).get("num_workers") or 0
    return workers, batch_scale(overrides)


def changes_batch(overrides: dict) -> bool:
    """Whether `overrides` set the batch (any knob with a batch trait, even at 1)."""
    return any(knob.batch_scale is not None for knob, _ in _knobs(overrides))


def extra_warmup(overrides: dict) -> int:
    """The untimed steps a window needs beyond the usual under `overrides` (a compiled model's recompiles)."""
    return sum(knob.warmup(value) for knob, value in _knobs(overrides))


def fresh_only(overrides: dict) -> str | None:
    """Why `overrides` cannot be switched in a running script (None: they can): a fresh run measures them."""
    return next((knob.fresh_only for knob, _ in _knobs(overrides) if knob.fresh_only), None)


def one_off(overrides: dict) -> bool:
    """Whether `overrides` pay a one-off cost when switched on (compilation), said with its payoff."""
    return any(knob.one_off for knob, _ in _knobs(overrides))


def parts(overrides: dict) -> tuple[str, ...] | None:
    """The step columns these overrides can at most remove (their Amdahl bound), or None where one
    of them may speed up anything (a precision, compile, a batch size)."""
    found = [VOCABULARY[k].part(v) if k in VOCABULARY else None for k, v in overrides.items()]
    named = [part for part in found if part is not None]
    return tuple(sorted(set(named))) if found and len(named) == len(found) else None


def problem(overrides: dict) -> str | None:
    """Why `overrides` is not something advise can inject, or None when every key and value is valid."""
    if not isinstance(overrides, dict):
        return "overrides must be a table of key = value"
    for key, value in overrides.items():
        knob = VOCABULARY.get(key)
        if knob is None:
            return f"override {key!r} is not one advise knows ({', '.join(KEYS)})"
        if not knob.valid(value):
            return f"override {key}={value!r} is not a valid value"
    return None


def validate(overrides: dict) -> None:
    """Raise OverrideError for an unknown key or value: a typo must not silently measure nothing."""
    reason = problem(overrides)
    if reason:
        raise OverrideError(reason)


def describe(overrides: dict) -> str:
    """`num_workers=8, persistent_workers=True, torch_threads=1`: an override in one line."""
    parts = []
    for key, value in (overrides or {}).items():
        items = value.items() if isinstance(value, dict) else [(key, value)]
        parts += [f"{k}={v}" for k, v in items]
    return ", ".join(parts)


def said(overrides: dict) -> str:
    """`Load batches in 8 worker processes and run 1 intra-op thread`: a fix's title for overrides
    that were measured, so it names the value measured and no other (the rule's guess is its own title)."""
    words = [VOCABULARY[key].said(value) for key, value in (overrides or {}).items() if key in VOCABULARY]
    words = words[:1] + [w[:1].lower() + w[1:] for w in words[1:]]
    return " and ".join([", ".join(words[:-1]), words[-1]] if len(words) > 2 else words)


def not_applied(overrides: dict, applied: dict) -> list[str]:
    """The keys of `overrides` that the child reported no effect for (its probe.json `applied`)."""
    return [key for key, value in (overrides or {}).items()
            if key in VOCABULARY and not VOCABULARY[key].took_effect(value, applied or {})]


def _said(loader: object, name: str) -> object:
    """A field of a DataLoader's description: the account's (advisor.run_dir.seen.LoaderSeen), or the child's dict."""
    return loader.get(name) if isinstance(loader, dict) else getattr(loader, name, None)


def unmirrorable(loader: object) -> str | None:
    """Why a substitute loader cannot take over this DataLoader's stream at a step boundary, from
    the probe's description of it (probe.hooks.loader_kind, or the account's LoaderSeen); None: it can."""
    if _said(loader, "iterable"):
        return "an IterableDataset cannot be re-fed from the original sampler"
    if _said(loader, "batched") is False:
        return "a DataLoader without batching (batch_size=None) is not mirrored"
    return None


def live_loader_refusal(overrides: dict, loader: object) -> str | None:
    """Why this fix cannot be switched on in the running script for this DataLoader, so that a fresh
    run of the script must measure it; None: it can (or it is not a loader fix). The child refuses
    the switch for this reason; the parent, knowing it from the window, plans no arm for it."""
    if "dataloader" not in overrides and "batch_size_scale" not in overrides:
        return None
    start = _said(loader, "worker_start")
    if (overrides.get("dataloader") or {}).get("num_workers") and start not in (None, "fork"):
        # Each worker is a new interpreter importing torch (seconds on a small machine): a window's
        # warm-up ends before they all serve, and the arm reads ~1x (mp.spawn ranks read 1.19x for
        # a fix fresh runs measure 4.95x). Fresh runs start the loader whole.
        return unmirrorable(loader) or f"its DataLoader workers start by {start} (a new interpreter each)"
    return unmirrorable(loader)


def merge(*items: dict) -> dict:
    """Deep-merge overrides: dataloader tables combine, other keys take the last value."""
    out: dict = {}
    for item in items:
        for key, value in item.items():
            out[key] = {**out.get(key, {}), **value} if isinstance(value, dict) else value
    return out


def sweep(overrides: dict, ctx: SweepContext) -> list[dict]:
    """The override sets to try for `overrides`: one per ladder value of its swept key, else itself."""
    ctx = replace(ctx, one_thread=overrides.get("torch_threads") == 1)
    for key, value in overrides.items():
        knob = VOCABULARY.get(key)
        if knob is not None and knob.ladder is not None:
            points = knob.ladder(value, ctx)
            if points != [value]:
                return [{**overrides, key: point} for point in points]
    return [overrides]
