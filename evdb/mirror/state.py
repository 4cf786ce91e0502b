"""The mirror's files: the durable checkpoint, the lock that keeps one mirror per checkpoint, and the
status file that tools (``evdb mirror status``, the dashboard) read.

Given ``--checkpoint /x/mirror.json`` the others sit beside it: ``/x/mirror.lock`` and
``/x/mirror.status.json``. The checkpoint is replaced atomically (temporary file, fsync, rename,
folder fsync): after a crash it holds either the previous or the new position, never a torn file.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from evdb.index.durable import write_durably

__all__ = [
    "Checkpoint",
    "CheckpointError",
    "MirrorLock",
    "MirrorPaths",
    "default_checkpoint_path",
    "read_status",
    "utc_now",
    "write_status",
]

CHECKPOINT_VERSION = 1


class CheckpointError(Exception):
    """A checkpoint that cannot be used (unreadable, another pair of URLs, failed over, locked)."""


def utc_now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def default_checkpoint_path() -> Path:
    """``$XDG_DATA_HOME/evdb/mirror/checkpoint.json`` (like ``evdb cluster``'s default folder)."""
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "evdb" / "mirror" / "checkpoint.json"


@dataclass(frozen=True)
class MirrorPaths:
    checkpoint: Path

    @classmethod
    def of(cls, checkpoint: str | os.PathLike[str]) -> MirrorPaths:
        return cls(Path(checkpoint).expanduser().resolve())

    def _sibling(self, suffix: str) -> Path:
        p = self.checkpoint
        stem = p.stem if p.suffix == ".json" else p.name
        return p.with_name(stem + suffix)

    @property
    def lock(self) -> Path:
        return self._sibling(".lock")

    @property
    def status(self) -> Path:
        return self._sibling(".status.json")


@dataclass
class Checkpoint:
    """What survives a restart: the ``$all`` position (on the primary) of the last event handled."""

    source: str
    target: str
    position: int = -1  # -1: nothing handled yet, start at the beginning of $all
    events_copied: int = 0
    updated: str = field(default_factory=utc_now)
    failover: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        body = asdict(self)
        return {
            "version": CHECKPOINT_VERSION,
            "from": body.pop("source"),
            "to": body.pop("target"),
            "position": self.position,
            "eventsCopied": self.events_copied,
            "updated": self.updated,
            "failover": self.failover,
        }

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Checkpoint:
        if body.get("version") != CHECKPOINT_VERSION:
            raise CheckpointError(f"unknown checkpoint version {body.get('version')!r}")
        position = body.get("position")
        if not isinstance(position, int) or position < -1:
            raise CheckpointError(f"the checkpoint's position {position!r} is not a log position")
        return cls(
            source=str(body["from"]),
            target=str(body["to"]),
            position=position,
            events_copied=int(body.get("eventsCopied", 0)),
            updated=str(body.get("updated", "")),
            failover=body.get("failover"),
        )

    @classmethod
    def load(cls, path: Path) -> Checkpoint | None:
        """The saved checkpoint, or None when there is none yet."""
        try:
            text = path.read_text()
        except FileNotFoundError:
            return None
        try:
            return cls.from_json(json.loads(text))
        except (ValueError, KeyError, TypeError) as exc:
            raise CheckpointError(f"{path} is not a mirror checkpoint: {exc}") from None

    def save(self, path: Path) -> None:
        self.updated = utc_now()
        path.parent.mkdir(parents=True, exist_ok=True)
        write_durably(str(path), [json.dumps(self.to_json(), indent=2).encode() + b"\n"])


class MirrorLock:
    """An exclusive ``flock`` on the lock file, which holds the running mirror's pid."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            pid = self.holder()
            raise CheckpointError(
                f"another mirror{f' (pid {pid})' if pid else ''} is running with this checkpoint ({self.path})"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        os.fsync(fd)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)
            os.close(self._fd)
            self._fd = None

    def holder(self) -> int | None:
        """The pid of the mirror holding the lock, or None when no mirror holds it."""
        try:
            fd = os.open(self.path, os.O_RDWR)
        except FileNotFoundError:
            return None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                text = self.path.read_text().strip()
                return int(text) if text.isdigit() else -1
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        finally:
            os.close(fd)


def write_status(path: Path, status: dict[str, Any]) -> None:
    """Replace the status file (atomic rename; no fsync: it is rewritten every second)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(status, indent=2) + "\n")
    os.replace(tmp, path)


def read_status(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None
