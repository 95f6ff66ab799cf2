"""Runs a user's training script in a child process and records what it does.

`runner` (parent side) spawns `bootstrap` (child side), samples the child with `sampler`, and
enforces the timeout. `clock` finds step boundaries inside the child without code changes.
"""
