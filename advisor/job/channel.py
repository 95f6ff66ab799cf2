"""How the ranks of one job reach each other: each rank's summary up to rank 0, rank 0's plan down.

Values are small JSON objects under keys every rank can name without asking (``plan/0``,
``final/3``). The channel is the one the job already has, so the user sets nothing:

- torchrun: its agent's store (``MASTER_ADDR:MASTER_PORT`` with ``TORCHELASTIC_USE_AGENT_STORE``),
  the TCPStore the script's own ``init_process_group`` joins; the agent on rank 0's node hosts it
  for the whole job, so it is there before the first rank asks and after the last one ends, on
  every node, shared filesystem or not.
- ranks with an address but no agent (``srun``, hand-set ``RANK``): ``MASTER_PORT`` is the
  script's own store, so advise's rank 0 hosts one beside it, on ``MASTER_PORT + 1``
  (``ADVISE_JOB_PORT`` names another port).
- no address at all: files in the run dir (one node, or a filesystem the nodes share).

Rank 0 and the other ranks must meet on the same channel. Where another process holds the port,
rank 0 cannot serve its store: it meets the ranks in the run dir and leaves a marker there, and
every other rank looks for the marker before the store and checks that the store it reached is
rank 0's (its ``hello`` key) before trusting it; one that is not sends to the run dir too.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, TypeAlias

from ..run_dir.atomic import write_json_atomic
from .rank import JobRank

if TYPE_CHECKING:
    from torch.distributed import TCPStore
    from ..run_dir.interrupt import StopRequest

CONNECT_S = 60.0  # how long a rank tries to reach the store (rank 0's advise may start later)
POLL_S = 0.1
FILE_PREFIX = ".advise-job."  # the run dir's channel files (no address: one node or a shared filesystem)
HELLO = "hello"  # put by rank 0's advise on the store it serves: a rank that reads it reached that store
HELLO_WAIT_S = 5.0  # rank 0 puts it as it opens the store, before its script starts


class ChannelError(RuntimeError):
    """The job's channel could not be reached (the store's host is gone, the port was taken)."""


@contextlib.contextmanager
def _quiet_native_stderr() -> Iterator[None]:
    """torch's C++ store logs a failed connection with its native stack (20-odd frames) on fd 2;
    the ChannelError that follows says it in one line."""
    try:
        saved, null = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    except OSError:
        yield
        return
    try:
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


def _open_store(addr: str, port: int, host: bool) -> TCPStore:
    """A TCPStore, given up after CONNECT_S (and HELLO_WAIT_S more): a client whose port is held by
    a process that accepts and never answers waits in its handshake whatever its timeout says
    (torch 2.13), so it runs in a thread of its own, left behind (a daemon) when it hangs."""
    from torch.distributed import TCPStore  # torch: 1 s; only a store's ranks need it

    box: dict = {}

    def connect() -> None:
        try:
            box["store"] = TCPStore(addr, port, is_master=host, wait_for_workers=False,
                                    timeout=timedelta(seconds=CONNECT_S))
        except Exception as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=connect, name="advise-store-connect", daemon=True)
    thread.start()
    thread.join(CONNECT_S + HELLO_WAIT_S)
    if "error" in box:
        raise box["error"]
    if "store" not in box:
        raise TimeoutError(f"no answer in {CONNECT_S:.0f} s (the process on the port is not a store)")
    return box["store"]


class StoreChannel:
    """A TCPStore: a client of torchrun's agent store, or (`host`) the store advise's rank 0 serves."""

    def __init__(self, addr: str, port: int, prefix: str, host: bool = False) -> None:
        self.addr, self.port, self.prefix, self.host = addr, port, prefix, host
        self._store: TCPStore | None = None
        self._failed: str | None = None
        self.where = f"the job's store at {addr}:{port}" + (" (served by rank 0's advise)" if host else "")
        if host:
            self._connect()  # before the other ranks ask for it

    def _connect(self) -> TCPStore:
        if self._failed is not None:  # tried for CONNECT_S once already: no second wait
            raise ChannelError(self._failed)
        if self._store is None:
            try:
                with _quiet_native_stderr():
                    store = _open_store(self.addr, self.port, self.host)
                    if self.host:
                        store.set(self.prefix + HELLO, "{}")
                self._store = store
            except Exception as exc:  # noqa: BLE001 - RuntimeError / DistStoreError / OSError, by torch version
                self._failed = f"cannot reach {self.where}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
                raise ChannelError(self._failed) from None
        return self._store

    def put(self, key: str, value: dict) -> None:
        try:
            self._connect().set(self.prefix + key, json.dumps(value))
        except ChannelError:
            raise
        except Exception as exc:  # noqa: BLE001 - RuntimeError / DistStoreError / OSError, by torch version
            raise ChannelError(f"cannot write {key} to {self.where}: {exc}") from None

    def get(self, key: str) -> dict | None:
        """The value, or None while no rank has put it (never blocks)."""
        store = self._connect()
        try:
            if not store.check([self.prefix + key]):
                return None
            return json.loads(store.get(self.prefix + key))
        except Exception as exc:  # noqa: BLE001 - RuntimeError / DistStoreError / OSError, by torch version
            raise ChannelError(f"cannot read {key} from {self.where}: {exc}") from None

    def close(self) -> None:
        self._store = None

    def check_served_by_rank_0(self) -> None:
        """Connect, and wait (HELLO_WAIT_S) for the hello rank 0's advise puts on the store it serves;
        ChannelError where another process holds the port."""
        store, deadline = self._connect(), time.monotonic() + HELLO_WAIT_S
        try:
            while not store.check([self.prefix + HELLO]):
                if time.monotonic() >= deadline:
                    break
                time.sleep(POLL_S)
            else:
                return
        except Exception:  # noqa: BLE001 - the stranger on the port is not a store at all
            pass
        raise ChannelError(f"cannot reach {self.where}: another process holds the port, not rank 0's advise")


class DirChannel:
    """Files in the run dir, one per key (atomic writes: a reader never sees half a value)."""

    def __init__(self, folder: Path, prefix: str) -> None:
        self.folder, self.prefix = Path(folder), prefix
        self.where = f"files in {folder}"

    def _path(self, key: str) -> Path:
        return self.folder / f"{FILE_PREFIX}{self.prefix}{key.replace('/', '.')}.json"

    @property
    def marker(self) -> Path:
        """Left by rank 0 that could not serve its store: the ranks meet here."""
        return self.folder / f"{FILE_PREFIX}{self.prefix}files"

    def put(self, key: str, value: dict) -> None:
        try:
            write_json_atomic(self._path(key), value)
        except OSError as exc:
            raise ChannelError(f"cannot write {key} in {self.folder}: {exc.strerror or exc}") from None

    def get(self, key: str) -> dict | None:
        try:
            return json.loads(self._path(key).read_text())
        except (OSError, ValueError):
            return None

    def close(self) -> None:
        for path in self.folder.glob(f"{FILE_PREFIX}{self.prefix}*"):
            path.unlink(missing_ok=True)


class FollowerChannel:
    """Another rank's side of the store rank 0's advise serves: the store, or the run dir where rank 0
    left its marker (it could not serve the store) or where the store reached is not rank 0's."""

    def __init__(self, store: StoreChannel, files: DirChannel, warn: Callable[[str], None]) -> None:
        self._store, self._files, self._warn = store, files, warn
        self._chosen: StoreChannel | DirChannel | None = None

    def _channel(self) -> StoreChannel | DirChannel:
        if self._chosen is None:
            if self._files.marker.exists():
                self._chosen = self._files
            else:
                try:
                    self._store.check_served_by_rank_0()
                    self._chosen = self._store
                except ChannelError as exc:
                    self._warn(f"{exc}; this rank meets rank 0 in the run dir instead")
                    self._chosen = self._files
        return self._chosen

    @property
    def where(self) -> str:
        return (self._chosen or self._store).where

    def put(self, key: str, value: dict) -> None:
        self._channel().put(key, value)

    def get(self, key: str) -> dict | None:
        return self._channel().get(key)

    def close(self) -> None:
        if self._chosen is not None:
            self._chosen.close()


Channel: TypeAlias = "StoreChannel | DirChannel | FollowerChannel"  # what a rank talks to the job through


def open_channel(job: JobRank, run_dir: Path, warn: Callable[[str], None] = lambda line: None) -> Channel:
    """The channel of `job` (see the module docstring); rank 0 of a job without an agent serves its
    store, or (the port is taken) meets the ranks in the run dir and says so through `warn`."""
    prefix = f"advise/{job.job_id or 'job'}/"
    files = DirChannel(run_dir, (job.job_id or "job") + ".")
    if job.master_addr and job.master_port and job.agent_store:
        return StoreChannel(job.master_addr, job.master_port, prefix)
    if not (job.master_addr and job.master_port):
        return files
    port = int(os.environ.get("ADVISE_JOB_PORT") or job.master_port + 1)
    if job.rank != 0:
        return FollowerChannel(StoreChannel(job.master_addr, port, prefix), files, warn)
    try:
        store = StoreChannel(job.master_addr, port, prefix, host=True)
    except ChannelError as exc:
        warn(f"{exc}; the ranks meet in the run dir instead (ADVISE_JOB_PORT picks a free port)")
        try:
            files.marker.parent.mkdir(parents=True, exist_ok=True)
            files.marker.write_text(str(exc) + "\n")
        except OSError:
            pass  # the run dir's own checks say why; the other ranks then find no store and use the run dir
        return files
    files.marker.unlink(missing_ok=True)  # a stale one from an earlier job in this run dir
    return store


def wait_for(channel: Channel, keys: list[str], deadline: float, stop: StopRequest | None = None) -> dict[str, dict]:
    """The values of `keys` put by `deadline` (monotonic) or before `stop` is set; missing keys are left out."""
    found: dict[str, dict] = {}
    while True:
        for key in keys:
            if key not in found:
                value = channel.get(key)
                if value is not None:
                    found[key] = value
        if len(found) == len(keys) or time.monotonic() >= deadline or (stop is not None and stop):
            return found
        time.sleep(POLL_S)
