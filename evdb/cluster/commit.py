"""The commit decisions, pure (positions in, positions out), used by ``ClusterService`` on a leader and
on a follower alike (evdb/cluster/service.py runs them, in a real node and in the simulator).

- A write is acknowledged once a majority of ClusterSize holds it durably: the leader counts itself
  with its own durable end (only once its fdatasync is done), each voting follower with the end it
  acknowledged; read-only replicas never count (:func:`majority_end`).
- A leader commits by counting copies only past its own epoch record (Raft's rule: records of earlier
  epochs are committed by the majority that holds this leader's epoch, never by their count alone):
  :func:`leader_commit`.
- A follower serves up to its leader's commit position, never past what it holds durably itself
  (:func:`follower_readable`).
"""

from __future__ import annotations

from collections.abc import Iterable

from evdb.cluster.election import majority

__all__ = ["follower_readable", "leader_commit", "majority_end"]


def majority_end(own_durable_end: int, voting_acks: Iterable[int], cluster_size: int) -> int:
    """The end of the log a majority of ``cluster_size`` holds durably (-1 while fewer than a majority
    report one)."""
    positions = sorted([own_durable_end, *voting_acks], reverse=True)
    needed = majority(cluster_size)
    return positions[needed - 1] if len(positions) >= needed else -1


def leader_commit(confirmed: int, own_epoch_position: int) -> int | None:
    """The commit position a leader may take from ``confirmed`` (:func:`majority_end`), or None while
    the majority does not yet hold this leader's own epoch record (or it wrote none yet)."""
    if confirmed > own_epoch_position >= 0:
        return confirmed
    return None


def follower_readable(leader_commit_position: int, durable_end: int) -> int:
    """What a follower serves: its leader's commit position, as far as this log holds it durably."""
    return min(leader_commit_position, durable_end)
