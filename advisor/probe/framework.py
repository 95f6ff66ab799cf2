"""Which framework runs the training step, the settings it already has, and the user's line that
configures it: so a fix is given in the words of the user's framework (``bf16=True`` in
``TrainingArguments``, ``precision="bf16-mixed"`` in ``L.Trainer``), not as a loop they do not have.

Read once, at the first optimizer step, from the call stack around it: the framework's own frames
(``transformers/trainer.py``, Lightning's loops, Fabric's and Accelerate's optimizer wrappers) and
the objects they hold. Nothing here runs again after that step, and nothing syncs the device.
"""

from __future__ import annotations

import ast
import os
import sys
from types import FrameType
from typing import Any

from advisor.framework.config_line import call_name
from advisor.framework.words import ACCELERATE, FABRIC, HF_TRAINER, LIGHTNING

# TrainingArguments fields a fix reads or writes
HF_SETTINGS = ("bf16", "fp16", "tf32", "dataloader_num_workers", "dataloader_persistent_workers", "dataloader_pin_memory",
               "torch_compile", "optim", "gradient_checkpointing", "per_device_train_batch_size",
               "gradient_accumulation_steps")
# the user's call that configures each framework (its name as written, last part of a dotted name)
CONFIG_CALL = {HF_TRAINER: "TrainingArguments", LIGHTNING: "Trainer", FABRIC: "Fabric", ACCELERATE: "Accelerator"}
_FRAMEWORK_DIRS = (f"{os.sep}transformers{os.sep}", f"{os.sep}lightning{os.sep}", f"{os.sep}pytorch_lightning{os.sep}",
                   f"{os.sep}lightning_fabric{os.sep}", f"{os.sep}accelerate{os.sep}", f"{os.sep}torch{os.sep}",
                   f"{os.sep}advisor{os.sep}", f"{os.sep}site-packages{os.sep}", f"{os.sep}dist-packages{os.sep}")


def detect(frame: FrameType | None = None) -> tuple[dict, Any] | None:
    """``{"name", "settings", "configured_at"}`` (and ``"command_line": True`` where the script's
    ``HfArgumentParser`` builds the TrainingArguments from its flags) of the framework around this optimizer step, and the
    live object whose precision an autocast arm switches (a Lightning Trainer; else None), or None
    for a loop of the user's own."""
    frames = []
    f: FrameType | None = frame or sys._getframe(1)
    while f is not None:
        frames.append(f)
        f = f.f_back
    found = _hf(frames) or _lightning(frames) or _fabric(frames) or _accelerate(frames)
    if found is None:
        return None
    name, settings, *owner = found
    info: dict[str, Any] = {"name": name, "settings": settings, "configured_at": configured_at(frames, CONFIG_CALL[name])}
    if name == HF_TRAINER and info["configured_at"] is None:  # run_clm.py's way: the flags are the arguments
        parser = configured_at(frames, "HfArgumentParser")
        if parser is not None:
            info.update(configured_at=parser, command_line=True)
    return info, (owner[0] if owner else None)


def _self_of(frames: list[FrameType], path_part: str, type_name: str) -> Any:
    for f in frames:
        if path_part in f.f_code.co_filename.replace("/", os.sep):
            obj = f.f_locals.get("self")
            if obj is not None and any(c.__name__ == type_name for c in type(obj).__mro__):
                return obj
    return None


def _hf(frames: list[FrameType]) -> tuple[str, dict] | None:
    trainer = _self_of(frames, f"{os.sep}transformers{os.sep}", "Trainer")
    if trainer is None or getattr(trainer, "args", None) is None:
        return None
    args = trainer.args
    settings = {k: _plain(getattr(args, k, None)) for k in HF_SETTINGS}
    return HF_TRAINER, settings


def _lightning(frames: list[FrameType]) -> tuple[str, dict, Any] | None:
    for part in (f"{os.sep}lightning{os.sep}pytorch{os.sep}", f"{os.sep}pytorch_lightning{os.sep}"):
        for f in frames:
            if part not in f.f_code.co_filename.replace("/", os.sep):
                continue
            for obj in (f.f_locals.get("trainer"), getattr(f.f_locals.get("self"), "trainer", None)):
                if obj is not None and type(obj).__name__ == "Trainer" and hasattr(obj, "accumulate_grad_batches"):
                    precision = getattr(getattr(obj, "strategy", None), "precision_plugin", None)
                    return LIGHTNING, {"precision": _plain(getattr(obj, "precision", None)
                                                           or getattr(precision, "precision", None)),
                                       "accumulate_grad_batches": _plain(obj.accumulate_grad_batches)}, obj
    return None


def _fabric(frames: list[FrameType]) -> tuple[str, dict] | None:
    for f in frames:
        name = f.f_code.co_filename.replace("/", os.sep)
        if f"{os.sep}fabric{os.sep}" in name and name.endswith("wrappers.py"):
            strategy = getattr(f.f_locals.get("self"), "_strategy", None)
            precision = getattr(getattr(strategy, "precision", None), "precision", None)
            return FABRIC, {"precision": _plain(precision)}
    return None


def _accelerate(frames: list[FrameType]) -> tuple[str, dict] | None:
    if not any(f"{os.sep}accelerate{os.sep}" in f.f_code.co_filename.replace("/", os.sep) for f in frames):
        return None
    state = sys.modules.get("accelerate.state")
    try:
        mixed = str(state.AcceleratorState().mixed_precision) if state is not None else None
    except Exception:  # noqa: BLE001 - a state we cannot read is just unknown
        mixed = None
    return ACCELERATE, {"mixed_precision": mixed}


def _plain(value: object) -> bool | int | float | str | None:
    """A setting as JSON can hold it (an enum's value, else its text)."""
    value = getattr(value, "value", value)
    return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)


def configured_at(frames: list[FrameType], call: str) -> dict | None:
    """The user's own line that builds the framework's configuration (``TrainingArguments(...)``),
    found in the source of the user's frames on the stack, innermost first; None where not found."""
    seen = set()
    for f in frames:
        path = f.f_code.co_filename
        if path in seen or path.startswith("<") or any(d in path for d in _FRAMEWORK_DIRS):
            continue
        seen.add(path)
        line = _call_line(path, call)
        if line is not None:
            return {"file": path, "line": line[0], "code": line[1]}
    return None


def _call_line(path: str, call: str) -> tuple[int, str] | None:
    try:
        with open(path, encoding="utf-8") as fh:
            source = fh.read()
        tree = ast.parse(source)
    except (OSError, SyntaxError, ValueError):
        return None
    lines = source.splitlines()
    found = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call) and call_name(node.func) == call]
    if not found:
        return None
    lineno = min(found)
    return lineno, lines[lineno - 1].strip() if lineno <= len(lines) else ""
