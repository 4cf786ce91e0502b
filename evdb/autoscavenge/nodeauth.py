"""How the auto-scavenge leader authenticates when it drives another node's scavenge endpoints.

The leader calls ``POST /admin/scavenge``, ``GET /admin/scavenge/last`` and ``DELETE /admin/scavenge/{id}``
on each node over its public HTTP API. Those need an admin or ops caller, and a scheduled cycle has no
caller, so the cluster keeps a **node token**: 32 random bytes the first auto-scavenge leader writes to
the system stream ``$auto-scavenge-node-token``. The stream is replicated to every member (followers
and read-only replicas), so each node can check the token against its own copy; like every
``$``-stream it is readable only by ``$admins``, who hold every right the token grants anyway.

The leader sends ``Authorization: EvdbNode <token>``; a node that finds that token as the newest
event of the stream treats the request as the ``$system`` user, with the ``$admins`` role.
"""

from __future__ import annotations

import hmac
import json
import secrets

from evdb.auth import ADMINS, Principal
from evdb.errors import StreamNotFound
from evdb.streams import NO_STREAM, NewEvent

__all__ = ["NODE_SCHEME", "NODE_TOKEN_STREAM", "SYSTEM_PRINCIPAL", "authenticate_node", "ensure_node_token"]

NODE_TOKEN_STREAM = "$auto-scavenge-node-token"
NODE_TOKEN_EVENT = "$node-token"
NODE_SCHEME = "EvdbNode"
SYSTEM_PRINCIPAL = Principal("$system", frozenset({ADMINS, "$system"}))


def current_token(db) -> str | None:
    try:
        events = db.read_stream_backward(NODE_TOKEN_STREAM, None, 1).events
    except StreamNotFound:
        return None
    if not events:
        return None
    try:
        return str(json.loads(events[0].data)["token"])
    except (ValueError, KeyError, TypeError):
        return None


def ensure_node_token(db) -> str:
    """The cluster's node token, written on first use (on the leader; blocking: run in a thread)."""
    token = current_token(db)
    if token is not None:
        return token
    token = secrets.token_urlsafe(32)
    event = NewEvent(NODE_TOKEN_EVENT, json.dumps({"token": token}).encode(), is_json=True)
    try:
        db.append(NODE_TOKEN_STREAM, [event], NO_STREAM)
    except Exception:
        # another leader wrote one meanwhile (or the write failed): use whatever the stream holds
        existing = current_token(db)
        if existing is None:
            raise
        return existing
    return token


def authenticate_node(db, header: str) -> Principal | None:
    """``$system`` for ``EvdbNode <token>`` with this cluster's token; None otherwise."""
    scheme, _, given = header.partition(" ")
    if scheme != NODE_SCHEME or not given.strip() or db is None:
        return None
    expected = current_token(db)
    if expected is None or not hmac.compare_digest(expected.encode(), given.strip().encode()):
        return None
    return SYSTEM_PRINCIPAL
