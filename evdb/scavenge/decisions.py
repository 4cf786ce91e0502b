"""Per-record decisions of the execution phases, from the rows calculation saved."""

from __future__ import annotations

from evdb.clock import TICKS_PER_SECOND
from evdb.scavenge.accumulator import MAX_AGE_SECONDS
from evdb.scavenge.point import ScavengePoint
from evdb.scavenge.state import StreamRow
from evdb.storage.records import MAX_EVENT_NUMBER, EventRecord
from evdb.streams import is_metastream

__all__ = ["Decider"]


class Decider:
    """Says whether a record (in a chunk) or an index entry is removed by this scavenge."""

    def __init__(
        self, rows: dict[str, StreamRow], point: ScavengePoint, unsafe_ignore_hard_delete: bool
    ) -> None:
        self.rows = rows
        self.point = point
        self.unsafe = unsafe_ignore_hard_delete
        self._cutoffs = {
            name: point.effective_now - row.max_age * TICKS_PER_SECOND
            for name, row in rows.items()
            # an age too long to count in ticks (saved by an older version) is no limit
            if row.max_age is not None and row.max_age <= MAX_AGE_SECONDS and not is_metastream(name)
        }

    def discard_record(self, record) -> bool:
        """Chunk execution: discard points, tombstones, and ``$maxAge`` by the record's own time."""
        if type(record) is not EventRecord or record.log_position >= self.point.position:
            return False
        row = self.rows.get(record.stream)
        if row is None:
            return False
        number = record.event_number
        if number == MAX_EVENT_NUMBER:
            return self.unsafe
        if number < row.discard_point:
            return True
        cutoff = self._cutoffs.get(record.stream)
        return cutoff is not None and number != row.last_number and record.timestamp < cutoff

    def discard_entry(self, stream: str, number: int, position: int) -> bool:
        """Index execution: discard points and tombstones only (calculation moves a discard point
        past the ``$maxAge`` removals up to the first event that stays; an expired entry above it
        stays, and reads check the age of what they find)."""
        if position >= self.point.position:
            return False
        row = self.rows.get(stream)
        if row is None:
            return False
        if number == MAX_EVENT_NUMBER:
            return self.unsafe and row.tombstoned
        return number < row.discard_point
