"""## What it does
Flags evaluation passes, checkpoints and loader shutdowns that take a large share of the loop's
wall time. advise times them as phases of their own, apart from the
training steps (docs/explanation/steps.md): an evaluation is a pass over a DataLoader that does not
feed backward, or the span between `model.eval()` and `model.train()`; a checkpoint is a
`torch.save` call; a shutdown is a training loader's workers joined when its epoch runs out
(without `persistent_workers`, every epoch forks them anew and joins them again). The
finding gives each phase's share of the measured window's wall time, how often it ran and how
long one run of it took.

## Why is this bad?
While the loop evaluates or saves it does not train: an evaluation that takes 40% of the wall
time makes an hour of training take 1.7 hours. Evaluation is worth what it tells you, and it
tells you little more at every 10 steps than at every 200; the same loss read on 20 batches is
usually as informative as on the whole validation set. A checkpoint written synchronously stalls
the loop for the whole write, where an asynchronous save overlaps it with the next steps. A
loader that shuts its workers down at every epoch's end joins each process and forks it again at
the next epoch's start: with short epochs and many workers that is a share of the run.

## Example
```python
for step, batch in enumerate(train_loader):
    train_step(batch)
    if step % 10 == 0:
        evaluate(model, val_loader)         # the whole validation set, every 10 steps
        torch.save(model.state_dict(), path)
```

Use instead:
```python
for step, batch in enumerate(train_loader):
    train_step(batch)
    if step % 200 == 0:
        evaluate(model, itertools.islice(val_loader, 20))  # less often, on fewer batches
    if step % 1000 == 0:
        torch.distributed.checkpoint.async_save(model.state_dict(), checkpoint_id=path)
```

## Fix safety
Manual: these fixes change what the script does (how often it reports the validation loss, how
much progress a crash loses), so advise says them and measures nothing. Where the script has its
own flags for them (nanoGPT's `--eval_interval` and `--eval_iters`, a Trainer's `eval_steps` and
`save_steps`), set those. Keeping a loader's workers (`persistent_workers=True`) does not change
what the script computes, but the DataLoader rules measure it where the loader is the bottleneck;
here it is said, not measured.

## Options
- `min-share` (default 0.1): the smallest share of the wall time a phase must take to be flagged.
"""

from __future__ import annotations

from typing import Iterator

from advisor.analysis import steptime
from advisor.profile import Profile

from . import helpers as h
from .registry import Finding, Fix, rule

SNIPPETS = {
    "evaluation": ("- if step % eval_every == 0:\n-     evaluate(model, val_loader)\n"
                   "+ if step % (4 * eval_every) == 0:  # less often\n"
                   "+     evaluate(model, itertools.islice(val_loader, eval_batches))  # on fewer batches"),
    "checkpoint": ("- torch.save(model.state_dict(), path)\n"
                   "+ import torch.distributed.checkpoint as dcp\n"
                   "+ dcp.async_save(model.state_dict(), checkpoint_id=path)  # or save less often"),
    "loader shutdown": ("- DataLoader(dataset, batch_size=batch_size, num_workers=workers)\n"
                        "+ DataLoader(dataset, batch_size=batch_size, num_workers=workers,\n"
                        "+            persistent_workers=True)  # kept between epochs"),
}
NOUNS = {"evaluation": ("evaluation pass", "evaluation passes"), "checkpoint": ("checkpoint save", "checkpoint saves"),
         "loader shutdown": ("shutdown of the loader's workers", "shutdowns of the loader's workers")}
FIX_TITLES = {"evaluation": "Evaluate less often, or on fewer batches",
              "checkpoint": "Save checkpoints asynchronously (torch.distributed.checkpoint.async_save), or less often",
              "loader shutdown": "Keep the DataLoader's workers between epochs (persistent_workers=True)"}


@rule(code="LOOP001", name="costly-loop-phases")
def check(profile: Profile, *, min_share: float = 0.1) -> Iterator[Finding]:
    for phase in steptime.loop_phases(profile.steps):
        share = phase["share"]
        if share < min_share:
            continue
        name, count = phase["name"], phase["count"]
        each = phase["seconds"] / count
        often = f"every {phase['every_steps']:.0f} steps" if phase["steps"] > 1 else f"once in {len(profile.steps)} measured steps"
        yield Finding(
            title=f"{name.capitalize()} takes {share:.0%} of the wall time ({often})",
            summary=(f"{count} {NOUNS[name][count > 1]} in the measured window, {each:.3g} s each, while the loop did not train; "
                     f"{FIX_TITLES[name][0].lower() + FIX_TITLES[name][1:]}."),
            severity="high" if share >= 0.3 else "medium",
            evidence={"phase": name, "share": h.r3(share), "count": count, "every_steps": h.r3(phase["every_steps"]),
                      "seconds_each": h.r3(each)},
            estimated_gain_frac=h.r3(share / 2),  # the phase run half as often
            fix=Fix.manual(FIX_TITLES[name], SNIPPETS[name]),
        )
