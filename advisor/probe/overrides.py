"""A fresh run's overrides: every switch the overrides need, turned on before the user's script runs.

An override is plain data (``{"dataloader": {"num_workers": 4}}``, ``{"autocast": "bfloat16"}``,
...) so rules can propose it, experiments can combine and sweep it, and the report can show the
code change that makes it permanent. A fresh run is the in-process arms' switch on from step 0
(:mod:`advisor.probe.switches`): each acts where the script makes the choice, so the script itself
is never edited. The keys and their valid values are the vocabulary in :mod:`advisor.overrides`;
``applied`` records what really took effect, so the experiments can report an override that did
nothing as "not applied" instead of "no significant change".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from advisor.overrides import validate
from .switches import Switches

if TYPE_CHECKING:
    from .hooks import Observed


def apply(overrides: dict, applied: dict, observed: Observed | None = None) -> Switches | None:
    """Install and switch on every override (None when there is none); `applied` collects what
    actually happened, for probe.json."""
    validate(overrides)
    if not overrides:
        return None
    switches = Switches(observed)
    switches.install(overrides)
    switches.on(overrides, applied, live=False)
    return switches
