"""evdb's exceptions.

Every error evdb raises on purpose derives from :class:`EvdbError`::

    EvdbError
    ├── InvalidInput                  bad names, sizes, numbers from a caller (HTTP 400)
    │   ├── EventTooLarge             an event or a batch exceeds the documented limit
    │   ├── BodyTooLarge              a request body inflates past the largest the node reads (413)
    │   └── UnsupportedContentEncoding  a request body's Content-Encoding is not inflated here (415)
    ├── InvalidOption                 an option has an unknown name, a wrong type or a value out of range
    ├── StreamError                   carries the stream name
    │   ├── WrongExpectedVersion      carries the expected and the current version
    │   ├── StreamDeleted             hard-deleted (tombstoned) stream
    │   └── StreamNotFound            the stream never existed or was soft-deleted
    ├── AccessDenied                  authenticated but not allowed
    ├── NotLeader                     a write reached a node that is not the leader
    ├── StorageError                  the files on disk are not what they should be
    │   ├── CorruptedFile             a checksum or a structure check failed; names the file
    │   ├── DiskFull                  no room to open the database (ENOSPC at start); names the file
    │   └── DatabaseLocked            another process holds the database folder
    ├── ScavengeError
    │   ├── ScavengeAlreadyRunning
    │   └── ScavengeNotFound
    ├── DatabaseClosed                the database was closed while a call was under way
    │   └── DatabaseReopening         a follower is reopening it after cutting a diverged tail
    ├── BackupError                   (evdb.backup.errors) a refused or failed backup, verify or restore
    ├── ArchiveError                  the archive (object storage) refused or failed a request; names the store
    │   └── ArchiveUnavailable        the archive cannot be reached, is too slow or answers 5xx (503)
    ├── LicenseError                  (evdb.licensing) missing, malformed, tampered, wrong issuer, expired, not entitled
    ├── PersistentSubscriptionError   carries the stream and the group (evdb.persistent)
    │   ├── PersistentSubscriptionNotFound, PersistentSubscriptionExists, PersistentSubscriptionFailed
    │   └── MaximumSubscribersReached, PersistentSubscriptionDropped
    ├── PersistentSubscriptionsNotReady  the node does not serve persistent subscriptions (not the leader)
    ├── ProjectionsNotReady           the leader has not loaded the system projections yet (503)
    ├── ProjectionError               (evdb.projections) carries the projection's name
    │   ├── ProjectionNotFound, ProjectionOperationFailed
    │   └── UserProjectionsNotSupported  user-defined (JavaScript) projections: evdb runs only the system ones
    └── RedactionError                (evdb.redaction) RedactionRefused: a switch or lookup the node refused
"""

from __future__ import annotations

import errno
from typing import ClassVar

# every name here not starting with an underscore is public (no __all__ to keep in step)


class EvdbError(Exception):
    """Base class of every error evdb raises on purpose."""

    #: KurrentDB's gRPC ``exception`` trailer for this error (its clients pick their error class from
    #: it), None: KurrentDB sends none. :func:`trailers_of` adds :meth:`trailer_fields`.
    exception: ClassVar[str | None] = None

    def trailer_fields(self) -> dict[str, str]:
        """The facts KurrentDB's trailers carry beside ``exception`` (``stream-name``, ...)."""
        return {}


class InvalidInput(EvdbError):
    """A caller passed a value evdb cannot accept (empty name, negative count, ...)."""


class EventTooLarge(InvalidInput):
    """An event or a batch is larger than the node accepts; ``limit``: MaxAppendSize when known."""

    exception = "maximum-append-size-exceeded"

    def __init__(self, message: str, limit: int | None = None) -> None:
        super().__init__(message)
        self.limit = limit

    def trailer_fields(self) -> dict[str, str]:
        return {} if self.limit is None else {"maximum-append-size": str(self.limit)}


class BodyTooLarge(InvalidInput):
    """A request body (inflated from its Content-Encoding) is larger than the node reads
    (evdb/http/bodies.py)."""


class UnsupportedContentEncoding(InvalidInput):
    """A request body's Content-Encoding is one the node does not inflate."""


class InvalidOption(EvdbError):
    """An option is unknown, of the wrong type or out of range."""


class StreamError(EvdbError):
    def __init__(self, stream: str, message: str) -> None:
        super().__init__(message)
        self.stream = stream

    def trailer_fields(self) -> dict[str, str]:
        return {"stream-name": self.stream}


class WrongExpectedVersion(StreamError):
    """The stream's current version is not the one the append (or delete: ``operation``) expected.

    ``current_version`` is -1 when the stream does not exist.
    """

    exception = "wrong-expected-version"

    def __init__(
        self, stream: str, expected_version: int, current_version: int, operation: str = "Append"
    ) -> None:
        super().__init__(
            stream,
            f"{operation} failed due to WrongExpectedVersion. Stream: {stream}, "
            f"Expected version: {expected_version}, Actual version: {current_version}",
        )
        self.expected_version = expected_version
        self.current_version = current_version

    def trailer_fields(self) -> dict[str, str]:
        return {
            "stream-name": self.stream,
            "expected-version": str(self.expected_version),
            "actual-version": str(self.current_version),
        }


class StreamDeleted(StreamError):
    """The stream was hard-deleted (tombstoned); it can never be written again."""

    exception = "stream-deleted"

    def __init__(self, stream: str) -> None:
        super().__init__(stream, f"Event stream '{stream}' is deleted.")


class StreamNotFound(StreamError):
    exception = "stream-not-found"

    def __init__(self, stream: str) -> None:
        super().__init__(stream, f"Event stream '{stream}' was not found.")


class AccessDenied(EvdbError):
    exception = "access-denied"


class NotLeader(EvdbError):
    exception = "not-leader"

    def __init__(self, leader_host: str | None = None, leader_port: int | None = None) -> None:
        where = f" Leader is at {leader_host}:{leader_port}." if leader_host else ""
        super().__init__("This node is not the leader." + where)
        self.leader_host = leader_host
        self.leader_port = leader_port

    def trailer_fields(self) -> dict[str, str]:
        if not self.leader_host or self.leader_port is None:
            return {}
        return {"leader-endpoint-host": self.leader_host, "leader-endpoint-port": str(self.leader_port)}


class StorageError(EvdbError):
    pass


class DiskFull(StorageError):
    """The disk holding ``path`` has no room for what opening the database must write or allocate
    (``reason``: the system's words, e.g. No space left on device)."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(
            f"{path}: the disk is full ({reason}); free space on it (or move the database) and start "
            "the node again"
        )
        self.path = path
        self.reason = reason


class CorruptedFile(StorageError):
    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class DatabaseLocked(StorageError):
    pass


class ScavengeError(EvdbError):
    pass


class JobConflict(EvdbError):
    """A maintenance job that must not overlap one running now (a file-copy backup while a scavenge
    runs): refused at once, changing nothing."""


class ScavengeAlreadyRunning(ScavengeError):
    def __init__(self) -> None:
        super().__init__("Scavenge is already running")


class ScavengeNotFound(ScavengeError):
    exception = "scavenge-not-found"

    def __init__(self, scavenge_id: str = "") -> None:
        super().__init__("Scavenge Id does not exist")
        self.scavenge_id = scavenge_id

    def trailer_fields(self) -> dict[str, str]:
        return {"scavenge-id": self.scavenge_id}


class DatabaseClosed(EvdbError):
    def __init__(self, message: str = "The database is closed.") -> None:
        super().__init__(message)


class DatabaseReopening(DatabaseClosed):
    """The node has no open database for a moment: a follower cutting a diverged tail closes and
    reopens it. Not a fault: the client tries again (HTTP 503 with Retry-After, gRPC UNAVAILABLE)."""

    MESSAGE = "The node is reopening its database; try again in a moment."

    def __init__(self) -> None:
        super().__init__(self.MESSAGE)


class UsersNotReady(EvdbError):
    """No user was ever written to this node's database (a fresh cluster's follower before the
    leader's default users reach it, a node before it creates them): no credentials can be judged,
    right or wrong; also a cluster member without a current sign-in lease (evdb/cluster/lease.py). Not a
    fault: the client tries again (HTTP 503 with Retry-After, gRPC UNAVAILABLE)."""

    #: seconds an HTTP client is told to wait (Retry-After)
    retry_after = 1

    def __init__(self, message: str = "The node has no users yet; try again in a moment.") -> None:
        super().__init__(message)


class ArchiveError(EvdbError):
    """The archive (object storage, evdb/archive) refused or failed a request; the message names the
    store (``s3://bucket`` or the folder) and the object."""


class ArchiveUnavailable(ArchiveError):
    """The archive cannot be reached, timed out or answered a server error: a read that needs it gets
    this (HTTP 503, gRPC UNAVAILABLE), never other data; the archiver retries with backoff."""

    #: seconds an HTTP client is told to wait (Retry-After)
    retry_after = 1


class PersistentSubscriptionError(EvdbError):
    """A persistent subscription group's failure, with KurrentDB's message (and gRPC trailers)."""

    #: the gRPC ``exception`` trailer KurrentDB sends with it
    exception = "persistent-subscription-failed"

    def __init__(self, stream: str, group: str, message: str) -> None:
        super().__init__(message)
        self.stream = stream
        self.group = group

    def trailer_fields(self) -> dict[str, str]:
        return {"stream-name": self.stream, "group-name": self.group}


class PersistentSubscriptionNotFound(PersistentSubscriptionError):
    exception = "persistent-subscription-does-not-exist"

    def __init__(self, stream: str, group: str) -> None:
        super().__init__(stream, group, f"Subscription group {group} on stream {stream} does not exist.")


class PersistentSubscriptionExists(PersistentSubscriptionError):
    exception = "persistent-subscription-exists"

    def __init__(self, stream: str, group: str) -> None:
        super().__init__(stream, group, f"Subscription group {group} on stream {stream} exists.")


class PersistentSubscriptionFailed(PersistentSubscriptionError):
    """Refused settings or a request the group cannot take; ``reason`` is KurrentDB's."""

    def __init__(self, stream: str, group: str, reason: str) -> None:
        super().__init__(stream, group, f"Subscription group {group} on stream {stream} failed: '{reason}'")
        self.reason = reason

    def trailer_fields(self) -> dict[str, str]:
        return {**super().trailer_fields(), "reason": self.reason}


class MaximumSubscribersReached(PersistentSubscriptionError):
    exception = "maximum-subscribers-reached"

    def __init__(self, stream: str, group: str) -> None:
        super().__init__(
            stream, group, f"Maximum subscriptions reached for subscription group {group} on stream {stream}."
        )


class PersistentSubscriptionDropped(PersistentSubscriptionError):
    """The group dropped its consumer (deleted, updated, restarted, the node stepped down)."""

    exception = "persistent-subscription-dropped"

    def __init__(self, stream: str, group: str) -> None:
        super().__init__(stream, group, f"Subscription group {group} on stream {stream} was dropped.")


class PersistentSubscriptionsNotReady(EvdbError):
    """Persistent subscriptions are served by the leader only, once it has loaded them."""

    def __init__(self) -> None:
        super().__init__("Server Is Not Ready")


class ProjectionsNotReady(EvdbError):
    """This node is the leader but has not loaded the system projections yet (it just took office): not
    a redirect to another node, a moment's wait (HTTP 503 with Retry-After, gRPC UNAVAILABLE, which
    clients retry)."""

    #: seconds an HTTP client is told to wait (Retry-After)
    retry_after = 1

    def __init__(self) -> None:
        super().__init__("Server Is Not Ready: the system projections are starting on this leader")


class ProjectionError(EvdbError):
    """A projections management call that failed, naming the projection."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name


class ProjectionNotFound(ProjectionError):
    def __init__(self, name: str) -> None:
        super().__init__(name, f"Projection '{name}' not found")


class ProjectionOperationFailed(ProjectionError):
    """KurrentDB's ``OperationFailed`` (HTTP 500 "Failed", gRPC FAILED_PRECONDITION), with its reason."""


class UserProjectionsNotSupported(ProjectionError):
    """Creating, updating or deleting a user-defined (JavaScript) projection: evdb runs only the system
    projections (HTTP 501, gRPC UNIMPLEMENTED: what a client reports as "not supported")."""

    def __init__(self, name: str) -> None:
        super().__init__(
            name,
            "User-defined (JavaScript) projections are not supported: evdb runs only the system projections "
            "($streams, $stream_by_category, $by_category, $by_event_type, $by_correlation_id).",
        )


#: The one table of what each error answers: its HTTP status and its gRPC status name, most specific
#: first. evdb/http/app.py and evdb/grpc/errors.py both read it (bodies and headers stay theirs); a gRPC
#: answer also carries the error's KurrentDB trailers (each class's ``exception``: :func:`trailers_of`).
STATUSES: tuple[tuple[type[EvdbError], int, str], ...] = (
    (WrongExpectedVersion, 400, "FAILED_PRECONDITION"),
    (StreamDeleted, 410, "FAILED_PRECONDITION"),
    (StreamNotFound, 404, "NOT_FOUND"),
    (BodyTooLarge, 413, "RESOURCE_EXHAUSTED"),
    (UnsupportedContentEncoding, 415, "INVALID_ARGUMENT"),
    (InvalidInput, 400, "INVALID_ARGUMENT"),  # EventTooLarge too
    (ScavengeAlreadyRunning, 400, "FAILED_PRECONDITION"),
    (JobConflict, 409, "FAILED_PRECONDITION"),
    (ScavengeNotFound, 404, "NOT_FOUND"),
    (AccessDenied, 403, "PERMISSION_DENIED"),
    (NotLeader, 503, "UNAVAILABLE"),
    (PersistentSubscriptionNotFound, 404, "NOT_FOUND"),
    (PersistentSubscriptionExists, 409, "ALREADY_EXISTS"),
    (MaximumSubscribersReached, 400, "FAILED_PRECONDITION"),
    (PersistentSubscriptionDropped, 410, "CANCELLED"),
    (PersistentSubscriptionFailed, 400, "INTERNAL"),  # KurrentDB: HTTP 400, gRPC Internal
    (PersistentSubscriptionsNotReady, 503, "UNAVAILABLE"),
    (ProjectionsNotReady, 503, "UNAVAILABLE"),
    (ProjectionNotFound, 404, "NOT_FOUND"),
    (UserProjectionsNotSupported, 501, "UNIMPLEMENTED"),
    (ProjectionOperationFailed, 500, "FAILED_PRECONDITION"),  # KurrentDB: HTTP 500 "Failed"
    (DatabaseClosed, 503, "UNAVAILABLE"),
    (UsersNotReady, 503, "UNAVAILABLE"),
    (ArchiveUnavailable, 503, "UNAVAILABLE"),
    (DiskFull, 507, "RESOURCE_EXHAUSTED"),
)


#: the errnos of a node out of a resource, as HTTP status and gRPC status name: a full disk is 507
#: (the write was not written), no file descriptor left is 503 (a moment's overload: try again)
RESOURCE_ERRNOS: dict[int, tuple[int, str]] = {
    errno.ENOSPC: (507, "RESOURCE_EXHAUSTED"),
    errno.EDQUOT: (507, "RESOURCE_EXHAUSTED"),
    errno.EMFILE: (503, "UNAVAILABLE"),
    errno.ENFILE: (503, "UNAVAILABLE"),
}


def resource_status(exc: BaseException) -> tuple[int, str, str] | None:
    """``(HTTP status, gRPC status name, message)`` of an OSError that says the node ran out of a
    resource (:data:`RESOURCE_ERRNOS`); None for any other error."""
    if not isinstance(exc, OSError) or exc.errno not in RESOURCE_ERRNOS:
        return None
    http, grpc = RESOURCE_ERRNOS[exc.errno]
    if http == 507:
        message = f"The node's disk is full ({exc.strerror}): the write was not written."
    else:
        message = f"The node is out of file descriptors ({exc.strerror}); try again in a moment."
    return http, grpc, message


def status_of(exc: BaseException) -> tuple[int, str] | None:
    """``(HTTP status, gRPC status name)`` of an evdb error from :data:`STATUSES`; None: unexpected."""
    for kind, http, grpc in STATUSES:
        if isinstance(exc, kind):
            return http, grpc
    return None


def trailers_of(exc: BaseException) -> dict[str, str]:
    """KurrentDB's gRPC trailing metadata for an error (its RpcExceptions): ``exception`` and the
    facts beside it; empty for an error KurrentDB sends without them."""
    if not isinstance(exc, EvdbError) or exc.exception is None:
        return {}
    return {"exception": exc.exception, **exc.trailer_fields()}
