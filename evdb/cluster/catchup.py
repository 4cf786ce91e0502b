"""The follower catch-up decisions, pure (epochs and record checks in, a verdict out): where a
follower's log stops agreeing with its leader's (docs/cluster.md, "The common point"). ``ClusterService``
(evdb/cluster/service.py) runs them over its transport, in a real node and in the simulator alike."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["common_point", "never_committed", "shared_end"]


def never_committed(follower_epochs: list[dict], leader_epoch: int) -> bool:
    """True when a follower's whole log is made of epochs this leader never had, every one older than
    the leader's: the follower's first epoch (no earlier one) starts at position 0 and its numbers are
    below the leader's. A leader holds every committed record of earlier epochs, so none of those
    records was committed (two nodes elected in the same instant at the cluster's start, say) and the
    follower starts again from the beginning. A log with a newer epoch, or records before its first
    epoch, is not this cluster's history: it is refused, never cut."""
    oldest = follower_epochs[-1]
    return (
        oldest.get("previousEpochPosition") == -1
        and int(oldest.get("position", -1)) == 0
        and all(int(e.get("epochNumber", leader_epoch)) < leader_epoch for e in follower_epochs)
    )


def common_point(
    ours: list[dict], committed: int, follower_epochs: list[dict], follower_end: int
) -> tuple[str, int, int]:
    """Where a follower's log may stop agreeing with the leader's, from the epochs alone (``ours``: the
    leader's epochs, newest first; ``committed``: the leader's durable end):
    ``("check", point, floor)``: the logs can agree at most up to ``point``, and they share the
    epoch record at ``floor``; the records in between are then compared one by one
    (:func:`shared_end`), never assumed. ``("refuse", 0, 0)``: no epoch in common."""
    if not follower_epochs:
        return ("check", 0, 0) if follower_end == 0 else ("refuse", 0, 0)
    by_key = {(e["epochId"], e["position"]): i for i, e in enumerate(ours)}
    for k, epoch in enumerate(follower_epochs):  # newest first
        index = by_key.get((epoch.get("epochId"), epoch.get("position")))
        if index is None:
            continue
        # the logs can agree from this epoch until the next epoch of either: after ours, the
        # follower lacks our records; after one of its own we never had, its records are not ours
        agreed_until = committed if index == 0 else int(ours[index - 1]["position"])
        if k > 0:
            agreed_until = min(agreed_until, int(follower_epochs[k - 1]["position"]))
        return "check", min(agreed_until, follower_end), int(epoch["position"])
    if ours and never_committed(follower_epochs, int(ours[0]["epochNumber"])):
        return "check", 0, 0
    return "refuse", 0, 0


def shared_end(
    verify: dict,
    has_record: Callable[[int, int, int], bool],
    chunk_end_after: Callable[[int], int | None] | None = None,
    chunk_ends: dict[int, int] | None = None,
) -> int | None:
    """A follower's answer to one page of the leader's record checks (newest first): the end of the
    newest record it holds at the same position, or None. A point of 0 shares nothing: start at 0.

    When that record is the last of a chunk both logs completed at the same end (``chunk_ends``: the
    leader's data end -> chunk end), the logs agree to the chunk's end: a follower that stops there
    (after a scavenge point completed the chunk, say) is not cut back into it, again and again."""
    if int(verify["point"]) == 0:
        return 0
    for position, size, fingerprint in verify.get("records") or []:
        if has_record(int(position), int(size), int(fingerprint)):
            end = int(position) + int(size)
            leader_chunk_end = (chunk_ends or {}).get(end)
            if (
                leader_chunk_end is not None
                and chunk_end_after is not None
                and chunk_end_after(end) == leader_chunk_end
            ):
                return leader_chunk_end
            return end
    return None
