"""DataLoader keywords and the batch size, switched live by a substitute loader fed from the original iterator's index stream.

While a window's loader switch is on, an iterator the script starts anew (an epoch's, from a loader
without persistent workers) starts without workers: its own would fork and take the epoch's indices
ahead (16 workers prefetch 32 batches, more than a small epoch holds), and the arm would time the
script's loader, not the fix's. A fix with `persistent_workers` keeps its substitute's workers from
one epoch to the next, as the code change would."""

from __future__ import annotations

import functools
import inspect
import itertools
import os
import time
import weakref
from collections import deque
from typing import Callable

import torch
import torch.utils.data.dataloader as dl

from advisor.overrides import live_loader_refusal, unmirrorable
from ..hooks import Observed, loader_kind
from .base import NotSwitchable


Loader = torch.utils.data.DataLoader
LoaderIter = dl._BaseDataLoaderIter  # the script's iterator, marked by install() with its loader and its epoch's end


class _Pull:
    """A batch_sampler that pulls each batch's indices from the original iterator's own stream:
    `scale` original batches per batch, or (scale below 1) each original batch cut in 1/scale parts."""

    def __init__(self, orig: LoaderIter, scale: float) -> None:
        self.orig = orig
        self.scale = int(scale) if scale >= 1 else 1
        self.parts = round(1 / scale) if scale < 1 else 1
        self.handed: deque = deque()  # per substitute batch: the original batches' index lists
        self.closed = False

    def __iter__(self):
        while not self.closed:
            group = []
            for _ in range(self.scale):
                try:
                    group.append(next(self.orig._sampler_iter))
                except StopIteration:
                    break
            if not group:
                return
            if self.parts > 1:
                indices = list(group[0])
                size = -(-len(indices) // self.parts)
                for k in range(0, len(indices), size):
                    if self.closed:
                        return
                    self.handed.append([indices[k:k + size]])
                    yield indices[k:k + size]
                continue
            self.handed.append(group)
            yield [i for indices in group for i in indices]
            if len(group) < self.scale:
                return


class _Substitute:
    def __init__(self, loader: Loader, it: LoaderIter, pull: _Pull) -> None:
        self.loader, self.it, self.pull = loader, it, pull

    def close(self, orig: LoaderIter) -> None:
        """Stop its workers; give the indices it took but never served back to the original stream."""
        self.pull.closed = True
        shutdown = getattr(self.it, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()
        unserved = [indices for group in self.pull.handed for indices in group]
        self.pull.handed.clear()
        if unserved:
            orig._sampler_iter = itertools.chain(unserved, orig._sampler_iter)


SUBSTITUTE_TIMEOUT_S = 120.0  # a substitute loader's wait for one batch from its workers


class DataLoaderSwitch:
    """``dataloader`` / ``batch_size_scale``: in a live process the script's ``next()`` is served
    from a substitute DataLoader; on from the start, every DataLoader the script builds gets the
    keywords (and the scaled batch size) instead, as the code change would."""

    def __init__(self, observed: Observed | None) -> None:
        self.observed = observed
        self.kwargs: dict | None = None  # the window's DataLoader keywords (None: no dataloader switch)
        self.scale = 1
        self.applied: dict = {}
        self.current: weakref.ref[LoaderIter] | None = None  # the iterator the script consumed last
        self.ended: weakref.WeakSet[LoaderIter] = weakref.WeakSet()  # the iterators whose epoch ran dry (till a reset)
        self.subs: dict[int, tuple[weakref.ref[LoaderIter], _Substitute]] = {}
        self.kept: dict[int, _Substitute] = {}  # a loader's substitute whose workers persist across its epochs, by id(loader)
        self.build_s = 0.0
        self.error: str | None = None
        self._next: Callable[[LoaderIter], object] = dl._BaseDataLoaderIter.__next__  # install(): the one it wraps
        self.construct: tuple[dict, float | None] | None = None  # on from the start: (keywords, batch scale)

    def install(self) -> None:
        """Before hooks.install: the hooks' timing wrapper then sits outside this one."""
        self._install_construct()
        base = dl._BaseDataLoaderIter
        orig_init, orig_next, orig_reset = base.__init__, base.__next__, base._reset
        orig_get = Loader._get_iterator
        self._next = orig_next
        switch = self

        def _get_iterator(loader):
            if switch.kwargs is None or not loader.num_workers or os.getpid() != switch.pid or \
                    getattr(loader, "_advise_sub", False) or unmirrorable(loader_kind(loader)):
                return orig_get(loader)
            # the substitute serves this epoch: the script's iterator is its index stream, without workers
            workers, timeout = loader.num_workers, loader.timeout
            loader.num_workers, loader.timeout = 0, 0  # (read once, by the iterator's __init__)
            try:
                return dl._SingleProcessDataLoaderIter(loader)
            finally:
                loader.num_workers, loader.timeout = workers, timeout

        def __init__(self, loader, *args, **kwargs) -> None:
            orig_init(self, loader, *args, **kwargs)
            self._advise_loader = weakref.ref(loader)

        def _reset(self, loader, first_iter=False) -> None:
            orig_reset(self, loader, first_iter)
            switch.ended.discard(self)

        def __next__(self):
            if getattr(self, "_advise_sub", False) or os.getpid() != switch.pid:
                return orig_next(self)
            return switch.next(self)

        self.pid = os.getpid()
        base.__init__, base.__next__, base._reset = __init__, __next__, _reset  # type: ignore[method-assign]  # patched in
        Loader._get_iterator = _get_iterator  # type: ignore[method-assign]  # patched in

    def _install_construct(self) -> None:
        original = torch.utils.data.DataLoader.__init__
        signature = inspect.signature(original)
        switch = self

        @functools.wraps(original)
        def __init__(self, *args, **kw) -> None:
            if switch.construct is None:
                return original(self, *args, **kw)
            kwargs, scale = switch.construct
            bound = signature.bind(self, *args, **kw)
            arguments = bound.arguments
            forced = dict(kwargs)
            if not forced.get("num_workers", arguments.get("num_workers", 0)):  # these two are errors without workers
                forced.pop("persistent_workers", None)
                forced.pop("prefetch_factor", None)
            arguments.update(forced)
            if scale and arguments.get("batch_sampler") is None:
                arguments["batch_size"] = max(1, int(int(arguments.get("batch_size", 1) or 1) * scale))
                switch.applied["batch_size_scale"] = scale
            original(*bound.args, **bound.kwargs)
            switch.applied.setdefault("dataloaders", []).append(
                {"num_workers": self.num_workers, "pin_memory": self.pin_memory, "batch_size": self.batch_size,
                 "persistent_workers": self.persistent_workers, "prefetch_factor": self.prefetch_factor})

        torch.utils.data.DataLoader.__init__ = __init__  # type: ignore[method-assign]  # the switch's, patched in

    def _mirrorable(self, it: LoaderIter) -> Loader | None:
        """The iterator's DataLoader where a substitute can mirror it (None: gone, or unmirrorable)."""
        loader = self._loader(it)
        return None if loader is None or unmirrorable(loader_kind(loader)) else loader

    @staticmethod
    def _loader(it: LoaderIter) -> Loader | None:
        ref = getattr(it, "_advise_loader", None)
        return ref() if ref is not None else None

    def next(self, it: LoaderIter) -> object:
        if self.construct is not None:  # on from the start: the loaders were built with the keywords
            return self._next(it)
        self.current = weakref.ref(it)
        entry = self.subs.get(id(it))
        if entry is None and self.kwargs is not None and it not in self.ended:
            t0 = time.monotonic()
            entry = self._build(it)
            self.build_s += time.monotonic() - t0
        if entry is None:
            return self._next(it)
        sub = entry[1]
        try:
            batch = self._next(sub.it)
        except StopIteration:
            # The original stream ran dry: the original iterator ends the epoch itself (after
            # serving what it had prefetched), exactly as without the substitute; persistent
            # workers wait for the loader's next epoch.
            if sub.loader.persistent_workers and not sub.pull.handed:
                self.subs.pop(id(it), None)
            else:
                self._drop(id(it))
            self.ended.add(it)
            return self._next(it)
        if sub.pull.handed:
            sub.pull.handed.popleft()
        return batch

    def _build(self, it: LoaderIter) -> tuple[weakref.ref[LoaderIter], _Substitute] | None:
        loader = self._mirrorable(it)
        if loader is None:
            return None
        kept = self.kept.get(id(loader))
        if kept is not None:  # its persistent workers, reset for this epoch's stream (not forked anew)
            kept.pull.orig, kept.pull.closed = it, False
            kept.pull.handed.clear()
            kept.it = iter(kept.loader)
            self.subs[id(it)] = (weakref.ref(it), kept)
            return self.subs[id(it)]
        kwargs = dict(self.kwargs or {})
        workers = kwargs.get("num_workers", loader.num_workers)
        options = {"num_workers": workers, "pin_memory": kwargs.get("pin_memory", loader.pin_memory),
                   # a worker that never serves (a fork that deadlocked on a lock another thread held:
                   # seen once, both DDP ranks at the same switch) ends the arm with an error, not the run
                   "timeout": loader.timeout or (SUBSTITUTE_TIMEOUT_S if workers else 0),
                   "worker_init_fn": loader.worker_init_fn,
                   "multiprocessing_context": loader.multiprocessing_context, "generator": loader.generator,
                   "pin_memory_device": getattr(loader, "pin_memory_device", "")}
        if workers:
            options["persistent_workers"] = kwargs.get("persistent_workers", bool(loader.persistent_workers) if loader.num_workers else False)
            options["prefetch_factor"] = kwargs.get("prefetch_factor", loader.prefetch_factor if loader.num_workers else 2)
        pull = _Pull(it, self.scale)
        known = set(self.observed.dataloaders) if self.observed is not None else set()
        sub_loader = torch.utils.data.DataLoader(loader.dataset, batch_sampler=pull, collate_fn=loader.collate_fn, **options)
        sub_loader._advise_sub = True  # ours: its iterators start their workers
        sub_it = iter(sub_loader)  # worker start-up happens here, at the switch
        sub_it._advise_sub = True  # type: ignore[attr-defined]  # the probe's mark on its own iterator
        if self.observed is not None:  # the substitute is ours, not the script's
            for key in set(self.observed.dataloaders) - known:
                self.observed.dataloaders.pop(key, None)
        sub = _Substitute(sub_loader, sub_it, pull)
        self.subs[id(it)] = (weakref.ref(it), sub)
        if sub_loader.persistent_workers:
            self.kept[id(loader)] = sub
        batch = max(1, int(loader.batch_size * self.scale)) if loader.batch_size else None
        self.applied.setdefault("dataloaders", []).append(
            {"num_workers": sub_loader.num_workers, "pin_memory": bool(sub_it._pin_memory), "batch_size": batch,
             "persistent_workers": sub_loader.persistent_workers, "prefetch_factor": sub_loader.prefetch_factor})
        if self.scale != 1:
            self.applied["batch_size_scale"] = self.scale
        return self.subs[id(it)]

    def _drop(self, key: int) -> None:
        ref, sub = self.subs.pop(key)
        orig = ref()
        if orig is not None:
            sub.close(orig)
        else:
            sub.pull.closed = True

    def on(self, overrides: dict, applied: dict, *, live: bool = True) -> None:
        if not live:
            self.construct = (dict(overrides.get("dataloader") or {}), overrides.get("batch_size_scale"))
            self.applied = applied
            applied.setdefault("dataloaders", [])  # none built: the override did not apply
            return
        it = self.current() if self.current is not None else None
        if it is None:
            raise NotSwitchable("no DataLoader iterator is in use")
        loader = self._loader(it)
        reason = "the DataLoader is gone" if loader is None else live_loader_refusal(overrides, loader_kind(loader))
        if reason:
            raise NotSwitchable(reason)
        self.kwargs = dict(overrides.get("dataloader") or {})
        self.scale = overrides.get("batch_size_scale") or 1
        self.applied = applied
        if it not in self.ended:
            self._build(it)

    def off(self) -> None:
        self.kwargs, self.scale, self.construct = None, 1, None
        for key in list(self.subs):
            self._drop(key)
        for sub in self.kept.values():  # (those waiting for their next epoch)
            sub.pull.closed = True
            shutdown = getattr(sub.it, "_shutdown_workers", None)
            if shutdown is not None:
                shutdown()
        self.kept.clear()
