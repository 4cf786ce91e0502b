"""What every gRPC service shares: the caller, access rules, leader checks, error shapes, conversions,
and the server that answers them (:class:`KurrentServer`).

Errors reach the client in the shapes KurrentDB's clients parse (see the reference
``kurrentdb-grpc-clients.md`` and KurrentDB's ``RpcExceptions``): each error evdb maps carries
KurrentDB's trailing metadata, ``exception`` (``stream-deleted``, ``wrong-expected-version``,
``access-denied``, ``not-leader``, ...) and the facts beside it (``stream-name``, ``expected-version``,
``actual-version``, ``leader-endpoint-host``/``-port``, ...), from evdb/errors.py (``trailers_of``): the
Node.js client and its Rust bridge choose their error class from them. A wrong expected version on
Delete/Tombstone and a deleted stream are ``FAILED_PRECONDITION`` with KurrentDB's messages (which
kurrentdbclient reads); "not leader" is ``NOT_FOUND`` "Leader info available" with the ``not-leader``
trailers naming the leader's address (KurrentDB's ``RpcExceptions.LeaderInfo``).
"""

from __future__ import annotations

import logging
import time
import urllib.parse
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import h2.exceptions
from google.protobuf import timestamp_pb2
from grpclib import GRPCError
from grpclib._typing import IServerMethodFunc
from grpclib.const import Status
from grpclib.events import RecvRequest, SendMessage, listen
from grpclib.metadata import decode_timeout
from grpclib.protocol import H2Protocol
from grpclib.server import Handler, Server, Stream
from kurrentdbclient.protos.v1 import shared_pb2

from evdb.auth import ADMINS, OPS, Principal, parse_basic_authorization, stream_access
from evdb.errors import (
    AccessDenied,
    DatabaseReopening,
    EventTooLarge,
    InvalidInput,
    NotLeader,
    status_of,
    trailers_of,
)
from evdb.streams import ANY, NO_STREAM, STREAM_EXISTS, check_stream_name

if TYPE_CHECKING:
    from evdb.database import Database
    from evdb.node import Node
    from evdb.scavenge.service import ScavengeService

__all__ = [
    "SYSTEM",
    "KurrentError",
    "KurrentServer",
    "MessageWriter",
    "call_context",
    "check_stream_access",
    "database",
    "expected_version",
    "grpc_error",
    "kurrent_error",
    "require_ops",
    "scavenge_service",
    "send_messages",
    "timestamp_now",
    "uuid_message",
]

_log = logging.getLogger("evdb.grpc")

#: The caller of a request without credentials on an insecure node: KurrentDB's insecure mode turns
#: authentication and authorization off, and kurrentdbclient sends credentials only over TLS.
SYSTEM = Principal("$system", frozenset({ADMINS, OPS, "$system"}))
_ANONYMOUS = Principal("")


class CallContext:
    """Who calls, and whether the call insists on the leader."""

    __slots__ = ("principal", "requires_leader")

    def __init__(self, principal: Principal, requires_leader: bool) -> None:
        self.principal = principal
        self.requires_leader = requires_leader


async def call_context(node: Node, stream: Stream) -> CallContext:
    """Authenticate the call (``authorization: Basic``); wrong credentials are UNAUTHENTICATED."""
    metadata: Mapping[str, Any] = stream.metadata or {}
    header = metadata.get("authorization")
    requires_leader = str(metadata.get("requires-leader", "false")).lower() == "true"
    if isinstance(header, bytes):
        header = header.decode("latin-1")
    if header:
        parsed = parse_basic_authorization(header)
        if parsed is None:
            raise GRPCError(Status.UNAUTHENTICATED, "Malformed authorization header.")
        principal = await node.users.sign_in(*parsed)  # one rule with HTTP: cached sign-ins stay on the loop
        if principal is None:
            raise GRPCError(Status.UNAUTHENTICATED, "Bad credentials.")
        return CallContext(principal, requires_leader)
    return CallContext(SYSTEM if node.options.insecure else _ANONYMOUS, requires_leader)


def check_stream_access(node: Node, principal: Principal, stream: str, action: str) -> None:
    """The HTTP API's stream access rules (evdb.auth.stream_access), on the event loop as the HTTP API
    checks them: the stream's metadata is read through the index and the chunks' maps (``mmap``), which
    hold the GIL in a worker thread as much as on the loop, so a thread hop would only add wake-ups."""
    verdict = stream_access(database(node), principal, stream, action)
    if verdict == "unauthenticated":
        raise GRPCError(Status.UNAUTHENTICATED, "Authentication is required.")
    if verdict == "denied":
        raise access_denied()


def database(node: Node) -> Database:
    """The node's open database (Node.open_db); UNAVAILABLE while a follower reopens it."""
    try:
        return node.open_db()
    except DatabaseReopening as exc:
        raise GRPCError(Status.UNAVAILABLE, str(exc)) from None


def scavenge_service(node: Node) -> ScavengeService:
    """The node's scavenge service (Node.open_scavenge); UNAVAILABLE while a follower reopens it."""
    try:
        return node.open_scavenge()
    except DatabaseReopening as exc:
        raise GRPCError(Status.UNAVAILABLE, str(exc)) from None


def require_ops(principal: Principal) -> None:
    if not principal.is_authenticated:
        raise GRPCError(Status.UNAUTHENTICATED, "Authentication is required.")
    if not principal.is_ops:
        raise access_denied()


def access_denied() -> GRPCError:
    """KurrentDB's ``RpcExceptions.AccessDenied``: PERMISSION_DENIED with ``exception: access-denied``."""
    return kurrent_error(Status.PERMISSION_DENIED, "Access Denied", trailers_of(AccessDenied()))


def not_leader_error(node: Node) -> GRPCError:
    """KurrentDB's ``RpcExceptions.LeaderInfo``: NOT_FOUND "Leader info available" with the
    ``not-leader`` trailers naming the leader's address, as KurrentDB answers a requires-leader call on
    a follower; UNAVAILABLE "Server Is Not Ready" when no leader is known."""
    cluster = node.cluster
    # the leader's address as clients are told it (AdvertiseHostToClientAs), as KurrentDB
    leader = cluster.leader_client_endpoint() if cluster is not None else None
    if leader is None:
        return GRPCError(Status.UNAVAILABLE, "Server Is Not Ready")
    host, port = leader
    return kurrent_error(Status.NOT_FOUND, "Leader info available", trailers_of(NotLeader(host, port)))


def check_leader(node: Node, ctx: CallContext) -> None:
    """A call that requires the leader, on a node that is not: the not-leader answer."""
    cluster = node.cluster
    if ctx.requires_leader and cluster is not None and not cluster.is_leader:
        raise not_leader_error(node)


def grpc_error(node: Node, exc: BaseException) -> GRPCError:
    """evdb's errors as the gRPC statuses KurrentDB answers with (messages and trailers included)."""
    if isinstance(exc, GRPCError):
        return exc
    if isinstance(exc, NotLeader):
        return not_leader_error(node)  # with the leader's endpoint, as KurrentDB's clients expect
    if isinstance(exc, AccessDenied):
        return access_denied()
    if isinstance(exc, EventTooLarge) and exc.limit is None:
        # KurrentDB's trailer names the limit (the Node.js client reads it): the database's MaxAppendSize
        db = getattr(node, "db", None)
        if db is not None:
            exc = EventTooLarge(str(exc), limit=min(db.config.max_append_size, 2**31 - 1))
    known = status_of(exc)  # the one table of statuses (evdb/errors.py), shared with HTTP
    if known is not None:
        return kurrent_error(Status[known[1]], str(exc), trailers_of(exc))
    if getattr(node, "db", None) is None:  # a follower cutting a diverged tail: a moment, not a fault
        return GRPCError(Status.UNAVAILABLE, DatabaseReopening.MESSAGE)
    node.logger.exception("gRPC call failed unexpectedly", exc_info=exc)
    return GRPCError(Status.INTERNAL, f"Internal error: {exc}")


def expected_version(options: Any, oneof: str, revision_field: str) -> int:
    """The expected version of an append/delete/tombstone request's options, in evdb's numbers."""
    which = options.WhichOneof(oneof)
    if which == revision_field:
        return int(getattr(options, revision_field))
    if which == "no_stream":
        return NO_STREAM
    if which == "stream_exists":
        return STREAM_EXISTS
    return ANY


def stream_name(identifier: shared_pb2.StreamIdentifier) -> str:
    """The request's stream name, checked with the database's rule (evdb.streams.check_stream_name)
    before anything else happens: INVALID_ARGUMENT with the reason."""
    try:
        name = identifier.stream_name.decode("utf-8")
    except UnicodeDecodeError:
        raise GRPCError(Status.INVALID_ARGUMENT, "The stream name is not UTF-8.") from None
    if not name:
        raise GRPCError(Status.INVALID_ARGUMENT, "The stream name must not be empty.")
    try:
        return check_stream_name(name)
    except InvalidInput as exc:
        raise GRPCError(Status.INVALID_ARGUMENT, str(exc)) from None


def uuid_message(value: bytes, structured: bool) -> shared_pb2.UUID:
    """An event id as the client asked for it: a string, or two signed 64-bit halves."""
    if structured:
        most = int.from_bytes(value[:8], "big", signed=True)
        least = int.from_bytes(value[8:], "big", signed=True)
        return shared_pb2.UUID(
            structured=shared_pb2.UUID.Structured(most_significant_bits=most, least_significant_bits=least)
        )
    return shared_pb2.UUID(string=str(uuid.UUID(bytes=value)))


def parse_uuid(message: shared_pb2.UUID) -> uuid.UUID:
    which = message.WhichOneof("value")
    try:
        if which == "string":
            return uuid.UUID(message.string)
        if which == "structured":
            s = message.structured
            return uuid.UUID(
                bytes=s.most_significant_bits.to_bytes(8, "big", signed=True)
                + s.least_significant_bits.to_bytes(8, "big", signed=True)
            )
    except ValueError:
        pass
    raise GRPCError(Status.INVALID_ARGUMENT, "Every event needs a valid id (a UUID).")


def timestamp_now(node: Node) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromNanoseconds(int(node.clock.time() * 1_000_000_000))
    return ts


# -- server-streaming answers written a page at a time ---------------------------------------------------
#: A :class:`MessageWriter` writes what it holds once this many bytes wait (bounds its memory)
FLUSH_BYTES = 1 << 20


class MessageWriter:
    """Messages of a server-streaming call, written to the connection together.

    grpclib's ``Stream.send_message`` writes each message with its own HTTP/2 DATA frame and its own
    transport write (a ``send()`` each). gRPC messages are length-prefixed and may share frames, so
    :meth:`flush` joins what was added and hands it to h2 in frames of the peer's largest frame size,
    as many as the peer's flow-control window (the stream's and the connection's) allows, in one
    transport write; with a short window it writes what fits and waits for the peer's WINDOW_UPDATE, as
    grpclib does. Every flush completes before the handler returns, so trailers never pass a message.
    With grpclib ``SendMessage`` listeners (none in evdb) each message goes through ``send_message``."""

    __slots__ = ("_count", "_messages", "_parts", "_size", "_stream")

    def __init__(self, stream: Stream) -> None:
        self._stream = stream
        self._parts: list[bytes] = []
        self._messages: list[Any] = []  # only with SendMessage listeners
        self._count = 0
        self._size = 0

    async def add(self, message: Any) -> None:
        """Hold ``message`` for the next :meth:`flush` (flushing first when enough is waiting)."""
        stream = self._stream
        if stream._dispatch._listeners.get(SendMessage):
            self._messages.append(message)
            return
        payload = stream._codec.encode(message, stream._send_type)
        self._parts.append(b"\x00" + len(payload).to_bytes(4, "big"))
        self._parts.append(payload)
        self._count += 1
        self._size += 5 + len(payload)
        if self._size >= FLUSH_BYTES:
            await self.flush()

    async def flush(self) -> None:
        """Write everything held, in order."""
        stream = self._stream
        if self._messages:
            messages, self._messages = self._messages, []
            for message in messages:
                await stream.send_message(message)
        if not self._parts:
            return
        data, count = b"".join(self._parts), self._count
        self._parts, self._count, self._size = [], 0, 0
        if not stream._send_initial_metadata_done:
            await stream.send_initial_metadata()
        await _send_data(stream._stream, data)
        # grpclib's own bookkeeping, as send_message keeps it (its keep-alive reads the times)
        stream._send_message_done = True
        stream._messages_sent += count
        connection = stream._stream.connection
        connection.messages_sent += count
        connection.last_message_sent = time.monotonic()


async def send_messages(stream: Stream, messages: Iterable[Any]) -> None:
    """Several messages of a server-streaming call written together (:class:`MessageWriter`)."""
    writer = MessageWriter(stream)
    for message in messages:
        await writer.add(message)
    await writer.flush()


async def _send_data(h2_stream: Any, data: bytes) -> None:
    """grpclib's ``protocol.Stream.send_data`` with one transport write per window's worth of frames
    instead of one per frame."""
    connection = h2_stream.connection
    h2 = h2_stream._h2_connection
    position, end = 0, len(data)
    while position < end:
        await connection.write_ready.wait()  # the transport's buffer is below its high-water mark
        window = h2.local_flow_control_window(h2_stream.id)  # min(stream's, connection's); may be < 0
        if window <= 0:
            h2_stream.window_updated.clear()
            await h2_stream.window_updated.wait()
            continue  # other streams may have used the window meanwhile: look again
        limit = min(end, position + window)
        frame = h2.max_outbound_frame_size
        start = position
        while position < limit:
            chunk = data[position : min(limit, position + frame)]
            h2.send_data(h2_stream.id, chunk)
            position += len(chunk)
        h2_stream._transport.write(h2.data_to_send())
        h2_stream.data_sent += position - start
        connection.data_sent += position - start
        connection.data_send_process()


# -- KurrentDB's error shapes on the wire ----------------------------------------------------------------
class KurrentError(GRPCError):
    """A ``GRPCError`` with KurrentDB's trailing metadata (``exception`` and the facts beside it).

    grpclib sends no custom trailers for a raised error; :class:`KurrentServer` sends these."""

    def __init__(
        self, status: Status, message: str, trailers: Mapping[str, str], details: Any = None
    ) -> None:
        super().__init__(status, message, details)
        # HTTP/2 (grpclib) carries no empty value: a fact KurrentDB sends empty is left out
        self.trailers = {key: _metadata_value(value) for key, value in trailers.items() if value}


def kurrent_error(
    status: Status, message: str, trailers: Mapping[str, str], details: Any = None
) -> GRPCError:
    """The error a handler raises: with trailers when KurrentDB sends some, else a plain GRPCError."""
    if not trailers:
        return GRPCError(status, message, details)
    return KurrentError(status, message, trailers, details)


def _metadata_value(value: str) -> str:
    """A trailer value as HTTP/2 carries it: printable ASCII as it is, anything else percent-encoded
    (UTF-8), as gRPC encodes ``grpc-message``."""
    if all(" " <= ch <= "~" for ch in value):
        return value
    return urllib.parse.quote(value, safe=" !\"#$&'()*+,/:;=?@[]^`{|}~<>")


#: A call that reaches evdb with less time than this left is answered DEADLINE_EXCEEDED at once: its
#: deadline passes before any answer could reach the client.
DEADLINE_FLOOR = 0.001


class KurrentServer(Server):
    """grpclib's server with KurrentDB's error shapes and its ``ServerFeatures`` service.

    * a handler that raises :class:`KurrentError` answers with its trailers (``exception``, ...);
    * a call whose deadline (``grpc-timeout``) has already passed is ``DEADLINE_EXCEEDED``, as
      KurrentDB answers it (grpclib raises from its deadline timer before the handler runs, and the
      client would get ``UNKNOWN Internal Server Error``); a deadline that passes during a call
      cancels the handler and is ``DEADLINE_EXCEEDED`` through grpclib itself;
    * ``event_store.client.server_features.ServerFeatures/GetSupportedMethods`` lists the methods this
      server really serves (evdb/grpc/features.py), as KurrentDB lists its endpoints.
    """

    def __init__(self, handlers: Collection[Any]) -> None:
        from evdb.grpc.features import ServerFeaturesService

        services = list(handlers)
        super().__init__([*services, ServerFeaturesService(services)])
        listen(self, RecvRequest, _send_trailers)

    def _protocol_factory(self) -> H2Protocol:
        # as grpclib's own, with a handler that answers a passed deadline (see the class docstring)
        self.__gc_step__()
        handler = _DeadlineHandler(self._mapping, self._codec, self._status_details_codec, self.__dispatch__)
        self._handlers.add(handler)
        return H2Protocol(handler, self._config, self._h2_config)


async def _send_trailers(event: RecvRequest) -> None:
    event.method_func = _with_trailers(event.method_func)


def _with_trailers(func: IServerMethodFunc) -> IServerMethodFunc:
    async def call(stream: Stream) -> None:
        try:
            await func(stream)
        except KurrentError as exc:
            if stream._send_trailing_metadata_done:  # the handler answered already: grpclib logs it
                raise
            try:
                await stream.send_trailing_metadata(
                    status=exc.status,
                    status_message=exc.message,
                    status_details=exc.details,
                    metadata=exc.trailers,
                )
            except h2.exceptions.StreamClosedError:
                pass  # the client went away: nobody to tell

    return call


class _DeadlineHandler(Handler):
    def accept(self, stream: Any, headers: Any, release_stream: Callable[[], Any]) -> None:
        if _deadline_passed(headers):
            self.__gc_step__()
            self._tasks[stream] = self.loop.create_task(_answer_deadline_exceeded(stream, release_stream))
            return
        super().accept(stream, headers, release_stream)


def _deadline_passed(headers: Any) -> bool:
    timeouts = [value for key, value in headers if key == "grpc-timeout"]
    if not timeouts:
        return False
    try:
        return min(map(decode_timeout, timeouts)) < DEADLINE_FLOOR
    except ValueError:
        return False  # malformed: grpclib answers it


async def _answer_deadline_exceeded(stream: Any, release_stream: Callable[[], Any]) -> None:
    try:
        await stream.send_headers(
            [
                (":status", "200"),
                ("content-type", "application/grpc"),
                ("grpc-status", str(Status.DEADLINE_EXCEEDED.value)),
                ("grpc-message", "Deadline Exceeded"),
            ],
            end_stream=True,
        )
        if stream.closable:
            stream.reset_nowait()
    except (h2.exceptions.StreamClosedError, ConnectionError):
        pass  # the client went away: nobody to tell
    finally:
        release_stream()
