"""The archive: completed chunk files kept in object storage (issue 37, KurrentDB's Archiving).

Modules:

- ``settings``: the ``Archive:`` options read into one checked value (:class:`ArchiveSettings`,
  whose ``open_store`` gives the store they name), every mistake named before the node starts, and
  the licence rule (ARCHIVE entitlement).
- ``store``: the :class:`ArchiveStore` port (whole objects: put, conditional put, get, ranged get,
  head, list, delete) and :class:`ObjectInfo`.
- ``filesystem``: :class:`FileSystemStore`, a folder (development and tests).
- ``s3``: :class:`S3Store`, any S3-compatible object store through obstore; ``credentials``: the
  endpoint and keys from the environment and the shared AWS files.
- ``archiver``: the archiver node's uploads (claim, verified upload, checkpoint, backoff) and its
  thread (``ArchiverService``).
- ``cache``: archived chunks read back, verified, into a bounded folder (``ArchiveCache``; the
  storage read path's hook to it is still to come).
- ``catchup``: a follower behind its leader's archived chunks takes them from the archive itself
  (``ArchiveCatchUp``; the leader's side of the handshake: ``leader_archive``).

The contract both stores keep is tests/archive/test_store_contract.py; docs/operations/archive.md
is the operator's guide.
"""

from __future__ import annotations

from evdb.archive.settings import ArchiveSettings, archive_settings, require_archive_licence
from evdb.archive.store import ArchiveStore, ObjectChanged, ObjectExists, ObjectInfo, ObjectMissing

__all__ = [
    "ArchiveSettings",
    "ArchiveStore",
    "ObjectChanged",
    "ObjectExists",
    "ObjectInfo",
    "ObjectMissing",
    "archive_settings",
    "require_archive_licence",
]
