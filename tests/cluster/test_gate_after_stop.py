"""A leader's cluster service that has stopped refuses the answers its writer gates afterwards at
once: a write still in the writer's pipeline when the node stops gets NotLeader instead of waiting
for ever (nothing would release it: a client's delete hung at the node's shutdown)."""

from __future__ import annotations

import concurrent.futures
import threading
from types import SimpleNamespace

import pytest

from evdb.cluster.leadership import Leadership
from evdb.cluster.lease import LeaseGrantor, SecurityWatch
from evdb.cluster.service import ClusterService
from evdb.errors import NotLeader
from evdb.streams import AppendResult


def leader(closed: bool) -> SimpleNamespace:
    leadership = Leadership(3, LeaseGrantor(10.0, 3))
    leadership.closed = closed
    return SimpleNamespace(
        state="Leader",
        _leading=True,
        leadership=leadership,
        _gate_lock=threading.Lock(),
        _loop=None,
        _schedule_notify=lambda: None,  # the gate's wake-up of the event loop (none here)
        _security_watch=SecurityWatch(),  # no security stream written (sign-in leases)
    )


def test_a_stopped_leader_refuses_what_its_writer_gates():
    service = leader(closed=True)
    future: concurrent.futures.Future = concurrent.futures.Future()
    result = AppendResult(next_expected_version=0, position=10, first_event_number=0)
    ClusterService._gate_answers(service, 10, [(future, result)])  # type: ignore[arg-type]
    assert list(service.leadership.gate) == []
    with pytest.raises(NotLeader):
        future.result(timeout=0)


def test_a_running_leader_holds_the_answers_for_a_majority():
    service = leader(closed=False)
    future: concurrent.futures.Future = concurrent.futures.Future()
    ClusterService._gate_answers(service, 10, [(future, "x")])  # type: ignore[arg-type]
    assert list(service.leadership.gate) == [(10, [(future, "x")])] and not future.done()
