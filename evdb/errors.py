"""evdb's exceptions.

Every error evdb raises on purpose derives from :class:`EvdbError`::

    EvdbError
    ├── InvalidInput                  bad names, sizes, numbers from a caller (HTTP 400)
    │   └── EventTooLarge             an event or a batch exceeds the documented limit
    ├── InvalidOption                 an option has an unknown name, a wrong type or a value out of range
    ├── StreamError                   carries the stream name
    │   ├── WrongExpectedVersion      carries the expected and the current version
    │   ├── StreamDeleted             hard-deleted (tombstoned) stream
    │   └── StreamNotFound            the stream never existed or was soft-deleted
    ├── AccessDenied                  authenticated but not allowed
    ├── NotLeader                     a write reached a node that is not the leader
    ├── StorageError                  the files on disk are not what they should be
    │   ├── CorruptedFile             a checksum or a structure check failed; names the file
    │   └── DatabaseLocked            another process holds the database folder
    ├── ScavengeError
    │   ├── ScavengeAlreadyRunning
    │   └── ScavengeNotFound
    ├── DatabaseClosed                the database was closed while a call was under way
    │   └── DatabaseReopening         a follower is reopening it after cutting a diverged tail
    ├── BackupError                   (evdb.backup.errors) a refused or failed backup, verify or restore
    ├── LicenseError                  (evdb.licensing) missing, malformed, tampered, wrong issuer, expired, not entitled
    └── RedactionError                (evdb.redaction) RedactionRefused: a switch or lookup the node refused
"""

from __future__ import annotations

__all__ = [
    "STATUSES",
    "AccessDenied",
    "CorruptedFile",
    "DatabaseClosed",
    "DatabaseLocked",
    "DatabaseReopening",
    "EvdbError",
    "EventTooLarge",
    "InvalidInput",
    "InvalidOption",
    "NotLeader",
    "ScavengeAlreadyRunning",
    "ScavengeError",
    "ScavengeNotFound",
    "StorageError",
    "StreamDeleted",
    "StreamError",
    "StreamNotFound",
    "WrongExpectedVersion",
    "status_of",
]


class EvdbError(Exception):
    """Base class of every error evdb raises on purpose."""


class InvalidInput(EvdbError):
    """A caller passed a value evdb cannot accept (empty name, negative count, ...)."""


class EventTooLarge(InvalidInput):
    """An event or a batch is larger than the node accepts."""


class InvalidOption(EvdbError):
    """An option is unknown, of the wrong type or out of range."""


class StreamError(EvdbError):
    def __init__(self, stream: str, message: str) -> None:
        super().__init__(message)
        self.stream = stream


class WrongExpectedVersion(StreamError):
    """The stream's current version is not the one the append expected.

    ``current_version`` is -1 when the stream does not exist.
    """

    def __init__(self, stream: str, expected_version: int, current_version: int) -> None:
        super().__init__(
            stream,
            f"Append failed due to WrongExpectedVersion. Stream: {stream}, "
            f"Expected version: {expected_version}, Actual version: {current_version}",
        )
        self.expected_version = expected_version
        self.current_version = current_version


class StreamDeleted(StreamError):
    """The stream was hard-deleted (tombstoned); it can never be written again."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream, f"Event stream '{stream}' is deleted.")


class StreamNotFound(StreamError):
    def __init__(self, stream: str) -> None:
        super().__init__(stream, f"Event stream '{stream}' was not found.")


class AccessDenied(EvdbError):
    pass


class NotLeader(EvdbError):
    def __init__(self, leader_host: str | None = None, leader_port: int | None = None) -> None:
        where = f" Leader is at {leader_host}:{leader_port}." if leader_host else ""
        super().__init__("This node is not the leader." + where)
        self.leader_host = leader_host
        self.leader_port = leader_port


class StorageError(EvdbError):
    pass


class CorruptedFile(StorageError):
    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class DatabaseLocked(StorageError):
    pass


class ScavengeError(EvdbError):
    pass


class ScavengeAlreadyRunning(ScavengeError):
    def __init__(self) -> None:
        super().__init__("Scavenge is already running")


class ScavengeNotFound(ScavengeError):
    def __init__(self) -> None:
        super().__init__("Scavenge Id does not exist")


class DatabaseClosed(EvdbError):
    def __init__(self, message: str = "The database is closed.") -> None:
        super().__init__(message)


class DatabaseReopening(DatabaseClosed):
    """The node has no open database for a moment: a follower cutting a diverged tail closes and
    reopens it. Not a fault: the client tries again (HTTP 503 with Retry-After, gRPC UNAVAILABLE)."""

    MESSAGE = "The node is reopening its database; try again in a moment."

    def __init__(self) -> None:
        super().__init__(self.MESSAGE)


#: The one table of what each error answers: its HTTP status and its gRPC status name, most specific
#: first. evdb/http/app.py and evdb/grpc/common.py both read it (bodies and headers stay theirs).
STATUSES: tuple[tuple[type[EvdbError], int, str], ...] = (
    (WrongExpectedVersion, 400, "FAILED_PRECONDITION"),
    (StreamDeleted, 410, "FAILED_PRECONDITION"),
    (StreamNotFound, 404, "NOT_FOUND"),
    (InvalidInput, 400, "INVALID_ARGUMENT"),  # EventTooLarge too
    (ScavengeAlreadyRunning, 400, "FAILED_PRECONDITION"),
    (ScavengeNotFound, 404, "NOT_FOUND"),
    (AccessDenied, 403, "PERMISSION_DENIED"),
    (NotLeader, 503, "UNAVAILABLE"),
    (DatabaseClosed, 503, "UNAVAILABLE"),
)


def status_of(exc: BaseException) -> tuple[int, str] | None:
    """``(HTTP status, gRPC status name)`` of an evdb error from :data:`STATUSES`; None: unexpected."""
    for kind, http, grpc in STATUSES:
        if isinstance(exc, kind):
            return http, grpc
    return None
