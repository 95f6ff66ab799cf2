"""One switch per group of override keys, shared by both ways a fix is measured.

A switch turns its knobs on and off in a live process at a step boundary (an in-process arm,
:mod:`advisor.probe.arms`), and a fresh run is the same switch turned on before the script starts
(``live=False``, :func:`advisor.probe.overrides.apply`): there the switch acts where the script
makes the choice (a DataLoader or an optimizer built with the keyword, the code change the user
will make). Which switch carries a key is the vocabulary's (``Knob.switch`` in
:mod:`advisor.overrides`); a switch that cannot do something in a live process raises
:class:`NotSwitchable` with the reason, and that key is measured in a fresh run.

- ``backend``: matmul precision, cudnn.benchmark, intra-op threads (held against the script's own
  ``torch.set_num_threads`` while on);
- ``optimizer``: fused / foreach;
- ``zero_grad``: ``zero_grad(set_to_none=False)`` calls get ``set_to_none=True``;
- ``checkpointing``: a Hugging Face model's gradient checkpointing, else the repeated blocks;
- ``module``: autocast, compile, channels_last at top-level module calls (float16 needs a
  GradScaler around the script's own backward/step: only from the start); in a Lightning job,
  autocast is the Trainer's own precision plugin (:mod:`advisor.probe.trainer_precision`);
- ``dataloader``: DataLoader keywords and the batch size;
- ``allocator``: the CUDA allocator's settings (only before its first allocation: a fresh run).

Each is a module of this package; this one names them (:data:`SWITCH_TYPES`) and hands each key
to its switch (:class:`Switches`).
"""

from __future__ import annotations

from typing import Callable

from advisor.overrides import VOCABULARY, validate
from .allocator import AllocatorSwitch
from .backend import BackendSwitch, tf32_blocked
from ..hooks import Observed
from .base import NotSwitchable, Switch
from .dataloader import DataLoaderSwitch
from .module import Checkpointing, ModuleSwitch
from .optimizer import OptimizerSwitch
from .zero_grad import ZeroGradSwitch

__all__ = ["NotSwitchable", "SWITCH_TYPES", "Switch", "Switches", "tf32_blocked"]


# Each switch by the name the vocabulary's knobs give (Knob.switch), built from the run's switches
# so far, and switched on in this order (off in reverse). A new kind of knob is one entry here.
SWITCH_TYPES: dict[str, Callable[["Switches"], Switch]] = {
    "backend": lambda run: BackendSwitch(),
    "optimizer": lambda run: OptimizerSwitch(),
    "zero_grad": lambda run: ZeroGradSwitch(),
    "module": lambda run: ModuleSwitch(run.observed),
    "checkpointing": lambda run: Checkpointing(run.module),
    "dataloader": lambda run: DataLoaderSwitch(run.observed),
    "allocator": lambda run: AllocatorSwitch(),
}


class Switches:
    """The run's switches, one of each; ``on`` hands each key to the switch the vocabulary names.
    The ones the arms reach into (the model's calls, the loaders, the optimizers) are typed
    properties."""

    observed: Observed | None  # the run's (SWITCH_TYPES, above, reads it before __init__ is checked)

    def __init__(self, observed: Observed | None = None) -> None:
        self.observed = observed
        self.by_name: dict[str, Switch] = {}
        for name, make in SWITCH_TYPES.items():
            self.by_name[name] = make(self)

    @property
    def module(self) -> ModuleSwitch:
        return self.by_name["module"]  # type: ignore[return-value]  # by_name holds that name's switch (SWITCH_TYPES)

    @property
    def dataloader(self) -> DataLoaderSwitch:
        return self.by_name["dataloader"]  # type: ignore[return-value]  # by_name holds that name's switch (SWITCH_TYPES)

    @property
    def optimizer(self) -> OptimizerSwitch:
        return self.by_name["optimizer"]  # type: ignore[return-value]  # by_name holds that name's switch (SWITCH_TYPES)

    @staticmethod
    def groups(overrides: dict) -> dict[str, dict]:
        """The overrides split by the switch that carries each key."""
        out: dict[str, dict] = {}
        for key, value in overrides.items():
            out.setdefault(VOCABULARY[key].switch, {})[key] = value
        return out

    def install(self, overrides: dict | None = None) -> None:
        """Install the switches `overrides` needs (all of them when None): before the hooks, whose
        DataLoader timing must wrap the substitute loaders."""
        needed = set(self.groups(overrides)) if overrides is not None else set(self.by_name)
        for name, switch in self.by_name.items():
            if name in needed:
                switch.install()

    def on(self, overrides: dict, applied: dict, *, live: bool = True) -> dict[str, str]:
        """Switch every key on; returns {key: why not} for those that could not be (live only)."""
        validate(overrides)
        groups, refused = self.groups(overrides), {}
        for name, switch in self.by_name.items():
            part = groups.get(name)
            if not part:
                continue
            try:
                switch.on(part, applied, live=live)
            except NotSwitchable as exc:
                refused.update({key: str(exc) for key in part})
        return refused

    def off(self) -> None:
        for switch in reversed(list(self.by_name.values())):
            switch.off()
