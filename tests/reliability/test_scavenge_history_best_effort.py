"""A scavenge whose history cannot be written still runs to its end.

Found by bench/soak_cluster.py with auto-scavenge: on a cluster member that had just lost its leader,
writing ``$scavengeStarted`` (or a ``$scavengeChunksCompleted``) raised NotLeader, and the scavenge
died ("the scavenge thread failed", no completion, its ``running`` mark left set) or ended Errored
"This node is not the leader." halfway through its chunks. KurrentDB writes that history best effort
(its scavenge log never fails the scavenge); so does evdb now (evdb/scavenge/events.py).
"""

from __future__ import annotations

import logging
import uuid

import pytest

from evdb.clock import SystemClock
from evdb.database import Database
from evdb.errors import NotLeader, StreamDeleted, StreamNotFound
from evdb.scavenge.service import ScavengeRequest, ScavengeService
from evdb.streams import NewEvent


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def db(tmp_path):
    database = Database.open(
        str(tmp_path / "db"), chunk_size=64 * 1024, existence_filter_capacity=10_000, max_memtable_entries=64
    )
    yield database
    database.close()


def _no_leader_for_the_history(db: Database) -> None:
    """Appends to the scavenge's own streams fail as they do on a member without a leader."""
    append = db.append

    def append_or_not_leader(stream, events, *a, **kw):
        if stream.lstrip("$").startswith("scavenges"):
            raise NotLeader()
        return append(stream, events, *a, **kw)

    db.append = append_or_not_leader


def test_a_scavenge_without_a_leader_for_its_history_ends_success(db, tmp_path):
    ids = [uuid.uuid4() for _ in range(40)]
    db.append("doomed", [NewEvent("D", b"x" * 1000, event_id=i) for i in ids])
    db.delete_stream("doomed", hard=True)
    db.append("kept", [NewEvent("K", b"k")])
    db.call_in_writer(lambda ctx: ctx.complete_active_chunk())
    _no_leader_for_the_history(db)
    logger = logging.getLogger("test.scavenge.history")
    capture = _Capture()
    logger.addHandler(capture)
    logger.setLevel(logging.INFO)
    service = ScavengeService(
        db,
        clock=SystemClock(),
        state_path=ScavengeService.state_path_for(str(tmp_path / "db" / "index")),
        logger=logger,
    )
    try:
        scavenge_id = service.start(ScavengeRequest())
        assert service.wait(30)
        assert service.last() == (scavenge_id, "Success"), capture.messages
        assert not any("thread failed" in m for m in capture.messages)
        assert any("could not write $scavengeStarted" in m for m in capture.messages), capture.messages
        assert any("could not write $scavengeCompleted" in m for m in capture.messages)
        assert service.state.checkpoint().get("running") is None  # nothing left to mark Interrupted
    finally:
        service.close()
        logger.removeHandler(capture)
    removed = {str(e.id) for e in db.iter_all(0)} & {str(i) for i in ids}
    assert not removed, f"{len(removed)} hard-deleted events survived the scavenge"
    assert [e.event_type for e in db.read_stream_forward("kept", 0, 10).events] == ["K"]
    with pytest.raises((StreamDeleted, StreamNotFound)):
        db.read_stream_forward("doomed", 0, 10)
