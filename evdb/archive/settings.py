"""The archive's options (``Archive:`` in YAML, and ``Archiver``) read into one checked value.

KurrentDB's shape::

    Archive:
      Enabled: true
      RetainAtLeast: {Days: 30, LogicalBytes: 500000000}
      StorageType: S3            # or FileSystem (development)
      S3: {Region: eu-west-1, Bucket: cluster-123-archive}
      FileSystem: {Path: /srv/archive}
    ReadOnlyReplica: true        # the archiver only
    Archiver: true

:func:`archive_settings` names every mistake at once (one :class:`~evdb.errors.InvalidOption`, so
``evdb node`` exits 2 before anything starts); :func:`require_archive_licence` is the licence rule
(the ARCHIVE entitlement), checked when the node starts, as KurrentDB refuses to run a licensed
feature without its licence.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from evdb.errors import InvalidOption
from evdb.licensing.token import Entitlement, LicenseError

if TYPE_CHECKING:
    from evdb.archive.store import ArchiveStore
    from evdb.licensing.loading import LicenseCheck
    from evdb.licensing.token import License

__all__ = ["ArchiveSettings", "archive_settings", "require_archive_licence", "starting_archive"]

#: AWS's rule for bucket names (general purpose buckets): 3-63 of a-z 0-9 . -, a letter or digit at both ends
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_IP_LIKE = re.compile(r"\d+\.\d+\.\d+\.\d+")


@dataclass(frozen=True)
class ArchiveSettings:
    """A node's archive configuration, checked (:func:`archive_settings`)."""

    enabled: bool
    archiver: bool = False
    storage_type: str | None = None  # "S3" or "FileSystem"
    s3_bucket: str | None = None
    s3_region: str | None = None
    folder: str | None = None  # FileSystem
    retain_days: int | None = None
    retain_logical_bytes: int | None = None

    @property
    def location(self) -> str:
        """How logs name the archive: ``s3://bucket (region)`` or the folder."""
        if self.storage_type == "S3":
            return f"s3://{self.s3_bucket} ({self.s3_region})"
        return str(self.folder)

    def open_store(self, environ: Mapping[str, str] | None = None) -> ArchiveStore:
        """The store these settings name (nothing is contacted yet: see ``ArchiveStore.check``)."""
        if not self.enabled:
            raise InvalidOption("The archive is not enabled (Archive: Enabled)")
        if self.storage_type == "S3":
            from evdb.archive.s3 import S3Store

            assert self.s3_bucket is not None and self.s3_region is not None
            return S3Store(self.s3_bucket, self.s3_region, environ)
        from evdb.archive.filesystem import FileSystemStore

        assert self.folder is not None
        return FileSystemStore(self.folder)


def _blank(value: str | None) -> bool:
    return value is None or not value.strip()


def archive_settings(options: Any) -> ArchiveSettings:
    """The archive settings of ``options``; InvalidOption naming every problem (see the module)."""
    problems: list[str] = []
    enabled = bool(options.archive_enabled)
    archiver = bool(options.archiver)
    if archiver and not enabled:
        problems.append("Archiver: true needs the archive on (Archive: Enabled: true).")
    if archiver and not options.read_only_replica:
        problems.append(
            "Archiver: true needs ReadOnlyReplica: true: the archiver is a read-only replica that "
            "uploads what the cluster commits (add a fourth node for it, as KurrentDB does)."
        )
    if archiver and options.mem_db:
        problems.append("Archiver: true needs a database on disk (MemDb is on): it uploads chunk files.")
    if not enabled:
        if problems:
            _raise(problems)
        return ArchiveSettings(enabled=False)
    kind = options.archive_storage_type
    if kind is None:
        problems.append("Archive: StorageType is required when the archive is enabled: S3 or FileSystem.")
    elif kind == "S3":
        bucket, region = options.archive_s3_bucket, options.archive_s3_region
        if _blank(bucket):
            problems.append("Archive: S3: Bucket is required with StorageType S3.")
        elif not _BUCKET.fullmatch(bucket) or ".." in bucket or _IP_LIKE.fullmatch(bucket):
            problems.append(
                f"Archive: S3: Bucket {bucket!r} is not an S3 bucket name: 3 to 63 lower-case letters, "
                "digits, dots and hyphens, starting and ending with a letter or digit, not an IP address."
            )
        if _blank(region):
            problems.append("Archive: S3: Region is required with StorageType S3 (eu-west-1, say).")
    elif _blank(options.archive_file_system_path):
        problems.append("Archive: FileSystem: Path is required with StorageType FileSystem.")
    for name, value in (
        ("Days", options.archive_retain_at_least_days),
        ("LogicalBytes", options.archive_retain_at_least_logical_bytes),
    ):
        if value is None:
            problems.append(
                f"Archive: RetainAtLeast: {name} is required when the archive is enabled (a chunk leaves a "
                "node's disk only outside both Days and LogicalBytes)."
            )
    if problems:
        _raise(problems)
    return ArchiveSettings(
        enabled=True,
        archiver=archiver,
        storage_type=kind,
        s3_bucket=options.archive_s3_bucket.strip() if kind == "S3" else None,
        s3_region=options.archive_s3_region.strip() if kind == "S3" else None,
        folder=options.archive_file_system_path if kind == "FileSystem" else None,
        retain_days=options.archive_retain_at_least_days,
        retain_logical_bytes=options.archive_retain_at_least_logical_bytes,
    )


def _raise(problems: list[str]) -> None:
    if len(problems) == 1:
        raise InvalidOption(problems[0])
    raise InvalidOption(
        f"{len(problems)} problems with the archive options:\n" + "\n".join(f"- {p}" for p in problems)
    )


def require_archive_licence(check: LicenseCheck, now: float) -> License:
    """The licence when it grants ARCHIVE at ``now``; else a LicenseError that says the archive needs it."""
    try:
        return check.require(Entitlement.ARCHIVE, now)
    except LicenseError as exc:
        raise type(exc)(
            f"The archive (Archive: Enabled) needs a valid licence with the ARCHIVE entitlement: {exc}"
        ) from None


def starting_archive(
    options: Any, check: LicenseCheck, now: float, logger: logging.Logger
) -> ArchiveSettings:
    """What a starting node does about its archive options: check them (InvalidOption), require the
    licence when the archive is on (LicenseError: the node does not start), and log one line."""
    settings = archive_settings(options)
    if settings.enabled:
        require_archive_licence(check, now)
        logger.info(
            "Archive on: %s (%s), retaining at least %d days and %d logical bytes locally%s",
            settings.location,
            settings.storage_type,
            settings.retain_days,
            settings.retain_logical_bytes,
            "; this node is the archiver" if settings.archiver else "",
        )
    return settings
