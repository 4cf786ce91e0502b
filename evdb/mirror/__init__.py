"""Primary/secondary through a durable subscription: ``evdb mirror`` (see mirror.py)."""

from evdb.mirror.mirror import Endpoint, Mirror, MirrorError, MirrorSettings, is_primary_own_stream
from evdb.mirror.state import Checkpoint, CheckpointError, MirrorPaths

__all__ = [
    "Checkpoint",
    "CheckpointError",
    "Endpoint",
    "Mirror",
    "MirrorError",
    "MirrorPaths",
    "MirrorSettings",
    "is_primary_own_stream",
]
