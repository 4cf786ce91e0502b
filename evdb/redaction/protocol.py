"""The redaction RPC: JSON lines over a unix domain socket in the database folder.

The node listens on ``<Db>/evdb.sock`` (mode 0600; only a peer running as the node's user, or root,
is served). A connection is a *session*. Each request is one line holding a JSON object with a
``call``; each answer is one line holding ``{"ok": true, ...}`` or
``{"ok": false, "error": "<Code>", "message": "<text>"}``. The calls:

``lockChunks``
    Take the node's chunk lock and hold it until ``unlockChunks`` or the end of the connection, so
    that no scavenge or merge switches a chunk meanwhile (a scavenge that reaches its switch waits).
``getEventPositions`` ``{"stream": "orders", "eventNumber": 3}``
    ``positions``: every place the event is stored, each ``{"logPosition", "chunkFile",
    "chunkVersion", "chunkComplete", "chunkEventOffset"}`` (the physical offset of its record
    after the chunk header). Error ``EventNotFound`` when the log holds no such event,
    ``SystemStream`` for an event of a system stream (never redacted, see rules.py).
``switchChunk`` ``{"targetChunkFile": "chunk-000001.000000", "newChunkFile": "x.redact.tmp"}``
    Validate the new file and make it the live version of the target's chunks (``chunkFile``: its
    final name). Each failed check has its own error code (:data:`SWITCH_ERRORS`).
``unlockChunks``
    Release the chunk lock.

``getEventPositions`` and ``switchChunk`` take the chunk lock for the call when the session does not
hold it already. Every call is refused with ``NotLicensed`` unless the node has a valid licence with
the ``REDACTION`` entitlement.
"""

from __future__ import annotations

import json
import os
import socket
from typing import Any

from evdb.errors import EvdbError

__all__ = [
    "MAX_LINE",
    "SOCKET_NAME",
    "SWITCH_ERRORS",
    "RedactionClient",
    "RedactionError",
    "RedactionRefused",
    "bind_path",
    "socket_path",
]

SOCKET_NAME = "evdb.sock"
MAX_LINE = 64 * 1024

#: The error codes of ``switchChunk``, one per check, in the order they are made.
SWITCH_ERRORS = {
    "InvalidFileName": "a file name is empty or holds '/', '\\' or '..'",
    "TargetNotAChunkFile": "the target file name is not a chunk file name (chunk-NNNNNN.VVVVVV)",
    "NewChunkFileNotTmp": "the new file's name does not end in .tmp",
    "TargetChunkFileNotFound": "the target file is not in the database folder",
    "NewChunkFileNotFound": "the new file is not in the database folder",
    "TargetChunkNotInUse": "the target file is not the chunk in use for its chunk number",
    "TargetChunkNotCompleted": "the target chunk is the active chunk (not completed)",
    "NewChunkHeaderInvalid": "the new file's chunk header does not parse",
    "NewChunkNotCompleted": "the new file has no footer (not a completed chunk)",
    "NewChunkFooterInvalid": "the new file's footer does not parse or disagrees with its size",
    "ChunkRangeMismatch": "the new chunk covers other chunk numbers than the target",
    "ChunkSizeMismatch": "the new chunk was made for another ChunkSize",
    "NewChunkVersionTooLow": "the new chunk's version is not above the target's",
    "NewChunkChecksumMismatch": "the new file's checksum does not verify",
    "NewChunkVersionInUse": "a file with the new chunk's final name exists already",
    "NewChunkRecordsInvalid": "the new file's records do not parse",
    "NewChunkRedactsSystemStream": "the new file redacts an event of a system stream ($-name)",
}


class RedactionError(EvdbError):
    """A redaction call failed; ``code`` is the RPC error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class RedactionRefused(RedactionError):
    """The node answered a call with an error."""


def socket_path(db_dir: str) -> str:
    return os.path.join(db_dir, SOCKET_NAME)


def bind_path(path: str, dir_fd: int | None = None) -> str:
    """The address to bind or connect to for ``path``.

    A unix socket address holds at most 107 bytes; for a longer path, an open descriptor of its
    folder is used through ``/proc/self/fd`` (Linux), which has no such limit.
    """
    if len(os.fsencode(path)) < 100 or dir_fd is None:
        return path
    return f"/proc/self/fd/{dir_fd}/{os.path.basename(path)}"


class RedactionClient:
    """A blocking client of the node's redaction socket (one session)."""

    def __init__(self, path: str, timeout: float = 600.0) -> None:
        self.path = path
        self._dir_fd: int | None = None
        self._file: Any = None
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(timeout)
        try:
            if len(os.fsencode(path)) >= 100 and os.path.isdir("/proc/self/fd"):
                self._dir_fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
            self._sock.connect(bind_path(path, self._dir_fd))
        except BaseException:
            self.close()
            raise
        self._file = self._sock.makefile("rb")

    def call(self, call: str, **fields: Any) -> dict:
        """Send one request and return the answer; RedactionRefused when the node answers an error."""
        self.send(call, **fields)
        return self.receive()

    def send(self, call: str, **fields: Any) -> None:
        self._sock.sendall(json.dumps({"call": call, **fields}).encode() + b"\n")

    def receive(self) -> dict:
        line = self._file.readline(MAX_LINE + 1)
        if not line:
            raise RedactionError("ConnectionClosed", "the node closed the redaction connection")
        answer = json.loads(line)
        if not answer.get("ok"):
            raise RedactionRefused(str(answer.get("error")), str(answer.get("message")))
        return answer

    def close(self) -> None:
        try:
            if self._file is not None:
                self._file.close()
            self._sock.close()
        finally:
            if self._dir_fd is not None:
                os.close(self._dir_fd)
                self._dir_fd = None

    def __enter__(self) -> RedactionClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
