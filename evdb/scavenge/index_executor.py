"""Index execution: rewrite the index without the entries of removed events.

Entries are judged in bulk with numpy: for streams whose hash no other stream shares, by comparing
each entry's event number with its stream's discard point; for hashes that collide, by reading the
record's stream name (an entry whose record a scavenge already removed goes too)."""

from __future__ import annotations

import numpy as np

from evdb.index.hashing import stream_hash
from evdb.scavenge.decisions import Decider
from evdb.scavenge.run import RunContext
from evdb.storage.records import MAX_EVENT_NUMBER, EventRecord

__all__ = ["execute_index", "index_keep_function"]


def index_keep_function(ctx: RunContext, decider: Decider):
    collided = ctx.state.collided_streams()
    collided_hashes = np.array(sorted(set(collided.values())), dtype=np.uint64)
    affected = [
        (stream_hash(name), row.discard_point, row.tombstoned)
        for name, row in decider.rows.items()
        if name not in collided and (row.discard_point > 0 or (decider.unsafe and row.tombstoned))
    ]
    affected.sort()
    aff_hash = np.array([a[0] for a in affected], dtype=np.uint64)
    aff_point = np.array([a[1] for a in affected], dtype=np.int64)
    aff_tomb = np.array([a[2] for a in affected], dtype=bool)
    limit = ctx.point.position
    log = ctx.db.log

    def keep(hashes: np.ndarray, numbers: np.ndarray, positions: np.ndarray) -> np.ndarray:
        hashes = hashes.astype(np.uint64, copy=False)
        discard = np.zeros(len(hashes), dtype=bool)
        before = positions < limit
        if len(aff_hash):
            j = np.searchsorted(aff_hash, hashes)
            j[j >= len(aff_hash)] = 0
            matched = (aff_hash[j] == hashes) & before
            discard |= matched & (numbers < aff_point[j])
            if decider.unsafe:
                discard |= matched & (numbers == MAX_EVENT_NUMBER) & aff_tomb[j]
        if len(collided_hashes):
            for i in np.nonzero(np.isin(hashes, collided_hashes) & before)[0]:
                record = log.read_record(int(positions[i]))
                if type(record) is not EventRecord:
                    discard[i] = True  # its record is gone
                else:
                    discard[i] = decider.discard_entry(record.stream, int(numbers[i]), int(positions[i]))
        return ~discard

    return keep


def execute_index(ctx: RunContext, decider: Decider) -> None:
    result = ctx.db.index.scavenge(index_keep_function(ctx, decider))
    for table in getattr(result, "tables", []) or []:
        deleted = getattr(table, "entries_deleted", 0)
        ctx.progress.index_entries_removed += deleted
        ctx.progress.bytes_reclaimed += max(0, getattr(table, "space_saved", 0))
        ctx.emit.index_completed(
            getattr(table, "level", 0),
            getattr(table, "index", 0),
            getattr(table, "time_taken", 0.0),
            deleted,
            getattr(table, "entries_kept", 0),
            getattr(table, "space_saved", 0),
            True,
            "",
        )
    ctx.db.forget_stream_states()
