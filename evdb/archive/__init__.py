"""The archive: completed chunk files kept in object storage (issue 37, KurrentDB's Archiving).

Modules:

- ``settings``: the ``Archive:`` options read into one checked value (:class:`ArchiveSettings`),
  every mistake named before the node starts, and the licence rule (ARCHIVE entitlement).
- ``store``: the :class:`ArchiveStore` port (whole objects: put, conditional put, get, ranged get,
  head, list, delete) and :class:`ObjectInfo`.
- ``filesystem``: :class:`FileSystemStore`, a folder (development and tests).
- ``s3``: :class:`S3Store`, any S3-compatible object store through obstore; ``credentials``: the
  shared AWS credentials/config files (profiles) obstore does not read itself.
- ``opening``: :func:`open_store`, the store the settings name.

The contract both stores keep is tests/archive/test_store_contract.py.
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
