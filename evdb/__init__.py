"""evdb: an event database server with first-class maintenance tooling.

The public surface for code that embeds evdb (tests, tools); everything else is internal.
"""

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
