"""The replication stream's wire format, shared by the leader's side (evdb/cluster/sending.py) and the
follower's (evdb/cluster/receiving.py, evdb/cluster/following.py).

Messages on a stream (a WebSocket): JSON for the handshake, the chunk files' headers, completions,
caught-up marks, acknowledgements of installs and lease requests and grants; binary for records,
commit positions, records acknowledgements and chunk file pieces.
"""

from __future__ import annotations

import struct

from evdb.cluster.following import RECORDS

__all__ = [
    "CHECKS_PER_MESSAGE",
    "CHUNK_PIECE",
    "COMMIT",
    "MAX_SEND",
    "POSITION",
    "RECORDS",
    "REPLICATION_PROTOCOL",
]

#: the replication stream's wire format: 4 since followers and replicas ask for sign-in leases
#: (``{"lease": n, "held": m}``, answered ``{"grant": n, "security": S, "for": F}``:
#: evdb/cluster/lease.py; a leader of 3 would grant none, so no member of it could sign anyone in);
#: 3 since a leader sends each new commit position to every follower as an 8-byte binary message
#: written before it answers the write's client, and a follower acknowledges each records write with
#: its durable end in 8 bytes the same way (2: records carry the commit position, ``<qq``
#: position|commit then frames, and a leader ships records before its own sync). A leader and a
#: follower of different protocols refuse each other, each saying why, instead of misreading bytes.
REPLICATION_PROTOCOL = 4
#: how many record checks one verification message of the common point carries
CHECKS_PER_MESSAGE = 2048
#: a follower's acknowledgement (its durable end), or a chunk file piece's offset: ``int64``
POSITION = struct.Struct("<q")
#: a commit message: ``int64 the leader's commit position`` alone: the only binary message of exactly 8
#: bytes from a leader (a records message has a 16-byte head, a chunk piece an 8-byte offset and at least
#: one byte of the file), which is how a follower's reader tells it apart
COMMIT = struct.Struct("<q")
#: bytes of records a leader reads for one records message
MAX_SEND = 1 << 20
#: bytes of a chunk file per WebSocket message
CHUNK_PIECE = 1 << 20
