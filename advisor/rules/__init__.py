"""Bottleneck rules, one per module (installed as ``advisor.rules``)."""
