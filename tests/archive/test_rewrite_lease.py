"""The archive's rewrite lease (evdb/archive/archive_rewrite.py ``RewriteLease``) fences its holder: one
that overran its lease and lost it to another node puts no rewritten chunk and deletes nobody's lease."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from evdb.archive.archive_rewrite import LEASE, LEASE_SECONDS, RELEASE_MARGIN, RewriteLease, put_rewritten
from evdb.archive.archiver import chunk_object_name
from evdb.archive.filesystem import FileSystemStore
from evdb.clock import ManualClock
from evdb.errors import ArchiveUnavailable


@pytest.fixture
def store(tmp_path) -> FileSystemStore:
    return FileSystemStore(str(tmp_path / "archive"))


def _holder(store: FileSystemStore) -> str:
    return json.loads(store.get_bytes(LEASE))["node"]


def test_a_holder_that_overran_its_lease_puts_nothing_and_leaves_the_next_holders_lease(store, tmp_path):
    clock = ManualClock()
    slow = RewriteLease(store, node="node1 (scavenge)", now=clock.time)
    other = RewriteLease(store, node="node2 (redaction)", now=clock.time)
    assert slow.try_acquire() is None
    assert other.try_acquire() is not None  # held: node2 waits
    clock.advance(LEASE_SECONDS + 1)  # node1 overran (a slow download, a pause): taken to be dead
    assert other.try_acquire() is None and _holder(store) == "node2 (redaction)"

    # node1 comes back to put its rewrite of chunk 3: the lease is renewed first, and that fails
    store.put_bytes(chunk_object_name(3), b"node2's redacted copy")
    rewritten = tmp_path / "chunk-000003.000002"
    rewritten.write_bytes(b"node1's copy from before the redaction")
    new = SimpleNamespace(
        path=str(rewritten), footer=SimpleNamespace(checksum=b""), start_number=3, end_number=3
    )
    with pytest.raises(ArchiveUnavailable, match="ran out and another node took it"):
        put_rewritten(store, 3, new, slow)  # type: ignore[arg-type]
    assert store.get_bytes(chunk_object_name(3)) == b"node2's redacted copy"

    slow.release()  # it no longer holds the lease: node2's stays
    assert _holder(store) == "node2 (redaction)"
    other.release()
    assert store.head(LEASE) is None


def test_a_renewal_gives_a_full_lease_and_a_lease_near_its_end_is_left_to_expire(store):
    clock = ManualClock()
    lease = RewriteLease(store, node="node1", now=clock.time)
    assert lease.try_acquire() is None
    clock.advance(LEASE_SECONDS - 10)
    lease.renew("a rewrite")  # before the put: a full lease from now
    clock.advance(LEASE_SECONDS / 2)
    other = RewriteLease(store, node="node2", now=clock.time)
    assert other.try_acquire() is not None  # the renewed lease still holds
    lease.release()
    assert store.head(LEASE) is None

    assert lease.try_acquire() is None
    clock.advance(LEASE_SECONDS - RELEASE_MARGIN / 2)  # too near its end to delete safely
    lease.release()
    assert _holder(store) == "node1"  # left to expire
    clock.advance(RELEASE_MARGIN)
    assert other.try_acquire() is None
