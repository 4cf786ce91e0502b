"""The archive's figures as a node reports them in ``/stats`` (``es.archive``, made by
:meth:`evdb.archive.retention.Retention.panel`), read into plain values: the one shaping the dashboard's
archive panel (tui/panels/archive.py, from each node's ``GET /stats``) and the web Admin UI's archive
page (evdb/webui, from the node's own stats and its peers') both draw from.

Reading is lenient: a figure a node does not report (an older evdb) is None, never a guess, and a body
that is not the archive's shape reads as no archive figures at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

__all__ = ["ArchiveFigures", "ArchiverFigures", "archive_figures", "retention_words", "upload_lag_words"]


def _int(body: dict[str, Any], key: str) -> int | None:
    value = body.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _object(body: dict[str, Any], key: str) -> dict[str, Any]:
    value = body.get(key)
    return value if isinstance(value, dict) else {}


@dataclass(frozen=True)
class ArchiverFigures:
    """The archiver node's own figures (``es.archive.archiver``)."""

    checkpoint: int | None  # the archive checkpoint as it last read or wrote it; None not read yet
    pending_chunks: int | None  # its upload lag: completed, committed chunks not uploaded yet
    pending_bytes: int | None
    pending_since: float | None  # epoch seconds of the oldest waiting chunk's last record
    uploaded: int
    kept: int  # found uploaded and verified already (after a crash)
    failures: int  # failed steps in a row (it retries with backoff)
    last_error: str | None

    @property
    def caught_up(self) -> bool:
        return self.pending_chunks == 0 and not self.failures


@dataclass(frozen=True)
class ArchiveFigures:
    """One node's archive figures (``es.archive``)."""

    location: str  # the archive (``s3://bucket (region)``, a folder)
    retain_days: int | None
    retain_logical_bytes: int | None
    local_chunk_files: int | None
    local_bytes: int | None  # the local chunk files' sizes
    local_logical_bytes: int | None  # the log this node keeps on its disk
    archived_only_chunks: int | None  # chunks this node reads from the archive only
    archive_checkpoint: int | None  # every byte of log before it is archived; None: unknown now
    archive_error: str | None  # why the archive could not be asked (the checkpoint is unknown)
    frees_chunk_files: int | None  # what the retention policy lets the next scavenge delete now
    frees_bytes: int | None
    cache_bytes: int | None
    cache_downloads: int | None
    cache_hits: int | None
    archiver: ArchiverFigures | None  # on the archiver node only

    @property
    def archived_logical_bytes(self) -> int | None:
        return self.archive_checkpoint


def archive_figures(stats: Any) -> ArchiveFigures | None:
    """The archive figures of a ``GET /stats`` body (or of ``es.archive`` itself); None when the node
    reports none (its archive is off, or it is not evdb)."""
    if not isinstance(stats, dict):
        return None
    body = _object(_object(stats, "es"), "archive") if "es" in stats else stats
    if not isinstance(body.get("location"), str):
        return None
    retain, frees, cache = (
        _object(body, "retainAtLeast"),
        _object(body, "nextScavengeFrees"),
        _object(body, "readCache"),
    )
    checkpoint = _int(body, "archiveCheckpoint")
    error = body.get("archiveError")
    archiver = None
    if isinstance(body.get("archiver"), dict):
        a = body["archiver"]
        read = _int(a, "checkpoint")
        last = a.get("lastError")
        archiver = ArchiverFigures(
            checkpoint=read if read is not None and read >= 0 else None,
            pending_chunks=_int(a, "pendingChunks"),
            pending_bytes=_int(a, "pendingBytes"),
            pending_since=since if isinstance(since := a.get("pendingSince"), int | float) else None,
            uploaded=_int(a, "uploaded") or 0,
            kept=_int(a, "kept") or 0,
            failures=_int(a, "failures") or 0,
            last_error=last if isinstance(last, str) and last else None,
        )
    return ArchiveFigures(
        location=body["location"],
        retain_days=_int(retain, "days"),
        retain_logical_bytes=_int(retain, "logicalBytes"),
        local_chunk_files=_int(body, "localChunkFiles"),
        local_bytes=_int(body, "localBytes"),
        local_logical_bytes=_int(body, "localLogicalBytes"),
        archived_only_chunks=_int(body, "archivedOnlyChunks"),
        archive_checkpoint=checkpoint if checkpoint is not None and checkpoint >= 0 else None,
        archive_error=error if isinstance(error, str) and error else None,
        frees_chunk_files=_int(frees, "chunkFiles"),
        frees_bytes=_int(frees, "bytes"),
        cache_bytes=_int(cache, "bytes"),
        cache_downloads=_int(cache, "downloads"),
        cache_hits=_int(cache, "hits"),
        archiver=archiver,
    )


def retention_words(figures: ArchiveFigures, size: Any) -> str:
    """The policy in words (``size``: how the caller writes a byte count): "at least 30 days and 476.8
    MiB of log kept locally"."""
    days = "?" if figures.retain_days is None else str(figures.retain_days)
    unit = "day" if figures.retain_days == 1 else "days"
    return f"at least {days} {unit} and {size(figures.retain_logical_bytes)} of log kept locally"


def _since(at: float, now: float) -> str:
    """A moment in UTC: its time of day when it is today, else its date too."""
    moment, today = datetime.fromtimestamp(at, UTC), datetime.fromtimestamp(now, UTC)
    return moment.strftime("%H:%M:%S UTC" if moment.date() == today.date() else "%Y-%m-%d %H:%M UTC")


def upload_lag_words(archiver: ArchiverFigures, now: float, size: Any) -> str:
    """The archiver's upload lag in words: "caught up", or "upload lag 2 chunks (128.0 KiB), waiting since
    23:01:26 UTC" (the oldest waiting chunk's last record; ``now``: epoch seconds; ``size``: how the
    caller writes a byte count)."""
    n = archiver.pending_chunks
    if n is None:
        return "has not read the archive checkpoint yet"
    if n == 0:
        return "caught up"
    words = f"upload lag {n} chunk{'' if n == 1 else 's'} ({size(archiver.pending_bytes)})"
    if archiver.pending_since is not None:
        words += f", waiting since {_since(archiver.pending_since, now)}"
    return words
