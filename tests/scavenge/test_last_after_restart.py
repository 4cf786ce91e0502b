"""``GET /admin/scavenge/last`` after a restart names this node's newest scavenge, not the newest one in
``$scavenges``, which lists every node's (it is replicated)."""

from __future__ import annotations

import logging

from evdb.scavenge.events import ScavengeEvents
from evdb.scavenge.service import ScavengeRequest, ScavengeService


def service_for(h, endpoint: str) -> ScavengeService:
    return ScavengeService(
        h.db,
        state_path=ScavengeService.state_path_for(str(h.path / "db" / "index")),
        logger=logging.getLogger("test.scavenge"),
        node_endpoint=endpoint,
        clock=h.clock,
    )


def test_the_last_scavenge_after_a_restart_is_this_node_s(tmp_path, make_harness):
    h = make_harness(tmp_path / "node1")
    h.service.close()
    h.service = service_for(h, "127.0.0.1:2113")
    ours = h.service.start(ScavengeRequest())
    assert h.service.wait(60)
    # the leader's scavenge, replicated into this log after ours: the newest in $scavenges
    theirs = ScavengeEvents(h.db, "9fa6ef9e-0000-4000-8000-000000000000", "127.0.0.1:2114", 30)
    theirs.started()
    theirs.completed("Success", None, 0.1, 0, 0)
    h.service.close()
    restarted = service_for(h, "127.0.0.1:2113")
    try:
        assert restarted.last() == (ours, "Success")
        other = service_for(h, "127.0.0.1:2114")
        assert other.last() == ("9fa6ef9e-0000-4000-8000-000000000000", "Success")
        other.close()
        stranger = service_for(h, "127.0.0.1:2199")
        assert stranger.last() is None
        stranger.close()
    finally:
        h.service = restarted
