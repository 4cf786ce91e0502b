"""The archive store port: named objects in a bucket (or a folder), written whole.

Every implementation keeps the contract tests/archive/test_store_contract.py checks:

- an object appears whole or not at all (a reader never sees part of a put, nor a torn one after a
  crash); a put replaces the object;
- ``put_bytes(..., if_absent=True)`` creates an object only when none has its name (else
  :class:`ObjectExists`), ``put_bytes(..., if_match=etag)`` replaces it only while its entity tag is
  still ``etag`` (else :class:`ObjectChanged`): the claim of a bucket and the archive checkpoint
  are written this way, so two archivers cannot both win;
- ``get_range`` returns the bytes from ``start``, fewer at the end of the object (none past it);
- a missing object is :class:`ObjectMissing` (``head`` answers None instead), a delete of a missing
  object does nothing;
- ``list(folder)`` gives the objects under a folder (whole ``/``-separated segments), sorted by name;
- a store that cannot be reached, times out or answers a server error raises
  :class:`~evdb.errors.ArchiveUnavailable`; every error names the store and the object.

The calls block (obstore's release the GIL while they wait): callers run them on their own threads,
never on the event loop or the threads that read local data.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass

from evdb.errors import ArchiveError, ArchiveUnavailable

__all__ = [
    "ArchiveStore",
    "ArchiveUnavailable",
    "ObjectChanged",
    "ObjectExists",
    "ObjectInfo",
    "ObjectMissing",
    "check_name",
]


class ObjectMissing(ArchiveError):
    """The archive holds no object of that name."""


class ObjectExists(ArchiveError):
    """A create-only put found an object of that name already there."""


class ObjectChanged(ArchiveError):
    """A conditional put found the object changed (or gone) since the entity tag it was given."""


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    name: str
    size: int
    #: changes whenever the object is replaced; what ``put_bytes(if_match=...)`` compares
    etag: str


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*")


def check_name(name: str) -> str:
    """``name`` if it is a valid object name: ``/``-separated segments of letters, digits, ``.``,
    ``_`` and ``-``, each starting with a letter or digit (so no ``..``, no absolute path)."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"{name!r} is not an archive object name")
    return name


class ArchiveStore(ABC):
    """A bucket or a folder of whole objects (see the module's contract)."""

    #: how logs and errors name the store: ``s3://bucket`` or the folder
    description: str

    @abstractmethod
    def check(self) -> None:
        """Raise ArchiveError when the bucket (folder) does not exist or cannot be listed with these
        credentials, ArchiveUnavailable when the store cannot be reached."""

    @abstractmethod
    def put_file(self, name: str, path: str) -> ObjectInfo:
        """Upload the file at ``path`` as object ``name`` (replacing it)."""

    @abstractmethod
    def put_bytes(
        self, name: str, data: bytes, *, if_absent: bool = False, if_match: str | None = None
    ) -> ObjectInfo:
        """Store ``data`` as object ``name``: unconditionally, or only when absent, or only while its
        entity tag is ``if_match``."""

    @abstractmethod
    def get_bytes(self, name: str) -> bytes:
        """The whole object."""

    @abstractmethod
    def get_range(self, name: str, start: int, length: int) -> bytes:
        """Up to ``length`` bytes of the object from ``start``."""

    @abstractmethod
    def download(self, name: str, path: str) -> ObjectInfo:
        """Write the object to a new file at ``path``, synced; the caller names (and renames) it."""

    @abstractmethod
    def head(self, name: str) -> ObjectInfo | None:
        """The object's size and entity tag, or None when there is none."""

    @abstractmethod
    def list(self, folder: str = "") -> list[ObjectInfo]:
        """The objects under ``folder`` (every object for ""), sorted by name."""

    @abstractmethod
    def delete(self, name: str) -> None:
        """Remove the object; nothing happens when there is none."""

    def close(self) -> None:  # noqa: B027 (a store with nothing to release keeps the default)
        """Release connections or handles."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.description}>"

    # -- the one wording of each of the port's errors, for the implementations -----------------------
    def _missing(self, name: str) -> ObjectMissing:
        return ObjectMissing(f"The archive {self.description} holds no object {name}")

    def _held(self, name: str) -> ObjectExists:
        """A put ``if_absent`` of an object the archive already holds."""
        return ObjectExists(f"The archive {self.description} already holds {name}")

    def _changed(self, name: str, detail: str = "") -> ObjectChanged:
        """A put ``if_match`` of an object replaced since it was read (``detail``: the entity tags, where
        the store knows them)."""
        return ObjectChanged(
            f"The archive's {name} in {self.description} changed since it was read"
            + (f" ({detail})" if detail else "")
        )

    def _unavailable(self, what: str, detail: object) -> ArchiveUnavailable:
        """The archive cannot be reached (``detail``: the error, or its first line)."""
        return ArchiveUnavailable(f"The archive {self.description} is unavailable ({what}): {detail}")
