"""Checkpoint files: one little-endian int64 each.

| file         | holds                                                        | initial |
|--------------|--------------------------------------------------------------|---------|
| writer.chk   | end of the durable log                                       | 0       |
| chaser.chk   | position up to which records were indexed                    | 0       |
| epoch.chk    | position of the last epoch record                            | -1      |
| proposal.chk | highest epoch number proposed or seen                        | -1      |
| truncate.chk | position to cut the log to at the next start; -1 means none  | -1      |

An 8-byte write at offset 0 never straddles a sector, so a crash leaves either the old or the new
value; ``flush`` makes the value durable.
"""

from __future__ import annotations

import os
import struct

from evdb.errors import CorruptedFile
from evdb.storage import disk

__all__ = ["CHECKPOINT_INITIAL_VALUES", "Checkpoint", "Checkpoints"]

_I64 = struct.Struct("<q")

CHECKPOINT_INITIAL_VALUES = {"writer": 0, "chaser": 0, "epoch": -1, "proposal": -1, "truncate": -1}


class Checkpoint:
    """One checkpoint; file-backed, or in memory when ``path`` is None.

    An existing file is read at once (a file that does not hold 8 bytes is refused, naming it); a
    missing one holds ``initial`` and is written by :meth:`create_if_missing` (or the first write), so
    that opening a folder changes nothing before its checkpoints have been checked.
    """

    def __init__(self, path: str | None, initial: int) -> None:
        self.path = path
        self.initial = initial
        self._fd: int | None = None
        self._value = initial
        if path is None or not os.path.exists(path):
            return
        fd = disk.current.open(path, os.O_RDWR)
        try:
            raw = os.pread(fd, 8, 0)
            if raw and len(raw) != 8:
                raise CorruptedFile(path, f"checkpoint file holds {len(raw)} bytes, expected 8")
        except BaseException:
            os.close(fd)
            raise
        if not raw:  # created but never written (a crash at creation): as if missing
            os.close(fd)
            return
        self._fd = fd
        (self._value,) = _I64.unpack(raw)

    @property
    def value(self) -> int:
        return self._value

    def create_if_missing(self) -> bool:
        """Write the file with the current value, durably, if there is none; True when it was created."""
        if self.path is None or self._fd is not None:
            return False
        self._fd = disk.current.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        self._write(self._value)
        disk.current.fsync(self._fd)
        return True

    def _write(self, value: int) -> None:
        assert self._fd is not None
        disk.write_all(self._fd, _I64.pack(value), 0)

    def write(self, value: int, *, flush: bool = True) -> None:
        self._value = value
        if self.path is not None and self._fd is None:
            self.create_if_missing()
            return
        if self._fd is not None:
            self._write(value)
            if flush:
                disk.current.fdatasync(self._fd)

    def flush(self) -> None:
        if self._fd is not None:
            disk.current.fdatasync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class Checkpoints:
    """The five checkpoints of a database folder (or of an in-memory database)."""

    def __init__(self, directory: str | None) -> None:
        def make(name: str) -> Checkpoint:
            path = os.path.join(directory, f"{name}.chk") if directory is not None else None
            return Checkpoint(path, CHECKPOINT_INITIAL_VALUES[name])

        self.writer = make("writer")
        self.chaser = make("chaser")
        self.epoch = make("epoch")
        self.proposal = make("proposal")
        self.truncate = make("truncate")

    def all(self) -> tuple[Checkpoint, ...]:
        return (self.writer, self.chaser, self.epoch, self.proposal, self.truncate)

    def create_missing(self) -> bool:
        """Write the checkpoint files that do not exist yet (initial values); True when any was."""
        created = False
        for chk in self.all():
            created = chk.create_if_missing() or created
        return created

    def close(self) -> None:
        for chk in self.all():
            chk.close()
