"""Redaction: the node's unix-socket RPC service and the ``evdb-redact`` tool.

See protocol.py for the calls, switch.py for the node's checks, rewrite.py for how a chunk copy is
redacted, and tool.py for the command.
"""

from __future__ import annotations

from evdb.redaction.protocol import (
    SOCKET_NAME,
    SWITCH_ERRORS,
    RedactionClient,
    RedactionError,
    RedactionRefused,
    socket_path,
)
from evdb.redaction.service import RedactionService, start_redaction_service

__all__ = [
    "SOCKET_NAME",
    "SWITCH_ERRORS",
    "RedactionClient",
    "RedactionError",
    "RedactionRefused",
    "RedactionService",
    "socket_path",
    "start_redaction_service",
]
