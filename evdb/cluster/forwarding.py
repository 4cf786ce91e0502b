"""Writes made on a follower or a read-only replica go to the leader (KurrentDB forwards them too).

The follower sends the write to the leader's node-to-node listener (``POST /internal/write``), the
leader runs it like a local write (so it is acknowledged only once a majority has it), and the
follower answers its caller once its own copy of the log has reached the written position, so a
client reads its own write on the node it wrote through. The HTTP requests of leader-only routes (the
persistent subscriptions') are sent on as they came (:func:`forward_request`).
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from evdb.cluster.peers import PeerAnswer, PeerClient
from evdb.errors import (
    EvdbError,
    EventTooLarge,
    InvalidInput,
    NotLeader,
    StreamDeleted,
    StreamNotFound,
    WrongExpectedVersion,
)
from evdb.streams import AppendResult, NewEvent

__all__ = [
    "FORWARDED_BY",
    "RemoteWriter",
    "decode_write",
    "encode_error",
    "encode_result",
    "forward_request",
    "raise_error",
]

#: the header on an HTTP request a node forwards to the leader: the node it reaches does not forward it
#: again (a leader that has just stepped down answers it itself)
FORWARDED_BY = "X-Evdb-Forwarded-By"
#: the caller's headers a forwarded request does not carry (KurrentDB's HttpSendService.ForwardRequest)
_HOP_HEADERS = frozenset(
    {"connection", "content-length", "expect", "proxy-connection", "range", "host", "transfer-encoding"}
)


async def forward_request(
    peers: PeerClient,
    leader: tuple[str, int],
    *,
    method: str,
    path: str,
    body: bytes,
    headers: Mapping[str, str],
    sender: str,
    requested_host: str,
) -> PeerAnswer:
    """Send a client's HTTP request, as it came (``path`` with its query, the caller's own headers and
    so its credentials), to the leader's HTTP endpoint and return the leader's answer, as KurrentDB's
    HttpForwarder does for its leader-only routes. PeerError (naming the leader and the reason) when
    the leader does not answer."""
    sent = {k: v for k, v in headers.items() if k.lower() not in _HOP_HEADERS}
    sent.setdefault("X-Forwarded-Host", requested_host)
    sent[FORWARDED_BY] = sender
    return await peers.request(
        method,
        leader,
        path,
        data=body or None,
        headers=sent,
        timeout=30,
        what=f"forwarding {method} {path} to the leader {leader[0]}:{leader[1]}",
    )


def encode_write(request: Any) -> dict:
    """The JSON body of a forwarded append or delete (``database._Append`` / ``_Delete``)."""
    if hasattr(request, "events"):
        return {
            "op": "append",
            "stream": request.stream,
            "expectedVersion": request.expected_version,
            "events": [
                {
                    "eventId": str(e.event_id) if e.event_id is not None else None,
                    "eventType": e.event_type,
                    "data": base64.b64encode(e.data).decode(),
                    "metadata": base64.b64encode(e.metadata).decode(),
                    "isJson": e.is_json,
                }
                for e in request.events
            ],
        }
    return {
        "op": "delete",
        "stream": request.stream,
        "expectedVersion": request.expected_version,
        "hard": request.hard,
    }


def decode_write(body: dict) -> tuple[str, dict]:
    """The operation and keyword arguments of a forwarded write, checked."""
    op = body.get("op")
    if op == "append":
        events = [
            NewEvent(
                str(e["eventType"]),
                base64.b64decode(e.get("data") or ""),
                base64.b64decode(e.get("metadata") or ""),
                uuid.UUID(e["eventId"]) if e.get("eventId") else None,
                bool(e.get("isJson")),
            )
            for e in body["events"]
        ]
        return op, {
            "stream": str(body["stream"]),
            "events": events,
            "expected_version": int(body["expectedVersion"]),
        }
    if op == "delete":
        return op, {
            "stream": str(body["stream"]),
            "expected_version": int(body["expectedVersion"]),
            "hard": bool(body.get("hard")),
        }
    if op == "scavenge-point":
        return op, {"threshold": int(body.get("threshold", 0))}
    raise InvalidInput(f"Unknown forwarded operation {op!r}.")


def encode_result(result: AppendResult) -> dict:
    return {
        "nextExpectedVersion": result.next_expected_version,
        "position": result.position,
        "firstEventNumber": result.first_event_number,
        "duplicate": result.duplicate,
    }


def encode_error(exc: EvdbError) -> dict:
    out: dict[str, Any] = {"error": type(exc).__name__, "message": str(exc)}
    if isinstance(exc, WrongExpectedVersion):
        out.update(stream=exc.stream, expected=exc.expected_version, current=exc.current_version)
    elif isinstance(exc, (StreamDeleted, StreamNotFound)):
        out.update(stream=exc.stream)
    return out


def raise_error(body: dict) -> None:
    kind, message = body.get("error"), body.get("message", "")
    if kind == "WrongExpectedVersion":
        raise WrongExpectedVersion(body["stream"], body["expected"], body["current"])
    if kind == "StreamDeleted":
        raise StreamDeleted(body["stream"])
    if kind == "StreamNotFound":
        raise StreamNotFound(body["stream"])
    if kind == "EventTooLarge":
        raise EventTooLarge(message)
    if kind == "InvalidInput":
        raise InvalidInput(message)
    if kind == "NotLeader":
        raise NotLeader()
    raise EvdbError(f"The leader refused the write: {message}")


class RemoteWriter:
    """Installed as ``Database.remote_writer`` while the node follows a leader (or has none)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        send: Callable[[dict], Awaitable[dict]] | None,
        wait_for_position: Callable[[int], Awaitable[None]],
    ) -> None:
        self._loop = loop
        self._send = send  # None: no leader known, writes are refused
        self._wait_for_position = wait_for_position

    def __call__(self, request: Any) -> concurrent.futures.Future:
        if self._send is None:
            future: concurrent.futures.Future = concurrent.futures.Future()
            future.set_exception(NotLeader())
            return future
        return asyncio.run_coroutine_threadsafe(self._forward(encode_write(request)), self._loop)

    async def _forward(self, body: dict) -> AppendResult:
        assert self._send is not None
        answer = await self._send(body)
        if "error" in answer:
            raise_error(answer)
        result = AppendResult(
            answer["nextExpectedVersion"], answer["position"], answer["firstEventNumber"], answer["duplicate"]
        )
        if result.position >= 0:
            await self._wait_for_position(result.position)
        return result

    def write_scavenge_point(self, threshold: int) -> int:
        """Ask the leader for a new scavenge point; returns its log position once it is here."""
        if self._send is None:
            raise NotLeader()
        return asyncio.run_coroutine_threadsafe(self._scavenge_point(threshold), self._loop).result()

    async def _scavenge_point(self, threshold: int) -> int:
        assert self._send is not None
        answer = await self._send({"op": "scavenge-point", "threshold": threshold})
        if "error" in answer:
            raise_error(answer)
        await self._wait_for_position(answer["position"])
        return int(answer["position"])
