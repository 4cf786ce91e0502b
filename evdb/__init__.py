"""evdb: an event database server with first-class maintenance tooling.

The public surface for code that embeds evdb (tests, tools); everything else is internal.
"""

from typing import TYPE_CHECKING

from evdb.lazy import lazy_getattr

if TYPE_CHECKING:
    from evdb.clock import Clock, ManualClock, SystemClock
    from evdb.database import Database, DatabaseConfig
    from evdb.errors import (
        AccessDenied,
        CorruptedFile,
        DatabaseClosed,
        DatabaseLocked,
        EvdbError,
        EventTooLarge,
        InvalidInput,
        InvalidOption,
        NotLeader,
        ScavengeAlreadyRunning,
        ScavengeError,
        ScavengeNotFound,
        StorageError,
        StreamDeleted,
        StreamError,
        StreamNotFound,
        WrongExpectedVersion,
    )
    from evdb.node import Node
    from evdb.options import Options, load_options
    from evdb.storage.records import EventRecord
    from evdb.streams import ANY, NO_STREAM, STREAM_EXISTS, AppendResult, NewEvent, StreamMetadata

#: where each public name lives: imported on first use, so a command such as ``evdb backup`` does not
#: pay for the node's modules (aiohttp, numpy, the index) it never touches
_LAZY = {
    "Clock": "evdb.clock",
    "ManualClock": "evdb.clock",
    "SystemClock": "evdb.clock",
    "Database": "evdb.database",
    "DatabaseConfig": "evdb.database",
    "AccessDenied": "evdb.errors",
    "CorruptedFile": "evdb.errors",
    "DatabaseClosed": "evdb.errors",
    "DatabaseLocked": "evdb.errors",
    "EvdbError": "evdb.errors",
    "EventTooLarge": "evdb.errors",
    "InvalidInput": "evdb.errors",
    "InvalidOption": "evdb.errors",
    "NotLeader": "evdb.errors",
    "ScavengeAlreadyRunning": "evdb.errors",
    "ScavengeError": "evdb.errors",
    "ScavengeNotFound": "evdb.errors",
    "StorageError": "evdb.errors",
    "StreamDeleted": "evdb.errors",
    "StreamError": "evdb.errors",
    "StreamNotFound": "evdb.errors",
    "WrongExpectedVersion": "evdb.errors",
    "Node": "evdb.node",
    "Options": "evdb.options",
    "load_options": "evdb.options",
    "EventRecord": "evdb.storage.records",
    "ANY": "evdb.streams",
    "AppendResult": "evdb.streams",
    "NO_STREAM": "evdb.streams",
    "NewEvent": "evdb.streams",
    "STREAM_EXISTS": "evdb.streams",
    "StreamMetadata": "evdb.streams",
}


__getattr__ = lazy_getattr(__name__, _LAZY)


__version__ = "0.1.0"

__all__ = [
    "ANY",
    "NO_STREAM",
    "STREAM_EXISTS",
    "AccessDenied",
    "AppendResult",
    "Clock",
    "CorruptedFile",
    "Database",
    "DatabaseClosed",
    "DatabaseConfig",
    "DatabaseLocked",
    "EvdbError",
    "EventRecord",
    "EventTooLarge",
    "InvalidInput",
    "InvalidOption",
    "ManualClock",
    "NewEvent",
    "Node",
    "NotLeader",
    "Options",
    "ScavengeAlreadyRunning",
    "ScavengeError",
    "ScavengeNotFound",
    "StorageError",
    "StreamDeleted",
    "StreamError",
    "StreamMetadata",
    "StreamNotFound",
    "SystemClock",
    "WrongExpectedVersion",
    "load_options",
]
