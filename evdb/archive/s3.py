"""An S3 archive (``StorageType: S3``) through obstore: AWS S3 or any S3-compatible store.

Why obstore (docs/operations/archive.md has the figures): the Rust object_store crate under a
small typed Python API, with no Python dependencies; its calls release the GIL while they wait, so
an upload or an archive read on its own thread leaves the node's threads running; uploads of large
files are multipart and streamed; conditional puts (``If-None-Match: *``, ``If-Match``) are built
in. boto3 drags botocore (33 MB, 0.13 s to import) and blocks; aiobotocore and s3fs follow
botocore's releases at a distance.

obstore retries a failed request itself a few times (5xx, dropped connections, time-outs) within
:data:`REQUEST_RETRY_SECONDS`; what still fails is :class:`~evdb.errors.ArchiveUnavailable`, and the
callers decide (the archiver backs off and tries again, a read answers 503).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import obstore
from obstore import exceptions as obe
from obstore.store import S3Store as _ObS3Store

from evdb.archive.credentials import S3Access, s3_access
from evdb.archive.store import ArchiveStore, ObjectChanged, ObjectInfo, ObjectMissing, check_name
from evdb.errors import ArchiveError

if TYPE_CHECKING:
    from obstore import GetOptions

__all__ = ["DOWNLOAD_PIECE", "REQUEST_RETRY_SECONDS", "S3Store"]

#: how long obstore keeps retrying one request before the caller hears of the failure
REQUEST_RETRY_SECONDS = 10
_STATUS = re.compile(r"status code: (\d{3})")
#: the bytes of one ranged GET of a download (at most this much memory per download under way)
DOWNLOAD_PIECE = 64 * 1024 * 1024
#: how many times a download starts again when the object is replaced while it is read
_DOWNLOAD_ATTEMPTS = 3


class S3Store(ArchiveStore):
    def __init__(
        self,
        bucket: str,
        region: str,
        environ: Mapping[str, str] | None = None,
        *,
        timeout_seconds: float = 60,
        connect_timeout_seconds: float = 5,
        max_retries: int = 3,
    ) -> None:
        env = os.environ if environ is None else environ
        self.access: S3Access = s3_access(env)
        self.bucket = bucket
        self.description = f"s3://{bucket}" + (f" at {self.access.endpoint}" if self.access.endpoint else "")
        config: dict[str, Any] = {"region": region}
        if self.access.endpoint:
            config["endpoint"] = self.access.endpoint
        if self.access.access_key_id:
            config["access_key_id"] = self.access.access_key_id
            config["secret_access_key"] = self.access.secret_access_key
            if self.access.session_token:
                config["token"] = self.access.session_token
        client: dict[str, Any] = {
            "timeout": timedelta(seconds=timeout_seconds),
            "connect_timeout": timedelta(seconds=connect_timeout_seconds),
        }
        if (self.access.endpoint or "").startswith("http://"):
            client["allow_http"] = True
        self._store = _ObS3Store(
            bucket,
            config=config,  # type: ignore[arg-type]
            client_options=client,  # type: ignore[arg-type]
            retry_config={
                "max_retries": max_retries,
                "retry_timeout": timedelta(seconds=REQUEST_RETRY_SECONDS),
                "backoff": {
                    "init_backoff": timedelta(milliseconds=100),
                    "max_backoff": timedelta(seconds=2),
                    "base": 2,
                },
            },
        )

    @contextmanager
    def _errors(self, what: str, name: str) -> Iterator[None]:
        """obstore's exceptions as the port's errors, naming the bucket and the object."""
        try:
            yield
        except FileNotFoundError as exc:  # obstore's NotFoundError
            if "NoSuchBucket" in str(exc):
                raise ArchiveError(f"The archive bucket {self.description} does not exist") from exc
            raise self._missing(name) from exc
        except obe.AlreadyExistsError as exc:
            raise self._held(name) from exc
        except obe.PreconditionError as exc:
            raise self._changed(name) from exc
        except (obe.PermissionDeniedError, obe.UnauthenticatedError) as exc:
            raise ArchiveError(
                f"The archive {self.description} refused to {what} {name} with the credentials of "
                f"{self.access.source}: {_first_line(exc)}"
            ) from exc
        except obe.BaseError as exc:
            status = _status(exc)
            if "NoSuchBucket" in str(exc):
                raise ArchiveError(f"The archive bucket {self.description} does not exist") from exc
            if status is not None and 400 <= status < 500 and status not in (408, 429):
                raise ArchiveError(
                    f"The archive {self.description} refused to {what} {name} (HTTP {status}): "
                    f"{_first_line(exc)}"
                ) from exc
            raise self._unavailable(f"{what} {name}", _first_line(exc)) from exc

    # -- the port ------------------------------------------------------------------------------------
    def check(self) -> None:
        with self._errors("list", "the bucket"):
            next(iter(obstore.list(self._store, chunk_size=1)), None)

    def put_file(self, name: str, path: str) -> ObjectInfo:
        check_name(name)
        size = os.stat(path).st_size  # a local file gone: its OSError, before the store is asked
        with self._errors("store", name):
            # a path, not a file object: obstore reads it in Rust, not through Python's file reads
            result = obstore.put(self._store, name, Path(path))
        return ObjectInfo(name, size, str(result["e_tag"]))

    def put_bytes(
        self, name: str, data: bytes, *, if_absent: bool = False, if_match: str | None = None
    ) -> ObjectInfo:
        check_name(name)
        mode: Any = None
        if if_absent:
            mode = "create"
        elif if_match is not None:
            mode = {"e_tag": if_match}
        with self._errors("store", name):
            result = obstore.put(self._store, name, data, mode=mode, use_multipart=False)
        return ObjectInfo(name, len(data), str(result["e_tag"]))

    def get_bytes(self, name: str) -> bytes:
        check_name(name)
        with self._errors("read", name):
            return bytes(obstore.get(self._store, name).bytes())

    def get_range(self, name: str, start: int, length: int) -> bytes:
        check_name(name)
        if start < 0 or length < 0:
            raise ValueError(
                f"a range starts and has a length of at least 0 (start {start}, length {length})"
            )
        if length == 0:
            return b""
        try:
            with self._errors("read", name):
                return bytes(obstore.get_range(self._store, name, start=start, length=length))
        except ArchiveError as exc:
            if "(HTTP 416)" in str(exc):  # the range starts past the end: nothing there
                return b""
            raise

    def download(self, name: str, path: str) -> ObjectInfo:
        """The object in ranged GETs of :data:`DOWNLOAD_PIECE` bytes, each of the version the first one
        found (``If-Match`` its entity tag; an object replaced meanwhile is read again from its start).
        obstore collects each piece into one buffer with the GIL released and it is written from that
        buffer, so the node's other threads (the local reads) never wait while a download copies bytes.
        (obstore's streams hand each piece over as a Python ``bytes`` copied while holding the GIL:
        local reads' p99 during cold archive reads was 2.6 times idle with 256 KiB pieces, more with
        8 MiB ones; bench/bench_archive.py.)"""
        check_name(name)
        for _ in range(_DOWNLOAD_ATTEMPTS - 1):
            with contextlib.suppress(ObjectChanged):
                return self._download(name, path)
        return self._download(name, path)

    def _download(self, name: str, path: str) -> ObjectInfo:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            first = self._piece(name, 0, None)
            if first is None:  # an empty object: no range of it exists
                info = self.head(name)
                if info is None or info.size:  # gone, or written since: read it again
                    raise self._changed(name)
                return info
            size, etag = int(first.meta["size"]), str(first.meta["e_tag"])
            offset = _write_at(fd, self._body(first, name), 0)
            while offset < size:
                piece = self._piece(name, offset, etag)
                if piece is None:  # shorter than its first piece said: replaced meanwhile
                    raise self._changed(name)
                offset = _write_at(fd, self._body(piece, name), offset)
            os.fsync(fd)
        finally:
            os.close(fd)
        return ObjectInfo(name, size, etag)

    def _piece(self, name: str, start: int, etag: str | None) -> obstore.GetResult | None:
        """The GET of the object's piece at ``start`` (of the version ``etag``, when given); None when
        the object ends before ``start`` (HTTP 416)."""
        options: GetOptions = {"range": (start, start + DOWNLOAD_PIECE)}
        if etag is not None:
            options["if_match"] = etag
        try:
            with self._errors("read", name):
                return obstore.get(self._store, name, options=options)
        except ArchiveError as exc:
            if "(HTTP 416)" in str(exc):
                return None
            raise

    def _body(self, result: obstore.GetResult, name: str) -> obstore.Bytes:
        """A GET's body, collected by obstore outside the GIL (no copy into Python)."""
        with self._errors("read", name):
            return result.bytes()

    def head(self, name: str) -> ObjectInfo | None:
        check_name(name)
        try:
            with self._errors("read", name):
                meta = obstore.head(self._store, name)
        except ObjectMissing:
            return None
        return ObjectInfo(name, int(meta["size"]), str(meta["e_tag"]))

    def list(self, folder: str = "") -> list[ObjectInfo]:
        if folder:
            check_name(folder)
        found: list[ObjectInfo] = []
        with self._errors("list", folder or "the bucket"):
            for batch in obstore.list(self._store, prefix=folder or None):
                found.extend(ObjectInfo(m["path"], int(m["size"]), str(m["e_tag"])) for m in batch)
        return sorted(found, key=lambda o: o.name)

    def delete(self, name: str) -> None:
        check_name(name)
        try:
            with self._errors("delete", name):
                obstore.delete(self._store, name)
        except ObjectMissing:
            return


def _write_at(fd: int, data: obstore.Bytes, offset: int) -> int:
    """Write ``data`` (obstore's buffer, not copied) at ``offset``; the offset after it."""
    view = memoryview(data)
    while view:
        done = os.pwrite(fd, view, offset)
        view, offset = view[done:], offset + done
    return offset


def _status(exc: BaseException) -> int | None:
    match = _STATUS.search(str(exc))
    return int(match.group(1)) if match else None


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
