"""The HTTP/2 server that answers the gRPC services (:class:`KurrentServer`: grpclib's, with KurrentDB's
error trailers, deadlines and ServerFeatures) and the writing of server-streaming answers a page at a time
(:class:`MessageWriter`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import time
from collections.abc import Callable, Collection, Iterable
from typing import Any

import h2
import h2.connection
import h2.exceptions
from grpclib import GRPCError
from grpclib.const import Status
from grpclib.encoding.base import GRPC_CONTENT_TYPE
from grpclib.encoding.proto import ProtoCodec
from grpclib.events import (
    RecvMessage,
    RecvRequest,
    SendInitialMetadata,
    SendMessage,
    SendTrailingMetadata,
)
from grpclib.exceptions import ProtocolError, StreamTerminatedError
from grpclib.metadata import Deadline, decode_metadata, decode_timeout
from grpclib.protocol import H2Protocol
from grpclib.server import Handler, Server, Stream, _abort
from grpclib.stream import send_message as _send_message
from grpclib.utils import DeadlineWrapper, Wrapper
from h2.errors import ErrorCodes
from hyperframe.frame import RstStreamFrame

from evdb.grpc.errors import KurrentError

__all__ = [
    "DEADLINE_FLOOR",
    "DEFAULT_MAX_MESSAGE",
    "FLUSH_BYTES",
    "KurrentServer",
    "MessageWriter",
    "send_messages",
]


#: grpclib's server logger: :func:`_handle_call` logs what grpclib's ``request_handler`` logs, as it does
_server_log = logging.getLogger("grpclib.server")


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
        self.hold(message)
        if self._size >= FLUSH_BYTES:
            await self.flush()

    def hold(self, message: Any) -> None:
        """Hold ``message`` for the next :meth:`flush`, whatever is already held (for a callback,
        which cannot await: the caller flushes)."""
        stream = self._stream
        if stream._dispatch._listeners.get(SendMessage):
            self._messages.append(message)
            return
        payload = stream._codec.encode(message, stream._send_type)
        self._parts.append(b"\x00" + len(payload).to_bytes(4, "big"))
        self._parts.append(payload)
        self._count += 1
        self._size += 5 + len(payload)

    @property
    def held(self) -> bool:
        """Whether messages wait for :meth:`flush`."""
        return bool(self._parts or self._messages)

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


#: A call that reaches evdb with less time than this left is answered DEADLINE_EXCEEDED at once: its
#: deadline passes before any answer could reach the client.
DEADLINE_FLOOR = 0.001


#: the largest gRPC request message a server reads unless told (HttpMaxRequestBodySize's default)
DEFAULT_MAX_MESSAGE = 64 * 1024 * 1024


class KurrentServer(Server):
    """grpclib's server with KurrentDB's error shapes and its ``ServerFeatures`` service.

    * a handler that raises :class:`KurrentError` answers with its trailers (``exception``, ...);
    * a call whose deadline (``grpc-timeout``) has already passed is ``DEADLINE_EXCEEDED``, as
      KurrentDB answers it (grpclib raises from its deadline timer before the handler runs, and the
      client would get ``UNKNOWN Internal Server Error``); a deadline that passes during a call
      cancels the handler and is ``DEADLINE_EXCEEDED`` through grpclib itself;
    * ``event_store.client.server_features.ServerFeatures/GetSupportedMethods`` lists the methods this
      server really serves (evdb/grpc/features.py), as KurrentDB lists its endpoints.

    Each call runs :func:`_handle_call`, grpclib's ``request_handler`` with less work per call (see
    there); the answers are the same.
    """

    def __init__(
        self, handlers: Collection[Any], *, max_message: int = DEFAULT_MAX_MESSAGE, calls: Any = None
    ) -> None:
        from evdb.grpc.features import ServerFeaturesService

        services = list(handlers)
        super().__init__([*services, ServerFeaturesService(services)])
        #: the largest request message read (HttpMaxRequestBodySize): a larger one is refused before
        #: any of it is read (grpclib would gather all of it, up to 4 GiB, whatever its size)
        self.max_message = max_message
        self._calls = calls  # evdb.metrics.GrpcCalls: counted by _handle_call (None: not counted)

    def _protocol_factory(self) -> H2Protocol:
        # as grpclib's own, with evdb's call handler (see the class docstring)
        self.__gc_step__()
        handler = _CallHandler(self._mapping, self._codec, self._status_details_codec, self.__dispatch__)
        handler.max_message = self.max_message
        handler.calls = self._calls
        self._handlers.add(handler)
        return _QuietH2Protocol(handler, self._config, self._h2_config)


class _QuietH2Connection(h2.connection.H2Connection):
    """h2's connection without its per-frame trace line: h2 4.x calls
    ``config.logger.trace("Received frame: %s", repr(frame))`` for every frame received, so the text
    of each frame is built whatever the logger does with it. The rest is h2's own handling of a
    received frame (a frame for a stream reset before is answered with RST_STREAM; on a stream that
    ended, or was never opened, it is a connection error)."""

    def _receive_frame(self, frame: Any) -> list[Any]:
        try:
            frames, events = self._frame_dispatch_table[frame.__class__](frame)
        except h2.exceptions.StreamClosedError as exc:
            if not self._stream_is_closed_by_reset(exc.stream_id):
                raise
            reset = RstStreamFrame(exc.stream_id)
            reset.error_code = exc.error_code
            self._prepare_for_sending([reset])
            return exc._events
        except h2.exceptions.StreamIDTooLowError as exc:
            if self._stream_is_closed_by_reset(exc.stream_id):
                reset = RstStreamFrame(exc.stream_id)
                reset.error_code = ErrorCodes.STREAM_CLOSED
                self._prepare_for_sending([reset])
                return []
            if self._stream_is_closed_by_end(exc.stream_id):
                raise h2.exceptions.StreamClosedError(exc.stream_id) from exc
            raise
        self._prepare_for_sending(frames)
        return events


#: the h2 release whose ``_receive_frame`` :class:`_QuietH2Connection` restates (4.x); with another
#: h2, its own connection is used as it is
_QUIET_H2 = h2.__version__.split(".")[0] == "4"


class _QuietH2Protocol(H2Protocol):
    """grpclib's HTTP/2 protocol, its h2 connection a :class:`_QuietH2Connection` (with h2 4.x)."""

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        connection = self.connection._connection
        if _QUIET_H2 and type(connection) is h2.connection.H2Connection:
            # the same object and state, without the per-frame trace text (no state of its own)
            connection.__class__ = _QuietH2Connection


class _CallHandler(Handler):
    """grpclib's handler, running :func:`_handle_call` for each call."""

    max_message = 0  # set by KurrentServer._protocol_factory
    calls: Any = None  # evdb.metrics.GrpcCalls

    def accept(self, stream: Any, headers: Any, release_stream: Callable[[], Any]) -> None:
        self.__gc_step__()
        self._tasks[stream] = self.loop.create_task(_handle_call(self, stream, headers, release_stream))


class _LoopWrapper(Wrapper):
    """grpclib's ``Wrapper`` (what cancels a call's awaits when its stream is reset), finding the
    current task through the loop it is given: ``asyncio.current_task()`` without a loop asks
    ``get_running_loop()``, which on Python 3.11 calls ``getpid()`` each time."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._loop = loop

    def __enter__(self) -> None:
        if self._error is not None:
            raise self._error
        task = asyncio.current_task(self._loop)
        if task is None:
            raise RuntimeError("Called not inside a task")
        self._tasks.add(task)

    def __exit__(self, exc_type: Any, exc_val: Any, exc_tb: Any) -> None:
        task = asyncio.current_task(self._loop)
        assert task
        self._tasks.discard(task)
        if self._error is not None:
            self.cancel_failed = exc_type is not asyncio.CancelledError
            raise self._error


class _LoopDeadlineWrapper(_LoopWrapper, DeadlineWrapper):
    """grpclib's ``DeadlineWrapper`` (a call with a ``grpc-timeout``), as :class:`_LoopWrapper`."""


#: the trailers of a call that ends OK without trailing metadata, built once
_OK_TRAILERS = (("grpc-status", str(Status.OK.value)),)


class _CallStream(Stream):
    """grpclib's server ``Stream``; the plain headers and OK trailers (no metadata, no listeners for
    them) are sent from lists built once, and a message goes in or out without grpclib's event (an
    await of a no-op) when nothing listens to it; the rest as grpclib does it."""

    max_message = DEFAULT_MAX_MESSAGE
    calls: Any = None  # evdb.metrics.GrpcCalls: told of the status the call ends with

    async def recv_message(self) -> Any:
        if self._dispatch._listeners.get(RecvMessage):
            return await super().recv_message()
        message = await self._bounded_message()
        if message is not None:
            self._messages_received += 1
            connection = self._stream.connection
            connection.messages_received += 1
            connection.last_message_received = time.monotonic()
        return message

    async def _bounded_message(self) -> Any:
        """grpclib's ``recv_message`` (a length-prefixed message), refusing a compressed message
        (evdb offers no grpc-encoding) and one longer than :attr:`max_message` before reading it."""
        stream = self._stream
        prefix = await stream.recv_data(5)
        if not prefix:
            return None
        compressed, length = struct.unpack(">?I", prefix)
        if compressed:
            raise GRPCError(
                Status.UNIMPLEMENTED, "Compressed messages are not supported: send them uncompressed."
            )
        if length > self.max_message:
            raise GRPCError(
                Status.RESOURCE_EXHAUSTED,
                f"Received message larger than max ({length} vs. {self.max_message}; HttpMaxRequestBodySize)",
            )
        return self._codec.decode(await stream.recv_data(length), self._recv_type)

    async def send_message(self, message: Any) -> None:
        if self._dispatch._listeners.get(SendMessage):
            await super().send_message(message)
            return
        if not self._send_initial_metadata_done:
            await self.send_initial_metadata()
        if not self._cardinality.server_streaming and self._send_message_done:
            raise ProtocolError("Message was already sent")
        await _send_message(self._stream, self._codec, message, self._send_type)
        self._send_message_done = True
        self._messages_sent += 1
        connection = self._stream.connection
        connection.messages_sent += 1
        connection.last_message_sent = time.monotonic()

    async def send_initial_metadata(self, *, metadata: Any = None) -> None:
        if metadata or self._dispatch._listeners.get(SendInitialMetadata):
            await super().send_initial_metadata(metadata=metadata)
            return
        if self._send_initial_metadata_done:
            raise ProtocolError("Initial metadata was already sent")
        await self._stream.send_headers([(":status", "200"), ("content-type", self._content_type)])
        self._send_initial_metadata_done = True

    async def send_trailing_metadata(
        self,
        *,
        status: Status = Status.OK,
        status_message: str | None = None,
        status_details: Any = None,
        metadata: Any = None,
    ) -> None:
        if status is not Status.OK and self.calls is not None and not self._send_trailing_metadata_done:
            self.calls.ended(status)
        if (
            status is not Status.OK
            or status_message is not None
            or status_details is not None
            or metadata
            or not self._send_initial_metadata_done
            or self._send_trailing_metadata_done
            or not (self._send_message_done or self._cardinality.server_streaming)
            or self._dispatch._listeners.get(SendTrailingMetadata)
        ):
            await super().send_trailing_metadata(
                status=status, status_message=status_message, status_details=status_details, metadata=metadata
            )
            return
        await self._stream.send_headers(list(_OK_TRAILERS), end_stream=True)
        self._send_trailing_metadata_done = True


async def _handle_call(
    handler: _CallHandler, h2_stream: Any, headers: list[tuple[str, str]], release_stream: Callable[[], Any]
) -> None:
    """grpclib's ``request_handler`` (the same checks, answers and log lines, in the same order), with:

    * a call whose ``grpc-timeout`` has already passed answered ``DEADLINE_EXCEEDED`` (see
      :class:`KurrentServer`); without a ``grpc-timeout`` header no deadline work at all;
    * a :class:`KurrentError` answered with its trailers (``exception``, ...);
    * the ``RecvRequest`` event made only when something listens to it;
    * :class:`_LoopWrapper` and :class:`_CallStream` (no ``getpid()`` per await, headers built once).
    """
    calls = getattr(handler, "calls", None)
    if calls is not None:
        calls.total += 1
        calls.current += 1
    try:
        headers_map = dict(headers)
        deadline: Deadline | None = None
        if "grpc-timeout" in headers_map:
            try:
                timeout = min(decode_timeout(value) for key, value in headers if key == "grpc-timeout")
            except ValueError:
                timeout = None  # malformed: answered below, in grpclib's order
            if timeout is not None and timeout < DEADLINE_FLOOR:
                if calls is not None:
                    calls.ended(Status.DEADLINE_EXCEEDED)
                await _answer_deadline_exceeded(h2_stream)
                return
        if headers_map[":method"] != "POST":
            await _abort(h2_stream, 405)
            return
        content_type = headers_map.get("content-type")
        if content_type is None:
            await _abort(h2_stream, 415, Status.UNKNOWN, "Missing content-type header")
            return
        codec = handler.codec
        base_content_type, _, sub_type = content_type.partition("+")
        sub_type = sub_type or ProtoCodec.__content_subtype__
        if base_content_type != GRPC_CONTENT_TYPE or sub_type != codec.__content_subtype__:
            await _abort(h2_stream, 415, Status.UNKNOWN, "Unacceptable content-type header")
            return
        if headers_map.get("te") != "trailers":
            await _abort(h2_stream, 400, Status.UNKNOWN, 'Required "te: trailers" header is missing')
            return
        method_name = headers_map[":path"]
        method = handler.mapping.get(method_name)
        if method is None:
            if calls is not None:
                calls.ended(Status.UNIMPLEMENTED)
            await _abort(h2_stream, 200, Status.UNIMPLEMENTED, "Method not found")
            return
        if "grpc-timeout" in headers_map:
            try:
                deadline = Deadline.from_headers(headers)
            except ValueError:
                if calls is not None:
                    calls.ended(Status.UNKNOWN)
                await _abort(h2_stream, 200, Status.UNKNOWN, "Invalid grpc-timeout header")
                return
        metadata = decode_metadata(headers)
        user_agent = headers_map.get("user-agent")
        dispatch = handler.dispatch
        call_stream = _CallStream(
            h2_stream,
            method_name,
            method.cardinality,
            method.request_type,
            method.reply_type,
            codec=codec,
            status_details_codec=handler.status_details_codec,
            dispatch=dispatch,
            deadline=deadline,
            user_agent=user_agent,
        )
        call_stream.max_message = handler.max_message
        call_stream.calls = calls
        async with call_stream as stream:
            wrapper: _LoopWrapper
            deadline_wrapper: contextlib.AbstractContextManager[Any]
            if deadline is None:
                wrapper = h2_stream.wrapper = _LoopWrapper(handler.loop)
                deadline_wrapper = contextlib.nullcontext()
            else:
                wrapper = h2_stream.wrapper = _LoopDeadlineWrapper(handler.loop)
                deadline_wrapper = wrapper.start(deadline)
            try:
                with deadline_wrapper, wrapper:
                    method_func = method.func
                    if dispatch._listeners.get(RecvRequest):
                        stream.metadata, method_func = await dispatch.recv_request(
                            metadata,
                            method_func,
                            method_name=method_name,
                            deadline=deadline,
                            content_type=content_type,
                            user_agent=user_agent,
                            peer=stream.peer,
                        )
                    else:
                        stream.metadata = metadata
                    try:
                        await method_func(stream)
                    except KurrentError as exc:
                        if stream._send_trailing_metadata_done:  # answered already: logged below
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
            except GRPCError:
                raise
            except TimeoutError:
                if wrapper.cancel_failed:
                    _server_log.exception("Failed to handle cancellation")
                    raise GRPCError(Status.DEADLINE_EXCEEDED) from None
                elif wrapper.cancelled:
                    _server_log.info("Deadline exceeded")
                    raise GRPCError(Status.DEADLINE_EXCEEDED) from None
                else:
                    _server_log.exception("Timeout occurred")
                    raise
            except StreamTerminatedError as err:
                if wrapper.cancel_failed:
                    _server_log.exception("Failed to handle cancellation")
                    raise
                else:
                    assert wrapper.cancelled
                    _server_log.info("Request was cancelled: %s", err)
                    raise
            except Exception:
                _server_log.exception("Application error")
                raise
    except ProtocolError:
        _server_log.exception("Application error")
    except Exception:
        _server_log.exception("Server error")
    finally:
        if calls is not None:
            calls.current -= 1
        release_stream()


async def _answer_deadline_exceeded(stream: Any) -> None:
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
