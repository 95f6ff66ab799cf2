"""A fix in the words of the framework that runs the step: the Hugging Face Trainer's
``bf16=True``, Lightning's ``precision="bf16-mixed"``, Fabric's and Accelerate's own settings. The
measured override stays the same (:mod:`advisor.overrides`); only the code change said for it
differs, written into the user's own configuring line where that line is the whole call
(:mod:`advisor.framework.config_line`), and a rule doc's ```` ```fix ```` blocks are shown the same way."""

from __future__ import annotations

import json
import os
import re
from typing import Any, Callable

from .config_line import CONFIG_CHANGE, as_flags, in_users_line, split_settings
from ..overrides import DATALOADER_KEYS, MICRO_BATCH_CUTS, VOCABULARY, validate


def snippet(key: str, value: object, framework: dict | None = None) -> str:
    """The code change that makes one override permanent, in the words of the user's `framework`
    (the probe's ``observed.framework``: its name and settings) where it has its own."""
    name = (framework or {}).get("name")
    form = FRAMEWORK_FORMS.get(name, {}).get(key) if name else None
    text = form(value, (framework or {}).get("settings") or {}) if form else None
    at = (framework or {}).get("configured_at") or {}
    if text and name == HF_TRAINER and (framework or {}).get("command_line"):
        return as_flags(text, os.path.basename(at.get("file") or "train.py"))
    if text:
        return in_users_line(text, at.get("code")) or text
    knob = VOCABULARY.get(key)
    return knob.snippet(value) if knob else f"# {key} = {value!r}"


def snippets(overrides: dict, framework: dict | None = None) -> list[dict]:
    """[{key, value, snippet}] for each key of `overrides` (report.json's `recommended.snippets`)."""
    return [{"key": key, "value": value, "snippet": snippet(key, value, framework)}
            for key, value in (overrides or {}).items()]


# The measured arm stays the same override: only the words change. Each form takes the value and the
# settings the probe read (advisor.probe.framework) and returns the change, or None for the plain form.

HF_TRAINER, LIGHTNING, FABRIC, ACCELERATE = "transformers.Trainer", "lightning.Trainer", "lightning.Fabric", "accelerate"

FRAMEWORK_NAMES = {HF_TRAINER: "the Hugging Face Trainer", LIGHTNING: "the Lightning Trainer", FABRIC: "Lightning Fabric",
                   ACCELERATE: "Accelerate"}

def _args(*settings: str) -> str:
    return f"- args = TrainingArguments(...)\n+ args = TrainingArguments(..., {', '.join(settings)})"

def _hf_loader(v: dict, _s: dict) -> str:
    names = {"num_workers": "dataloader_num_workers", "pin_memory": "dataloader_pin_memory",
             "persistent_workers": "dataloader_persistent_workers", "prefetch_factor": "dataloader_prefetch_factor"}
    return _args(*(f"{names[k]}={v[k]!r}" for k in DATALOADER_KEYS if k in v))

def _hf_batch(v: float, s: dict) -> str:
    batch, accumulate = s.get("per_device_train_batch_size"), s.get("gradient_accumulation_steps") or 1
    if v in MICRO_BATCH_CUTS:  # a smaller micro-batch, the effective batch kept by accumulation
        if batch:
            return _args(f"per_device_train_batch_size={max(1, int(batch * v))}",
                         f"gradient_accumulation_steps={int(round(accumulate / v))}")
        return _args(f"per_device_train_batch_size=B * {v}", f"gradient_accumulation_steps=G / {v}")
    return _args(f"per_device_train_batch_size={batch * v}" if batch else f"per_device_train_batch_size=B * {v}")

def _trainer(setting: str) -> str:
    return f"- trainer = L.Trainer(...)\n+ trainer = L.Trainer(..., {setting})"

def _lightning_loader(v: dict, _s: dict) -> str:
    return ("  # in your LightningDataModule's train_dataloader(), or the loader you pass to trainer.fit\n"
            + VOCABULARY["dataloader"].snippet(v))

def _lightning_batch(v: float, s: dict) -> str:
    if v in MICRO_BATCH_CUTS:
        accumulate = int(s.get("accumulate_grad_batches") or 1)
        return ("  # the loader's batch_size times %s, the effective batch kept by accumulation\n" % v
                + _trainer(f"accumulate_grad_batches={int(round(accumulate / v))}"))
    return "  # in your LightningDataModule's train_dataloader(), or the loader you pass to trainer.fit\n" + \
        VOCABULARY["batch_size_scale"].snippet(v)

def in_config_call(framework: str, overrides: dict) -> bool:
    """Whether every change of `overrides` is a setting of the framework's own configuration call
    (TrainingArguments, L.Trainer, Fabric, Accelerator), so the fix goes at that line."""
    keys = set(FRAMEWORK_FORMS.get(framework, {})) if framework == HF_TRAINER else {"autocast"}
    return bool(overrides) and set(overrides) <= keys

FRAMEWORK_FORMS: dict[str, dict[str, Callable[[Any, dict], str | None]]] = {
    HF_TRAINER: {
        "autocast": lambda v, s: _args("bf16=True" if v == "bfloat16" else "fp16=True"),
        "float32_matmul_precision": lambda v, s: _args("tf32=True"),
        "dataloader": _hf_loader,
        "batch_size_scale": _hf_batch,
        "compile": lambda v, s: _args("torch_compile=True", *([] if v is True else [f'torch_compile_mode="{v}"'])),
        "optimizer": lambda v, s: _args('optim="adamw_torch_fused"') if v.get("fused") else None,
        "activation_checkpointing": lambda v, s: _args("gradient_checkpointing=True"),
    },
    LIGHTNING: {
        "autocast": lambda v, s: _trainer('precision="bf16-mixed"' if v == "bfloat16" else 'precision="16-mixed"'),
        "dataloader": _lightning_loader,
        "batch_size_scale": _lightning_batch,
        "compile": lambda v, s: VOCABULARY["compile"].snippet(v) + "  # before trainer.fit(model, ...)",
        "optimizer": lambda v, s: ("  # in your LightningModule's configure_optimizers()\n"
                                   + VOCABULARY["optimizer"].snippet(v).replace("optimizer = ", "return ")),
    },
    FABRIC: {
        "autocast": lambda v, s: ("- fabric = Fabric(...)\n+ fabric = Fabric(..., precision=%s)"
                                  % ('"bf16-mixed"' if v == "bfloat16" else '"16-mixed"')),
    },
    ACCELERATE: {
        "autocast": lambda v, s: ("- accelerator = Accelerator(...)\n+ accelerator = Accelerator(..., mixed_precision=%s)"
                                  % ('"bf16"' if v == "bfloat16" else '"fp16"')),
    },
}

def config_settings(key: str, value: object, framework: dict | None) -> tuple[str, list[str]] | None:
    """Where the framework's form of an override is settings of its configuring call, that call's
    name and the settings (``("TrainingArguments", ["bf16=True"])``, ``("Trainer",
    ['precision="bf16-mixed"'])``): what ``advise apply`` writes into the user's call; None for a
    change made elsewhere (the plain form, a DataModule's loader)."""
    name = (framework or {}).get("name")
    form = FRAMEWORK_FORMS.get(name, {}).get(key) if name else None
    text = form(value, (framework or {}).get("settings") or {}) if form else None
    m = CONFIG_CHANGE.fullmatch(text) if text else None
    return (m["call"], split_settings(m["settings"])) if m else None


_FIX_BLOCK = re.compile(r"^```fix\n(.*?)\n```$", re.M | re.S)


def expand_fix_blocks(doc: str) -> str:
    """A rule doc's ```` ```fix ```` block (an override as JSON) becomes the snippets advise shows
    for that fix everywhere else (a ```` ```diff ```` block), so the rule's documentation cannot
    show the fix differently from the terminal, the page and report.json."""
    def expand(match: re.Match) -> str:
        overrides = json.loads(match.group(1))
        validate(overrides)
        out = "```diff\n" + "\n".join(snippet(k, v) for k, v in overrides.items()) + "\n```"
        for name, forms in FRAMEWORK_FORMS.items():  # every framework that has its own words for it
            if any(forms.get(k) and forms[k](v, {}) for k, v in overrides.items()):
                framework = {"name": name, "settings": {}}
                out += (f"\n\nWith {FRAMEWORK_NAMES[name]}:\n```diff\n"
                        + "\n".join(snippet(k, v, framework) for k, v in overrides.items()) + "\n```")
        return out
    return _FIX_BLOCK.sub(expand, doc)
