"""The GPU cases: the same public scripts on a CUDA device, and by-hand versions of the GPU fixes.

Sized for one call to a lent GPU machine (about 8 minutes with `--repeats 2`, see README.md's
"On a GPU"): each case's data is made here (``bundle.sh``), the scripts run there unmodified
but for their own flags. Every by-hand run times the script's own per-iteration line, which on
these scripts ends with a device sync (nanoGPT reads ``loss.item()`` every logged iteration, with
``--log_interval=1`` every one; imagenet every batch), so a line is the device's step.

- nanogpt-fp32: nanoGPT shakespeare_char at its config (6x384, block 256, batch 64) in float32,
  as it ships: its own ``allow_tf32 = True`` and fused AdamW on CUDA. Fixes by hand: bf16 (its
  own ``--dtype=bfloat16``), compile (``--compile=True``, a cold compile per run: the longest).
- nanogpt-strict-fp32: the same with TF32 off and the fused optimizer off (fixups), as a plain
  FP32 loop runs: TF32 by hand (``set_float32_matmul_precision('high')``), bf16, fused AdamW.
  The H200 found TF32 3x and bf16 3-4.7x by hand on such a loop; in-process arms read 1.04x and
  0.76x before steps were timed on the device's clock.
- imagenet-dummy: pytorch/examples imagenet ``--dummy -a resnet18 -b 64`` at its default
  ``-j 4``: FakeData makes each 224x224 image on the CPU, and four workers starve the GPU (data
  wait 68% on the H200). Fixes by hand: ``-j 8``, ``-j 12``.
- imagenet-fed: the same at ``-j 16``: fed, and far under the device's memory (MEM001's
  headroom). The batch ladder by hand: ``-b 128``, ``-b 256`` (per sample).
- nanogpt-compile-modes: nanogpt-fp32 (launch-bound: GPU001) with each compile mode by hand
  (``--compile=True`` and the mode written into its ``torch.compile`` call). A cold compile per
  run: this case is a call of its own (``--only nanogpt-compile-modes``).
"""

from __future__ import annotations

from cases import EXAMPLES, COMPILE, FUSED, Case, Patch, Variant, nanogpt, patched

BF16_FLAG = Variant("bf16", {"autocast": "bfloat16"}, args=("--dtype=bfloat16",), numerics=True)
TF32_OFF = (Patch("train.py", "torch.backends.cuda.matmul.allow_tf32 = True", "torch.backends.cuda.matmul.allow_tf32 = False"),
            Patch("train.py", "torch.backends.cudnn.allow_tf32 = True", "torch.backends.cudnn.allow_tf32 = False"))
TF32_BY_HAND = patched("tf32", {"float32_matmul_precision": "high"}, "train.py",
                       "torch.backends.cuda.matmul.allow_tf32 = False", "torch.set_float32_matmul_precision('high')")
FUSED_OFF = Patch("model.py", "use_fused = fused_available and device_type == 'cuda'", "use_fused = False")


def nanogpt_gpu(name: str, fixups: tuple, variants: tuple, notes: str) -> Case:
    return nanogpt(name, ("--dtype=float32", "--eval_iters=10", "--max_iters=5000", "--lr_decay_iters=5000"),
                   warmup=10, samples=40, notes=notes, device="cuda", variants=variants, fixups=fixups,
                   timeout_s=240, advise_args=("--timeout", "240"))


IMAGENET = "imagenet/main.py"
IMAGENET_TIMING = (Patch(IMAGENET, "        batch_time.update(time.time() - end)\n        end = time.time()\n",
                         "        batch_time.update(time.time() - end)\n"
                         "        print('truth-batch-ms %.3f' % (batch_time.val * 1e3), flush=True)\n"
                         "        end = time.time()\n"),)
IMAGENET_NOT = {"bf16": "the script has no mixed-precision switch to make it by hand with",
                "compile": "not measured here: a cold compile of resnet18 per run is out of the call's budget"}


def imagenet(name: str, workers: int, variants: tuple, notes: str) -> Case:
    return Case(
        name, *EXAMPLES, paths=(IMAGENET,), cwd="imagenet", script="main.py",
        argv=("--dummy", "-a", "resnet18", "-b", "64", "-j", str(workers), "--epochs", "1", "--print-freq", "1000000"),
        timing=r"^truth-batch-ms (?P<ms>[\d.]+)", warmup=20, samples=60, unit="batch", variants=variants,
        timing_patches=IMAGENET_TIMING, timeout_s=240, advise_args=("--timeout", "240"), not_applicable=IMAGENET_NOT,
        notes=notes)


def compile_mode(mode: str) -> Variant:
    """nanoGPT compiled in `mode` by hand: its own --compile=True, the mode written into its call."""
    return Variant(f"compile-{mode}", {"compile": mode}, args=("--compile=True",),
                   patches=(Patch("train.py", "model = torch.compile(model)", f"model = torch.compile(model, mode='{mode}')"),))

OWN_CALL = ("imagenet-fed", "nanogpt-compile-modes")  # run only when named (--only): each fills a call of its own

GPU_CASES: tuple[Case, ...] = (
    nanogpt_gpu("nanogpt-fp32", (), (BF16_FLAG, Variant("compile", COMPILE, args=("--compile=True",))),
                notes="nanoGPT as shipped at --dtype=float32: TF32 and fused AdamW already on"),
    nanogpt_gpu("nanogpt-strict-fp32", (*TF32_OFF, FUSED_OFF),
                (TF32_BY_HAND, BF16_FLAG,
                 Variant("tf32+bf16", {"autocast": "bfloat16", "float32_matmul_precision": "high"},
                         patches=TF32_BY_HAND.patches, args=BF16_FLAG.args, numerics=True),
                 patched("fused", FUSED, "model.py", "use_fused = False", "use_fused = fused_available")),
                notes="TF32 and the fused optimizer switched off (fixups): a plain FP32 loop"),
    imagenet("imagenet-dummy", 4, (Variant("workers-8", {"dataloader": {"num_workers": 8}}, args=("-j", "8")),
                                    Variant("workers-12", {"dataloader": {"num_workers": 12}}, args=("-j", "12"))),
             notes="FakeData ToTensor images made by 4 workers (its default -j 4) for resnet18 at batch 64"),
    imagenet("imagenet-fed", 16, (Variant("batch-x2", {"batch_size_scale": 2}, args=("-b", "128"), batch_scale=2.0, numerics=True),
                                  Variant("batch-x4", {"batch_size_scale": 4}, args=("-b", "256"), batch_scale=4.0, numerics=True)),
             notes="16 workers feed resnet18 at batch 64 with most of the device's memory free: the batch ladder"),
    nanogpt_gpu("nanogpt-compile-modes", (), (Variant("compile", COMPILE, args=("--compile=True",)),
                                              compile_mode("reduce-overhead"), compile_mode("max-autotune-no-cudagraphs")),
                notes="nanoGPT as shipped at --dtype=float32, launch-bound: each compile mode by hand"),
)
