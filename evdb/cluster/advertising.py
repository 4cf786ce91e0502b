"""What a member is called in gossip: the addresses other nodes use, and those clients are told.

KurrentDB keeps two sets (``ClusterVNode.GetGossipAdvertiseInfo``, ``ClientClusterInfo``): nodes reach
each other at the *cluster* endpoint (``NodeHostAdvertiseAs``/``NodePortAdvertiseAs``, else the bound
address), and clients are told the *client* endpoint (``AdvertiseHostToClientAs``/
``AdvertiseNodePortToClientAs``, else the cluster one): in ``GET /gossip`` and gRPC ``Gossip.Read`` as
``httpEndPointIp``/``httpEndPointPort`` and ``serverIp``/``serverPort``, and in not-leader redirects.
The cluster endpoint stays in ``internalHttpEndPointIp``/``internalHttpEndPointPort``.

Inside evdb a member (``ClusterService.members``) is in the *cluster* form: ``httpEndPointIp``/``Port``
are the cluster endpoint, and ``clientHttpEndPointIp``/``Port`` the client one. :func:`client_member`
turns it into the client form KurrentDB serves; :func:`cluster_member` reads a peer's served form
back (evdb's nodes gossip through ``GET /gossip``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["CLIENT_HOST", "CLIENT_PORT", "client_gossip", "client_member", "cluster_member"]

CLIENT_HOST = "clientHttpEndPointIp"
CLIENT_PORT = "clientHttpEndPointPort"
_INTERNAL_HOST = "internalHttpEndPointIp"
_INTERNAL_PORT = "internalHttpEndPointPort"


def client_member(member: dict[str, Any]) -> dict[str, Any]:
    """A member as clients are shown it: the client endpoint as ``httpEndPointIp``/``Port`` (and
    ``externalTcpIp``), the cluster endpoint as ``internalHttpEndPointIp``/``Port``."""
    out = {k: v for k, v in member.items() if k not in (CLIENT_HOST, CLIENT_PORT)}
    if "httpEndPointIp" not in member:
        return out
    host, port = member["httpEndPointIp"], member.get("httpEndPointPort")
    client_host = member.get(CLIENT_HOST) or host
    out[_INTERNAL_HOST], out[_INTERNAL_PORT] = host, port
    out["httpEndPointIp"], out["httpEndPointPort"] = client_host, member.get(CLIENT_PORT) or port
    if "externalTcpIp" in out and member.get(CLIENT_HOST):
        out["externalTcpIp"] = client_host
    return out


def cluster_member(served: dict[str, Any]) -> dict[str, Any]:
    """A member read from a peer's ``GET /gossip`` back in the cluster form (a node that serves no
    ``internalHttpEndPointIp`` advertises one endpoint to all)."""
    if _INTERNAL_HOST not in served or _INTERNAL_PORT not in served:
        return dict(served)
    out = dict(served)
    out[CLIENT_HOST], out[CLIENT_PORT] = served.get("httpEndPointIp"), served.get("httpEndPointPort")
    out["httpEndPointIp"], out["httpEndPointPort"] = served[_INTERNAL_HOST], served[_INTERNAL_PORT]
    return out


def client_gossip(members: list[dict[str, Any]], own: tuple[str, int]) -> dict[str, Any]:
    """KurrentDB's client gossip: the members in the client form and this node's client endpoint."""
    return {"members": [client_member(m) for m in members], "serverIp": own[0], "serverPort": own[1]}
