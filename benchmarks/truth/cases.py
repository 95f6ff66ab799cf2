"""The cases: public training scripts at pinned commits, and by-hand versions of advise's fixes.

Each case says where the script comes from (repo, commit, the paths to fetch), how to make its
data, how to run it small on a CPU, how to read its own per-iteration timing (a regex with an
`ms` group, optional `loss`), and for each fix advise can make there, the text patch (or extra
arguments) that makes it by hand, with the advise override it stands for.

Patches are exact anchor-string replacements: an anchor that is not found exactly once fails
the case loudly. Three kinds:
  fixups          needed to run at all on this torch/CPU: applied everywhere, advise's run included
  timing_patches  a timing print, applied to every by-hand run, baseline included (never to advise's)
  Variant.patches the fix itself
Variant.args are appended to the case's argv (the scripts' parsers let the last value win).

A case whose source could not be fetched at a pinned commit is a script of our own under
scripts/ (repo `local`, its "commit" a digest of the files): hf-trainer-clm, because the
transformers repo is too big to mirror here and its run_clm.py needs `datasets`. A repo too big to
mirror whose files can be pinned one by one (git blob ids, `Case.blobs`) is fetched without git
(fetch.py): vision-classification.

Left out (no case): pytorch/examples regression/main.py (a 4-weight linear fit, ~0.1 ms a step,
stops by itself after a few hundred; no timing); distributed/minGPT-ddp (exits without two
GPUs, needs hydra); distributed/ddp-tutorial-series (GPU device 0, a Linear(20, 1));
gcn, gat (download Cora); mnist*, vae, dcgan, siamese_network, imagenet, super_resolution,
fast_neural_style (torchvision); language_translation, legacy/snli (torchtext, spacy).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

NANOGPT = ("karpathy/nanoGPT", "3adf61e154c3fe3fca428ad6bc3818b27a3b8291")
MINGPT = ("karpathy/minGPT", "37baab71b9abea1b76ab957409a1cc2fbfba8a26")
EXAMPLES = ("pytorch/examples", "77f55b912142e11fcfdf5b530231fb9c52f181e8")
LIGHTNING = ("Lightning-AI/pytorch-lightning", "7f0c3436cd3f6ad3753125672024fc415cbcb414")

LOCAL = "local"  # a script of our own under scripts/, not fetched
SCRIPTS = Path(__file__).resolve().parent / "scripts"


def local(*paths: str) -> tuple[str, str]:
    """(repo, commit) for scripts under scripts/: the commit is a digest of their text, so a change
    to a script marks its cached by-hand results stale as a new commit would."""
    h = hashlib.sha1()
    for path in paths:
        h.update(path.encode() + b"\0" + (SCRIPTS / path).read_bytes())
    return LOCAL, h.hexdigest()


@dataclass(frozen=True)
class Patch:
    file: str  # relative to the case dir
    old: str
    new: str


@dataclass(frozen=True)
class Copy:
    src: str   # relative to --datasets
    dest: str  # relative to the case dir


@dataclass(frozen=True)
class Ours:
    """A file of ours under scripts/ copied into the case dir (a fetched case's data-prep script, then
    Run); `sha1`, of its text, puts an edit to it into the case's digest."""
    src: str   # relative to scripts/
    dest: str  # relative to the case dir
    sha1: str = ""

    def __post_init__(self):
        object.__setattr__(self, "sha1", hashlib.sha1((SCRIPTS / self.src).read_bytes()).hexdigest()[:12])


@dataclass(frozen=True)
class Run:
    script: str  # a data-prep script, run in its own folder
    stub_modules: tuple[str, ...] = ()  # imported but unused here (nanoGPT's prepare.py imports requests for a download it skips)


@dataclass(frozen=True)
class Variant:
    name: str
    overrides: dict  # the advise override this by-hand fix stands for
    patches: tuple[Patch, ...] = ()
    args: tuple[str, ...] = ()
    batch_scale: float = 1.0  # samples per timed unit, relative to the baseline
    numerics: bool = False    # changes the loss: the final losses are shown


@dataclass(frozen=True)
class Case:
    name: str
    repo: str
    commit: str
    paths: tuple[str, ...]
    cwd: str                  # the run's folder, relative to the case dir
    script: str               # relative to cwd
    argv: tuple[str, ...]
    timing: str               # regex over the script's output lines: `ms` (per unit), optional `loss`
    warmup: int               # timing lines dropped (warm-up, compile)
    samples: int              # timing lines kept; then the run is stopped
    variants: tuple[Variant, ...]
    unit: str = "step"
    blobs: tuple[tuple[str, ...], ...] = ()  # (path, git blob id[, its own commit]): fetched without git (fetch.py)
    prep: tuple = ()          # Copy / Ours / Patch / Run, in order
    fixups: tuple[Patch, ...] = ()
    timing_patches: tuple[Patch, ...] = ()
    pythonpath: tuple[str, ...] = ()  # relative to the case dir
    pip: tuple[str, ...] = ()         # extra packages (pinned, with their deps listed), pip --target --no-deps
    advise_args: tuple[str, ...] = ()
    timeout_s: float = 300.0
    per_run: str = "median"   # a run's figure from its lines: "mean" where a loader's workers deliver in bursts
    not_applicable: dict = field(default_factory=dict)  # fix -> why no by-hand variant
    notes: str = ""

    def variant(self, name: str) -> Variant | None:
        return next((v for v in self.variants if v.name == name), None)

    def digest(self, variant: Variant | None = None) -> str:
        """Changes when anything that shapes the case's runs (or this variant's) changes: the
        working copies are rebuilt and cached by-hand results are marked stale."""
        shape = {k: v for k, v in asdict(self).items()
                 if k in RUN_SHAPING and not (k == "per_run" and v == "median") and not (k == "blobs" and not v)}
        if variant is not None:
            shape["variant"] = [asdict(p) for p in variant.patches], variant.args
        return hashlib.sha1(json.dumps(shape, sort_keys=True).encode()).hexdigest()[:12]


RUN_SHAPING = ("repo", "commit", "paths", "cwd", "script", "argv", "timing", "warmup", "prep", "fixups",
               "timing_patches", "pythonpath", "pip", "per_run", "blobs")


# ----------------------------------------------------------------------------- variant makers

def bf16(file: str, block: str) -> Variant:
    """`block` (whole lines: the forward and the loss) under CPU bf16 autocast."""
    indent = block[:len(block) - len(block.lstrip(" "))]
    body = "".join(indent + "    " + line[len(indent):] if line.strip() else line for line in block.splitlines(True))
    new = f"\n{indent}with torch.autocast('cpu', dtype=torch.bfloat16):\n{body}"
    return Variant("bf16", {"autocast": "bfloat16"}, (Patch(file, "\n" + block, new),), numerics=True)


def threads(file: str, n: int) -> Variant:
    return Variant(f"threads-{n}", {"torch_threads": n},
                   (Patch(file, "\nimport torch\n", f"\nimport torch\ntorch.set_num_threads({n})\n"),))


def patched(name: str, overrides: dict, file: str, old: str, new: str, numerics: bool = False) -> Variant:
    return Variant(name, overrides, (Patch(file, old, new),), numerics=numerics)


COMPILE = {"compile": True}
FUSED = {"optimizer": {"fused": True}}


def workers(n: int, arg: str) -> Variant:
    return Variant(f"workers-{n}", {"dataloader": {"num_workers": n}}, args=(f"{arg}={n}",))


def batch_x2(arg: str, batch: int) -> Variant:
    return Variant("batch-x2", {"batch_size_scale": 2}, args=(f"{arg}={2 * batch}",), batch_scale=2.0, numerics=True)


# ----------------------------------------------------------------------------- nanoGPT

NANOGPT_TIMING = r"^iter (?P<step>\d+): loss (?P<loss>[^,\s]+), time (?P<ms>[\d.]+)ms"
NANOGPT_VARIANTS = (
    patched("bf16", {"autocast": "bfloat16"}, "train.py",
            "ctx = nullcontext() if device_type == 'cpu' else torch.amp.autocast(device_type=device_type, dtype=ptdtype)",
            "ctx = torch.amp.autocast(device_type='cpu', dtype=torch.bfloat16)", numerics=True),
    Variant("compile", COMPILE, args=("--compile=True",)),  # nanoGPT's own switch: torch.compile(model)
    patched("fused", FUSED, "model.py", "use_fused = fused_available and device_type == 'cuda'",
            "use_fused = fused_available"),
    threads("train.py", 1),
    threads("train.py", 2),
)


def nanogpt(name: str, argv: tuple[str, ...], warmup: int, samples: int, notes: str, device: str = "cpu",
            variants: tuple = NANOGPT_VARIANTS, **more) -> Case:
    """nanoGPT's train.py on the shakespeare_char config; `argv` after the common flags (the last wins)."""
    return Case(
        name, *NANOGPT,
        paths=("train.py", "model.py", "configurator.py", "config/train_shakespeare_char.py",
               "data/shakespeare_char/prepare.py"),
        cwd=".", script="train.py",
        argv=("config/train_shakespeare_char.py", f"--device={device}", "--compile=False", "--log_interval=1",
              "--max_iters=2000", "--lr_decay_iters=2000", "--dropout=0.0", *argv),
        timing=NANOGPT_TIMING, warmup=warmup, samples=samples, variants=variants,
        prep=(Copy("tinyshakespeare/input.txt", "data/shakespeare_char/input.txt"),
              Run("data/shakespeare_char/prepare.py", stub_modules=("requests",))),
        not_applicable={"batch-x2": "batches come from get_batch(), not a DataLoader",
                        "workers": "no DataLoader", "zero-grad": "already zero_grad(set_to_none=True)"},
        notes=notes, **more)


# ----------------------------------------------------------------------------- minGPT

MINGPT_TIMING = r"^iter_dt (?P<ms>[\d.]+)ms; iter (?P<step>\d+): train loss (?P<loss>\S+)"


def mingpt(name: str, project: str, argv: tuple[str, ...], batch: int, warmup: int, samples: int,
           notes: str, prep: tuple = ()) -> Case:
    script = f"projects/{project}/{project}.py"
    return Case(
        name, *MINGPT,
        paths=("mingpt", script), cwd=".", script=script,
        argv=(*argv, f"--trainer.batch_size={batch}"),
        timing=MINGPT_TIMING, warmup=warmup, samples=samples,
        variants=(
            bf16("mingpt/trainer.py", "            logits, self.loss = model(x, y)\n"),
            patched("compile", COMPILE, script, "trainer = Trainer(config.trainer, model, train_dataset)",
                    "trainer = Trainer(config.trainer, torch.compile(model), train_dataset)"),
            patched("fused", FUSED, "mingpt/model.py", "betas=train_config.betas)",
                    "betas=train_config.betas, fused=True)"),
            threads(script, 1),
            threads(script, 2),
            workers(0, "--trainer.num_workers"),  # the Trainer's default is num_workers=4
            workers(2, "--trainer.num_workers"),
            batch_x2("--trainer.batch_size", batch),
        ),
        prep=prep,
        # the script prints iter_dt every 10 iterations; every iteration here (by-hand runs only)
        timing_patches=(Patch(script, "if trainer.iter_num % 10 == 0:", "if trainer.iter_num % 1 == 0:"),),
        pythonpath=(".",),  # `from mingpt.model import GPT` (the README has you pip install -e .)
        not_applicable={"zero-grad": "already model.zero_grad(set_to_none=True)",
                        "pin-memory": "pin_memory=True is ignored without an accelerator"},
        notes=notes)


# ----------------------------------------------------------------------------- pytorch/examples

WLM_FORWARD = ("        if args.model == 'Transformer':\n"
               "            output = model(data)\n"
               "            output = output.view(-1, ntokens)\n"
               "        else:\n"
               "            hidden = repackage_hidden(hidden)\n"
               "            output, hidden = model(data, hidden)\n"
               "        loss = criterion(output, targets)\n")


def word_lm(name: str, argv: tuple[str, ...], notes: str) -> Case:
    f = "word_language_model/main.py"
    return Case(
        name, *EXAMPLES,
        paths=("word_language_model/main.py", "word_language_model/model.py", "word_language_model/data.py"),
        cwd="word_language_model", script="main.py",
        argv=("--epochs", "1", "--log-interval", "3", *argv),
        # one line per 3 batches: the mean ms/batch over them
        timing=r"\|\s*(?P<step>\d+)/\s*\d+ batches \| lr \S+ \| ms/batch\s+(?P<ms>[\d.]+) \| loss\s+(?P<loss>\S+)",
        warmup=2, samples=10, unit="batch",
        variants=(
            bf16(f, WLM_FORWARD),
            patched("compile", COMPILE, f, "criterion = nn.NLLLoss()\n", "criterion = nn.NLLLoss()\nmodel = torch.compile(model)\n"),
            threads(f, 1),
            threads(f, 2),
        ),
        prep=(Copy("wikitext-2-partial/valid.txt", "word_language_model/data/wikitext-2/train.txt"),
              Copy("wikitext-2-partial/valid.txt", "word_language_model/data/wikitext-2/valid.txt"),
              Copy("wikitext-2-partial/test.txt", "word_language_model/data/wikitext-2/test.txt")),
        advise_args=("--warmup", "3", "--steps", "20"),
        not_applicable={"fused": "no optimizer: a manual SGD update (AdamW only with --use-optimizer)",
                        "batch-x2": "batches come from batchify(), not a DataLoader", "workers": "no DataLoader",
                        "zero-grad": "model.zero_grad() already sets None"},
        notes=notes)


TSP = "time_sequence_prediction/train.py"
RL = "reinforcement_learning/reinforce.py"
MPL = ("matplotlib==3.11.2", "contourpy==1.3.3", "cycler==0.12.1", "fonttools==4.68.0", "kiwisolver==1.5.1",
       "pyparsing==3.3.3", "python-dateutil==4.0.0", "pillow==13.0.0")
GYM = ("gymnasium==1.4.0", "farama-notifications==0.0.6", "cloudpickle==3.1.2")

CASES: tuple[Case, ...] = (
    nanogpt("nanogpt-char",
            ("--eval_iters=20", "--block_size=64", "--batch_size=12", "--n_layer=4", "--n_head=4", "--n_embd=128"),
            warmup=5, samples=25, notes="train.py + config/train_shakespeare_char.py, the README's CPU recipe"),
    nanogpt("nanogpt-big",
            ("--eval_iters=5", "--block_size=128", "--batch_size=12", "--n_layer=6", "--n_head=8", "--n_embd=256"),
            warmup=4, samples=12, notes="the same train.py, a 6x256 model, block 128"),
    mingpt("mingpt-chargpt", "chargpt",
           ("--model.model_type=gpt-micro", "--data.block_size=64", "--trainer.max_iters=1000"), batch=16,
           warmup=4, samples=25, prep=(Copy("tinyshakespeare/input.txt", "input.txt"),),
           notes="projects/chargpt on tinyshakespeare, gpt-micro (4x128), block 64"),
    mingpt("mingpt-adder", "adder", ("--data.ndigit=3", "--trainer.max_iters=2000"), batch=64,
           warmup=5, samples=40,
           notes="projects/adder, gpt-nano; ndigit=3 so the iteration-0 evaluation reads 5 batches, not all 9,500"),
    word_lm("wlm-lstm", (), notes="word_language_model/main.py, 2-layer LSTM 200/200, valid.txt as train.txt"),
    word_lm("wlm-transformer", ("--model", "Transformer"),
            notes="word_language_model/main.py --model Transformer (2 layers, 200, 2 heads)"),
    Case(
        "tsp-lbfgs", *EXAMPLES,
        paths=("time_sequence_prediction/train.py", "time_sequence_prediction/generate_sine_wave.py"),
        cwd="time_sequence_prediction", script="train.py", argv=("--steps", "12"),
        timing=r"^truth-step-ms (?P<ms>[\d.]+)", warmup=1, samples=5,
        variants=(bf16(TSP, "            out = seq(input)\n            loss = criterion(out, target)\n"), threads(TSP, 1),
                  threads(TSP, 2)),
        prep=(Patch("time_sequence_prediction/generate_sine_wave.py", "L = 1000", "L = 100"),
              Run("time_sequence_prediction/generate_sine_wave.py")),
        # torch>=2.6 loads weights_only by default, which refuses the numpy array the data script saved
        fixups=(Patch(TSP, "torch.load('traindata.pt')", "torch.load('traindata.pt', weights_only=False)"),),
        timing_patches=(Patch(TSP, "        optimizer.step(closure)\n",
                              "        _t0 = __import__('time').perf_counter()\n"
                              "        optimizer.step(closure)\n"
                              "        print('truth-step-ms %.3f' % ((__import__('time').perf_counter() - _t0) * 1e3))\n"),),
        pip=MPL, timeout_s=400,
        # 5 profiled steps of 20 closures each took the probed script to 17 GiB here: one is enough
        advise_args=("--warmup", "1", "--steps", "6", "--profile-steps", "1"),
        not_applicable={"compile": "not measured: the test prediction after each step unrolls 1,100 LSTMCell steps "
                                   "under torch.compile (minutes of compiling)",
                        "fused": "LBFGS has no fused/foreach", "batch-x2": "full-batch LBFGS, no DataLoader"},
        notes="LBFGS with a closure (20 evaluations a step), float64; sine data at L=100 instead of 1000 "
              "(the data script patched: 1000 makes a step ~20 s here)"),
    Case(
        "rl-reinforce", *EXAMPLES,
        paths=("reinforcement_learning/reinforce.py",), cwd="reinforcement_learning", script="reinforce.py", argv=(),
        timing=r"^truth-episode (?P<step>\d+) ms/env-step (?P<ms>[\d.]+)", warmup=5, samples=60, unit="env step",
        variants=(bf16(RL, "    probs = policy(state)\n"),
                  patched("compile", COMPILE, RL, "policy = Policy()\n", "policy = torch.compile(Policy())\n"),
                  patched("fused", FUSED, RL, "optim.Adam(policy.parameters(), lr=1e-2)",
                          "optim.Adam(policy.parameters(), lr=1e-2, fused=True)"),
                  threads(RL, 1), threads(RL, 2)),
        timing_patches=(Patch(RL, "        state, _ = env.reset()\n",
                              "        _t0 = __import__('time').perf_counter()\n        state, _ = env.reset()\n"),
                        Patch(RL, "        finish_episode()\n",
                              "        finish_episode()\n        print('truth-episode %d ms/env-step %.4f' % "
                              "(i_episode, (__import__('time').perf_counter() - _t0) * 1e3 / t))\n")),
        pip=GYM, advise_args=("--warmup", "5", "--steps", "30"),
        not_applicable={"batch-x2": "one episode a step, no DataLoader"},
        notes="REINFORCE on CartPole-v1 (gymnasium); one optimizer step an episode, timed per env step "
              "(episodes grow as it learns)"),
)


# chargpt with its DataLoader loading in the training process (--trainer.num_workers=0): the workers fix
# from a 0-worker baseline (mingpt-chargpt's baseline is the Trainer's default, 4 workers)
CHARGPT = next(c for c in CASES if c.name == "mingpt-chargpt")
CASES = CASES + (replace(
    CHARGPT, name="mingpt-chargpt-w0", argv=(*CHARGPT.argv, "--trainer.num_workers=0"),
    variants=(workers(2, "--trainer.num_workers"), workers(4, "--trainer.num_workers")),
    not_applicable={**CHARGPT.not_applicable,
                    "bf16, compile, fused, threads, batch-x2": "measured on mingpt-chargpt (the same script)"},
    notes="projects/chargpt as mingpt-chargpt, its DataLoader with num_workers=0 (loading in the training process)"),)


# ----------------------------------------------------------------------------- frameworks (issue 38)
# Jobs that never write the loop: the fix is the framework's own setting, and advise must say it so.

AUTOCAST = {"autocast": "bfloat16"}
HF_TRAINER_TIMING = r"step (?P<step>\d+): loss (?P<loss>[^,\s]+), time (?P<ms>[\d.]+) ms"
# the line the by-hand timers below print, one per training iteration
TRUTH_STEP = r"truth-step (?P<step>\d+) ms (?P<ms>[\d.]+) loss (?P<loss>\S+)"
LIT = "examples/pytorch/basics/transformer.py"
# Lightning's example prints a progress bar (a running it/s), no per-iteration time: a callback,
# by-hand runs only, prints the wall time from one training batch's end to the next's (within an
# epoch) and that batch's loss.
LIT_TIMER = ("class _TruthTimer(L.Callback):\n"
             "    def on_train_epoch_start(self, trainer, pl_module):\n"
             "        self.t = None\n\n"
             "    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):\n"
             "        now = __import__('time').perf_counter()\n"
             "        if self.t is not None:\n"
             "            print('truth-step %d ms %.3f loss %.4f' % (batch_idx, (now - self.t) * 1e3, float(outputs['loss'])), flush=True)\n"
             "        self.t = now\n\n\n"
             "def main():\n")

FAB = "examples/fabric/language_model/train.py"
# Fabric's example prints every 200 batches: by-hand runs print each iteration's wall time (from one
# optimizer step's end to the next, within an epoch) and its loss.
FAB_TIMER = (Patch(FAB, "    for batch_idx, batch in enumerate(train_dataloader):\n",
                   "    _t = None\n    for batch_idx, batch in enumerate(train_dataloader):\n"),
             Patch(FAB, "        optimizer.zero_grad()\n",
                   "        optimizer.zero_grad()\n"
                   "        _now = __import__('time').perf_counter()\n"
                   "        if _t is not None:\n"
                   "            print('truth-step %d ms %.3f loss %.4f' % (batch_idx, (_now - _t) * 1e3, float(loss)), flush=True)\n"
                   "        _t = _now\n"))

FRAMEWORK_CASES: tuple[Case, ...] = (
    Case(
        "hf-trainer-clm", *local("hf_clm.py"),
        paths=("hf_clm.py",), cwd=".", script="hf_clm.py",
        argv=("--train_file", "data/train.txt", "--output_dir", "out", "--max_steps", "2000",
              "--per_device_train_batch_size", "8", "--logging_steps", "1", "--save_strategy", "no",
              "--report_to", "none", "--use_cpu"),  # bf16 on a GPU-less machine wants use_cpu
        timing=HF_TRAINER_TIMING, warmup=5, samples=25,
        variants=(Variant("bf16", AUTOCAST, args=("--bf16",), numerics=True),),  # TrainingArguments(bf16=True)
        prep=(Copy("wikitext-2-partial/valid.txt", "data/train.txt"),),
        not_applicable={"compile": "not claimed here", "workers": "not claimed here"},
        notes="scripts/hf_clm.py (ours: run_clm.py's shape without `datasets`): a 4x256 GPT-2 from its config, "
              "word vocabulary capped at 8192, block 128, batch 8, the Trainer's defaults otherwise"),
    Case(
        "lightning-transformer", *LIGHTNING,
        paths=(LIT,), cwd="examples/pytorch/basics", script="transformer.py", argv=(),
        timing=TRUTH_STEP, warmup=5, samples=30,
        # the Trainer's own precision setting, in the script's L.Trainer(...) call
        variants=(patched("bf16", AUTOCAST, LIT, "gradient_clip_val=0.25,",
                          'gradient_clip_val=0.25, precision="bf16-mixed",', numerics=True),),
        # WikiText2() reads data/wikitext-2.txt and downloads it only when missing
        prep=(Copy("wikitext-2-partial/valid.txt", "examples/pytorch/basics/data/wikitext-2.txt"),),
        timing_patches=(Patch(LIT, "def main():\n", LIT_TIMER),
                        Patch(LIT, "max_epochs=20)", "max_epochs=20, callbacks=[_TruthTimer()])")),
        not_applicable={"compile": "not claimed here", "workers": "not claimed here"},
        notes="examples/pytorch/basics/transformer.py: lightning.pytorch.demos Transformer (2+2 layers, 200) on "
              "WikiText2 (valid.txt as the demo's train.txt), batch 20, SGD, gradient_clip_val=0.25"),
    Case(
        "fabric-language-model", *LIGHTNING,
        paths=(FAB,), cwd="examples/fabric/language_model", script="train.py", argv=(),
        timing=TRUTH_STEP, warmup=5, samples=30,
        # Fabric's own precision setting, in the script's L.Fabric() call
        variants=(patched("bf16", AUTOCAST, FAB, "fabric = L.Fabric()", 'fabric = L.Fabric(precision="bf16-mixed")',
                          numerics=True),),
        prep=(Copy("wikitext-2-partial/valid.txt", "examples/fabric/language_model/data/wikitext-2.txt"),),
        timing_patches=FAB_TIMER,
        not_applicable={"compile": "not claimed here", "workers": "not claimed here"},
        notes="examples/fabric/language_model/train.py: the same demo Transformer and data as lightning-transformer, "
              "its loop written with Fabric (fabric.setup, fabric.backward), batch 20, SGD, clip 0.25"),
)

CASES = CASES + FRAMEWORK_CASES


# ----------------------------------------------------------------------------- a starved loader (issue 54)
# On 2 cores a loader's best worker count is not its largest: the claim and the value picked must
# hold from one run to the next (benchmarks/reproducibility.py).

def loader_one_thread(n: int, fused: bool = False, bf16_too: bool = False) -> Variant:
    """n workers, 1 intra-op thread (and AdamW fused, and the forward under bf16 autocast: the
    compute's fixes advise stacks on the loading fix)."""
    overrides = {"dataloader": {"num_workers": n, "persistent_workers": True}, "torch_threads": 1,
                 **(FUSED if fused else {}), **(AUTOCAST if bf16_too else {})}
    patches = [Patch("loader_starved.py", "\nimport torch\n", "\nimport torch\ntorch.set_num_threads(1)\n")]
    if fused:
        patches.append(Patch("loader_starved.py", "lr=1e-3)", "lr=1e-3, fused=True)"))
    if bf16_too:
        patches += bf16("loader_starved.py", "    loss = torch.nn.functional.mse_loss(model(x), y)\n").patches
    name = f"workers-{n}-threads-1" + ("-fused" if fused else "") + ("-bf16" if bf16_too else "")
    return Variant(name, overrides, tuple(patches), args=(f"--workers={n}",), numerics=bf16_too)


LOADER_STARVED = Case(
    "loader-starved", *local("loader_starved.py"), paths=("loader_starved.py",), cwd=".", script="loader_starved.py",
    argv=(), timing=r"^iter (?P<step>\d+): loss (?P<loss>[^,\s]+), time (?P<ms>[\d.]+)ms", warmup=20, samples=150,
    # the mean step, as loader-io-workers: batches from several workers arrive in bursts, and the median of
    # a bursty loop's steps is its compute (3 workers with the fused step and bf16: 3.02x median, 2.03x mean)
    per_run="mean",
    # On 2 cores advise's loader fix runs the training loop on 1 intra-op thread beside the workers
    # (the rule's plan): each worker count is measured with it, as advise measures it.
    variants=(*(loader_one_thread(n) for n in (1, 2, 3, 4, 8)),
              patched("fused", FUSED, "loader_starved.py", "lr=1e-3)", "lr=1e-3, fused=True)"),
              loader_one_thread(2, fused=True), loader_one_thread(3, fused=True),
              loader_one_thread(2, fused=True, bf16_too=True), loader_one_thread(3, fused=True, bf16_too=True)),
    not_applicable={"compile, batch-x2": "the loader's workers are the question here",
                    "bf16 alone": "measured only with the loading fix (the loop waits on loading)"},
    notes="a 0-worker DataLoader, 1 ms of decoding per sample, feeding an FP32 MLP with AdamW")
CASES = CASES + (LOADER_STARVED,)


# ----------------------------------------------------------------------------- shapes tuned on none (issue 65)
# Scripts of shapes no constant was fitted to: a loader that already has workers, waiting on I/O or
# computing; an overhead-bound small model. Each worker count is its own flag (the script's argparse).

ITER_TIMING = r"^iter (?P<step>\d+): loss (?P<loss>[^,\s]+), time (?P<ms>[\d.]+)ms"


def workers(n: int) -> Variant:
    return Variant(f"workers-{n}", {"dataloader": {"num_workers": n, "persistent_workers": True}}, args=(f"--workers={n}",))


LOADER_IO_WORKERS = Case(
    "loader-io-workers", *local("loader_io_workers.py"), paths=("loader_io_workers.py",), cwd=".",
    script="loader_io_workers.py", argv=(), timing=ITER_TIMING, warmup=30, samples=200, per_run="mean",
    variants=(workers(8), workers(6), workers(2)),
    not_applicable={"bf16, compile, fused, batch-x2": "the loader's workers are the question here"},
    notes="a DataLoader with 4 workers, 2 ms of I/O wait per sample, batch 32, a small MLP with SGD")
LOADER_CPU_WORKERS = Case(
    "loader-cpu-workers", *local("loader_cpu_workers.py"), paths=("loader_cpu_workers.py",), cwd=".",
    script="loader_cpu_workers.py", argv=(), timing=ITER_TIMING, warmup=30, samples=150, per_run="mean",
    variants=(workers(1), workers(3), workers(4),
              patched("fused", FUSED, "loader_cpu_workers.py", "lr=1e-3)", "lr=1e-3, fused=True)"),
              # DL003's fix where 2 workers and 2 intra-op threads share 2 cores
              Variant("workers-1-threads-1", {"torch_threads": 1, "dataloader": {"num_workers": 1}},
                      threads("loader_cpu_workers.py", 1).patches, args=("--workers=1",)),
              # EXP001's screen: recommended (1.41x verified) in 1 of 5 quiet runs, 2026-12-02
              replace(patched("batch-x2", {"batch_size_scale": 2}, "loader_cpu_workers.py", "batch_size=32",
                              "batch_size=64", numerics=True), batch_scale=2.0)),
    not_applicable={"bf16, compile": "the loader's workers are the question here"},
    notes="a DataLoader with 2 workers, 0.5 ms of CPU decoding per sample, batch 32, an FP32 MLP with AdamW")
TINY_GPT = Case(
    "tiny-gpt", *local("tiny_gpt.py"), paths=("tiny_gpt.py",), cwd=".", script="tiny_gpt.py", argv=(),
    timing=ITER_TIMING, warmup=40, samples=200,
    variants=(patched("fused", FUSED, "tiny_gpt.py", "lr=3e-4)", "lr=3e-4, fused=True)"),
              patched("compile", COMPILE, "tiny_gpt.py", "    model = TinyGPT()\n",
                      "    model = torch.compile(TinyGPT())\n"),
              Variant("compile+fused", {**COMPILE, **FUSED},
                      (Patch("tiny_gpt.py", "lr=3e-4)", "lr=3e-4, fused=True)"),
                       Patch("tiny_gpt.py", "    model = TinyGPT()\n", "    model = torch.compile(TinyGPT())\n")))),
    not_applicable={"bf16": "no GEMM is large enough to pay (width 64)", "workers": "no DataLoader"},
    notes="a 2-layer GPT, width 64, context 32, batch 8, random tokens, the default AdamW (foreach)")
CASES = CASES + (LOADER_IO_WORKERS, LOADER_CPU_WORKERS, TINY_GPT)


# A conv net in pytorch/examples mnist/main.py's shape, and an LM trained in an Accelerate loop: the
# fix said in the script's own flag (--mixed_precision), the framework's word.

MNIST = "conv_mnist.py"
MNIST_STEP = ("        output = model(data)\n"
              "        loss = F.nll_loss(output, target)\n")
CONV_MNIST = Case(
    "conv-mnist", *local(MNIST), paths=(MNIST,), cwd=".", script=MNIST, argv=("--epochs", "1"),
    timing=ITER_TIMING, warmup=20, samples=150,
    variants=(bf16(MNIST, MNIST_STEP), batch_x2("--batch-size", 64),
              replace(bf16(MNIST, MNIST_STEP), name="bf16+batch-x2", overrides={**AUTOCAST, "batch_size_scale": 2},
                      args=("--batch-size=128",), batch_scale=2.0),
              Variant("channels-last", {"channels_last": True},
                      (Patch(MNIST, "    model = Net().to(device)\n",
                             "    model = Net().to(device).to(memory_format=torch.channels_last)\n"),
                       Patch(MNIST, "        data, target = data.to(device), target.to(device)\n        optimizer",
                             "        data, target = data.to(device).to(memory_format=torch.channels_last), "
                             "target.to(device)\n        optimizer"))),
              patched("compile", COMPILE, MNIST, "    model = Net().to(device)\n",
                      "    model = torch.compile(Net().to(device))\n"),
              threads(MNIST, 1),
              patched("workers-1", {"dataloader": {"num_workers": 1}}, MNIST,
                      '{"batch_size": args.batch_size, "shuffle": True}',
                      '{"batch_size": args.batch_size, "shuffle": True, "num_workers": 1}')),
    not_applicable={"fused": "Adadelta: a foreach step, no fused one on the CPU"},
    notes="mnist/main.py's Net (2 convs, 2 linears), Adadelta, batch 64, 0-worker loader, synthetic MNIST-shaped data")
ACC = "hf_accelerate_clm.py"
HF_ACCELERATE_CLM = Case(
    "hf-accelerate-clm", *local(ACC, "hf_clm.py"), paths=(ACC, "hf_clm.py"), cwd=".", script=ACC,
    argv=("--train_file", "data/train.txt", "--cpu"),
    timing=r"step (?P<step>\d+): loss (?P<loss>[^,\s]+), time (?P<ms>[\d.]+) ms", warmup=5, samples=25,
    variants=(Variant("bf16", AUTOCAST, args=("--mixed_precision", "bf16"), numerics=True),),
    prep=(Copy("wikitext-2-partial/valid.txt", "data/train.txt"),),
    not_applicable={"compile": "not claimed here", "workers": "not claimed here"},
    notes="scripts/hf_accelerate_clm.py (run_clm_no_trainer.py's loop): hf_clm.py's 4x256 GPT-2, batch 8, "
          "AdamW, a linear schedule, Accelerator(cpu=True, mixed_precision=...)")
# nanoGPT evaluating and saving inside the measured window (issue 66's phases): estimate_loss every
# 10 iterations (model.eval(), 5 batches each of train and val under no_grad, model.train()) and a
# checkpoint after each. Its own per-iteration time holds the evaluation on those iterations; the
# median (the case's figure) is a training iteration's.
NANOGPT_CHAR = next(c for c in CASES if c.name == "nanogpt-char")
NANOGPT_EVAL = replace(
    NANOGPT_CHAR, name="nanogpt-char-eval", argv=(*NANOGPT_CHAR.argv, "--eval_interval=10", "--eval_iters=5"),
    variants=tuple(v for v in NANOGPT_CHAR.variants if v.name in ("bf16", "fused")),
    not_applicable={**NANOGPT_CHAR.not_applicable, "compile, threads": "measured on nanogpt-char (the same script)"},
    notes="nanogpt-char evaluating (5 batches each of train and val) and saving a checkpoint every 10 iterations")
CASES = CASES + (CONV_MNIST, HF_ACCELERATE_CLM, NANOGPT_EVAL)
BY_NAME = {c.name: c for c in CASES}


# ----------------------------------------------------------------------------- torchvision's classification reference
# pytorch/vision references/classification/train.py, the script people copy for ImageNet: an
# ImageFolder decoded and augmented by the DataLoader's workers (-j, default 16), evaluation and a
# checkpoint (utils.save_on_master) after every epoch. Here mobilenet_v3_small at 128px on a small
# synthetic ImageFolder (scripts/make_imagefolder.py): 20 training steps an epoch, so advise's window
# (5 + 20 steps) holds an epoch's end; a 12 MB checkpoint (resnet18's, 90 MB twice an epoch, filled
# the disk of a harness run's working copies). Needs torchvision: run the harness from a venv that
# has it.
#
# The repo is too big to mirror (1.4 GB): its files are pinned by blob id, each at a commit where
# the file index this was built from holds it (train.py and utils.py at 96c85bed; presets.py,
# transforms.py and sampler.py at the commits named: no commit there holds all five). That those
# three are what 96c85bed has is not known, only that train.py runs with them.
VISION = ("pytorch/vision", "96c85bed8babbc42bd8233d11ad9e9d89a64ae20")
VISION_DIR = "references/classification"
VT = f"{VISION_DIR}/train.py"
VISION_BLOBS = (
    (VT, "995c608ac9f98334a284d8b4f81e3e307717baf4"),
    (f"{VISION_DIR}/utils.py", "3e6c2e89e39341d0d15aac17948c1f284f5d8353"),
    (f"{VISION_DIR}/presets.py", "5d1bf1cc71455fcb043538fecbad54050671d015", "080836e5824eded4f6249bf88b5fd4a51e446a04"),
    (f"{VISION_DIR}/transforms.py", "9a8ef7877d6d5525aead106695d495b7a05cb009", "02a0a90b7ad1e9d69f1f392ad6701eb069f7db02"),
    (f"{VISION_DIR}/sampler.py", "e9dc1735a585cd2b46c50d7cf9389767f081a4dd", "775e76043cb82dec48ea07c7f96917f66413017f"),
)
VISION_STEP = ("        with torch.cuda.amp.autocast(enabled=scaler is not None):\n"
               "            output = model(image)\n"
               "            loss = criterion(output, target)\n")


def vision_workers(n: int) -> Variant:
    return Variant(f"workers-{n}", {"dataloader": {"num_workers": n}}, args=("-j", str(n)))


# DL001's fix keeps the workers between epochs (persistent_workers, no flag for it: both loaders
# patched); DL003's on a CPU gives the workers a core (1 intra-op thread, 1 worker on 2 cores)
VISION_PERSISTENT = (Patch(VT, "        collate_fn=collate_fn,\n    )\n",
                           "        collate_fn=collate_fn,\n        persistent_workers=True,\n    )\n"),
                     Patch(VT, "num_workers=args.workers, pin_memory=True\n    )\n",
                           "num_workers=args.workers, pin_memory=True, persistent_workers=True\n    )\n"))


VISION_CLS = Case(
    "vision-classification", *VISION, paths=tuple(b[0] for b in VISION_BLOBS), blobs=VISION_BLOBS,
    cwd=VISION_DIR, script="train.py",
    argv=("--data-path", "data", "--device", "cpu", "--model", "mobilenet_v3_small", "-b", "16", "--epochs", "12",
          "--train-crop-size", "128", "--val-resize-size", "146", "--val-crop-size", "128", "--print-freq", "1",
          "--output-dir", "out"),
    # MetricLogger's `time:` is a 20-step moving average: by-hand runs print each training step's own
    # time (log_every's: from the last step's end, the wait for the batch included) and its loss.
    # Kept: ten whole epochs after the first, by their mean: an epoch's first step holds the 16
    # workers' restart (~1 s here, the others ~70 ms), a cost of the workers as real as the rest; and
    # once a process, at one epoch's start, a spike of 1.5-2 s (the new workers decoding the epoch
    # beside the step): two epochs a run weighed it five times what ten do (benchmarks/README.md).
    timing=TRUTH_STEP, warmup=20, samples=200, per_run="mean", timeout_s=400,
    variants=(vision_workers(2), vision_workers(4),
              Variant("workers-2-persistent", {"dataloader": {"num_workers": 2, "persistent_workers": True}},
                      VISION_PERSISTENT, args=("-j", "2")),
              Variant("workers-1-threads-1", {"torch_threads": 1, "dataloader": {"num_workers": 1}},
                      threads(VT, 1).patches, args=("-j", "1")),
              bf16(VT, VISION_STEP),
              Variant("channels-last", {"channels_last": True},
                      (Patch(VT, "    model.to(device)\n",
                             "    model.to(device)\n    model = model.to(memory_format=torch.channels_last)\n"),
                       Patch(VT, "        image, target = image.to(device), target.to(device)\n",
                             "        image, target = image.to(device, memory_format=torch.channels_last), target.to(device)\n"))),
              patched("fused", FUSED, VT, '            nesterov="nesterov" in opt_name,\n',
                      '            nesterov="nesterov" in opt_name,\n            fused=True,\n'),
              threads(VT, 1)),
    prep=(Ours("make_imagefolder.py", f"{VISION_DIR}/data/make_imagefolder.py"), Run(f"{VISION_DIR}/data/make_imagefolder.py")),
    timing_patches=(Patch(f"{VISION_DIR}/utils.py", "            iter_time.update(time.time() - end)\n",
                          "            iter_time.update(time.time() - end)\n"
                          "            if header.startswith(\"Epoch\"):\n"
                          "                print(\"truth-step %d ms %.3f loss %.4f\" % (i, iter_time.value * 1e3, "
                          "self.meters[\"loss\"].value), flush=True)\n"),),
    not_applicable={"compile": "not measured: a cold compile per run on 2 cores, and again for evaluation "
                               "under inference_mode",
                    "batch-x2": "-b 32 halves the 20-step epoch: its per-epoch loader restart would weigh twice"},
    notes="references/classification/train.py (96c85bed, 2022): mobilenet_v3_small at 128px, batch 16, SGD, its "
          "default -j 16 loader workers (on 2 cores), evaluation and a checkpoint every 20 steps; 320+64 synthetic "
          "160px JPEGs in 8 classes")
CASES = CASES + (VISION_CLS,)
BY_NAME = {c.name: c for c in CASES}
