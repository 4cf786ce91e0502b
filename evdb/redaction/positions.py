"""The node's side of redaction's first call: every place the log stores an event (getEventPositions),
locally and, for chunks the archive holds, there (evdb/redaction/archived.py).

It runs in a worker thread with the log's chunk lock held by the caller (see service.py).
"""

from __future__ import annotations

from evdb.index.hashing import stream_hash
from evdb.redaction.archived import archived_positions
from evdb.storage import records as rec
from evdb.storage.log import TransactionLog

__all__ = ["event_positions"]


def event_positions(db, stream: str, event_number: int) -> list[dict]:
    """Every place the log stores event ``event_number`` of ``stream`` (deleted or expired included:
    redaction is about the bytes on disk, not about what reads show)."""
    log: TransactionLog = db.log
    out: list[dict] = []
    archived: list[int] = []  # positions whose chunk the archive may hold (evdb/redaction/archived.py)
    for position in db.index.get(stream_hash(stream), event_number):
        record = log.read_record(position)
        if not isinstance(record, rec.EventRecord) or record.stream != stream:
            continue  # another stream with the same hash
        if record.event_number != event_number:
            continue
        chunk = log.chunk_for(position)
        offset = chunk.physical_offset(position) if chunk is not None else None
        if chunk is None or offset is None:
            if log.is_archived_only(position):  # in the archive only: listed below
                archived.append(position)
            continue
        archived.append(position)  # a local chunk the archive holds a copy of too (listed below)
        out.append(
            {
                "logPosition": position,
                "chunkFile": chunk.file_name,
                "chunkVersion": chunk.version,
                "chunkComplete": chunk.is_completed,
                "chunkEventOffset": offset,
            }
        )
    return out + archived_positions(log, archived)
