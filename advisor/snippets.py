"""The code change that makes an override permanent, as a diff-style snippet per key.

Experiments inject overrides at run time; users need the edit to keep the gain. One function
per override key keeps the mapping next to the vocabulary in ``advisor.probe.overrides``.
"""

from __future__ import annotations


def _dataloader(value: dict) -> str:
    extra = ", ".join(f"{key}={value[key]!r}" for key in ("num_workers", "pin_memory", "persistent_workers", "prefetch_factor") if key in value)
    return f"- loader = DataLoader(dataset, batch_size=B, ...)\n+ loader = DataLoader(dataset, batch_size=B, ..., {extra})"


def _autocast(value: str) -> str:
    lines = [f'+ with torch.autocast(device_type="cuda", dtype=torch.{value}):',
             "      loss = loss_fn(model(inputs), targets)"]
    if value == "float16":
        lines = ['+ scaler = torch.amp.GradScaler("cuda")', *lines,
                 "- loss.backward(); optimizer.step()", "+ scaler.scale(loss).backward()",
                 "+ scaler.step(optimizer); scaler.update()"]
    return "\n".join(lines)


SNIPPETS = {
    "dataloader": _dataloader,
    "autocast": _autocast,
    "float32_matmul_precision": lambda v: f'+ torch.set_float32_matmul_precision("{v}")',
    "cudnn_benchmark": lambda v: "+ torch.backends.cudnn.benchmark = True",
    "batch_size_scale": lambda v: f"- DataLoader(dataset, batch_size=B)\n+ DataLoader(dataset, batch_size=B * {v})  # re-tune the learning rate",
    "optimizer": lambda v: "- optimizer = torch.optim.AdamW(params, lr=lr)\n+ optimizer = torch.optim.AdamW(params, lr=lr, "
                           + ", ".join(f"{k}=True" for k, on in v.items() if on) + ")",
    "compile": lambda v: "+ model = torch.compile(model)",
    "channels_last": lambda v: "+ model = model.to(memory_format=torch.channels_last)\n+ images = images.to(memory_format=torch.channels_last)",
    "torch_threads": lambda v: f"+ torch.set_num_threads({v})",
}


def snippet_for(key: str, value) -> dict:
    """{key, value, snippet} for one override key."""
    render = SNIPPETS.get(key)
    return {"key": key, "value": value, "snippet": render(value) if render else f"# {key} = {value!r}"}


def describe(overrides: dict) -> str:
    """`num_workers=8, persistent_workers=True, torch_threads=1`: an override in one line."""
    parts = []
    for key, value in overrides.items():
        if isinstance(value, dict):
            parts.extend(f"{k}={v}" for k, v in value.items())
        else:
            parts.append(f"{key}={value}")
    return ", ".join(parts)
