"""A run's Profile as the analysis reads it: a Protocol, since :mod:`advisor.profile` imports the
analysis (the layers go one way)."""

from __future__ import annotations

from typing import Callable, Hashable, Protocol, TypeVar

import pandas as pd

from ..run_dir.seen import Env
from ..trace import TraceFrames

T = TypeVar("T")


class _Source(Protocol):
    @property
    def source(self) -> str | None: ...


class ProfileView(Protocol):
    """What the analysis reads of a run's :class:`advisor.profile.Profile` (which imports the
    analysis: it is named here by what it has)."""

    @property
    def env(self) -> Env: ...
    @property
    def trace(self) -> TraceFrames | None: ...
    @property
    def meta(self) -> _Source: ...
    @property
    def has_gpu(self) -> bool: ...
    @property
    def steps(self) -> pd.DataFrame: ...
    @property
    def ops(self) -> pd.DataFrame: ...
    @property
    def kernels(self) -> pd.DataFrame: ...
    @property
    def runtime(self) -> pd.DataFrame: ...
    @property
    def annotations(self) -> pd.DataFrame: ...
    @property
    def trace_steps(self) -> pd.DataFrame: ...
    def derived(self, key: Hashable, compute: Callable[[], T]) -> T: ...
