"""gRPC Read answers written a page at a time (evdb.grpc.server.MessageWriter), seen from a bare HTTP/2
client (h2) on a real node: a page of events shares DATA frames instead of one frame (and one socket
write) per event; a peer with a small flow-control window still gets every event, in order, with the
trailers last (h2 refuses a frame beyond its window, so an overrun fails the test); messages larger
than a frame arrive whole; a subscription's catch-up page and its live events arrive the same way."""

from __future__ import annotations

import json
import socket
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import h2.connection
import h2.events
import h2.settings
import pytest
from kurrentdbclient import KurrentDBClient, NewEvent, StreamState
from kurrentdbclient.protos.v1 import streams_pb2

from tests.clients.conftest import NodeThread, insecure_node
from tests.grpc.read_requests import stream_read

READ = "/event_store.client.streams.Streams/Read"
FRAME = 16_384  # HTTP/2's default (and h2's) largest frame


@pytest.fixture(scope="module")
def node(tmp_path_factory) -> Iterator[NodeThread]:
    yield from insecure_node(tmp_path_factory, "pages")


@pytest.fixture(scope="module")
def client(node) -> Iterator[KurrentDBClient]:
    with KurrentDBClient(f"kurrentdb://localhost:{node.port}?tls=false") as c:
        yield c


def append(client: KurrentDBClient, stream: str, count: int, size: int = 40, per_append: int = 100) -> None:
    events = [
        NewEvent(type="Paged", data=json.dumps({"n": i, "pad": "x" * size}).encode()) for i in range(count)
    ]
    for start in range(0, count, per_append):
        client.append_to_stream(
            stream, events=events[start : start + per_append], current_version=StreamState.ANY
        )


@dataclass
class Answer:
    messages: list[streams_pb2.ReadResp] = field(default_factory=list)
    frames: list[int] = field(default_factory=list)  # each DATA frame's length, in arrival order
    trailers: dict[str, str] = field(default_factory=dict)
    events_after_trailers: int = 0


def raw_read(
    port: int,
    request: streams_pb2.ReadReq,
    *,
    window: int = 65_535,
    done: Callable[[Answer], bool] | None = None,
    on_message: Callable[[Answer], None] | None = None,
) -> Answer:
    """One Read over a bare HTTP/2 connection whose stream and connection windows are ``window`` bytes
    (the client gives back what it has read, as a gRPC client does); until the trailers, or ``done``."""
    answer = Answer()
    buffer = bytearray()
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        connection = h2.connection.H2Connection()
        connection.local_settings = h2.settings.Settings(
            client=True, initial_values={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window}
        )
        connection.initiate_connection()
        connection.send_headers(
            1,
            [
                (":method", "POST"),
                (":scheme", "http"),
                (":path", READ),
                (":authority", f"127.0.0.1:{port}"),
                ("content-type", "application/grpc"),
                ("te", "trailers"),
            ],
        )
        body = request.SerializeToString()
        connection.send_data(1, b"\x00" + len(body).to_bytes(4, "big") + body, end_stream=True)
        sock.sendall(connection.data_to_send())
        while not answer.trailers:
            data = sock.recv(65_536)
            assert data, "the server closed the connection before the trailers"
            for event in connection.receive_data(data):  # h2 raises on a frame beyond its window
                if isinstance(event, h2.events.DataReceived):
                    if answer.trailers:
                        answer.events_after_trailers += 1
                    answer.frames.append(len(event.data))
                    buffer += event.data
                    connection.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                    while len(buffer) >= 5 and len(buffer) >= 5 + int.from_bytes(buffer[1:5], "big"):
                        size = int.from_bytes(buffer[1:5], "big")
                        answer.messages.append(streams_pb2.ReadResp.FromString(bytes(buffer[5 : 5 + size])))
                        del buffer[: 5 + size]
                        if on_message is not None:
                            on_message(answer)
                elif isinstance(event, h2.events.TrailersReceived):
                    answer.trailers = {k.decode(): v.decode() for k, v in event.headers}
                elif isinstance(event, h2.events.StreamReset):
                    raise AssertionError(f"the server reset the stream: {event.error_code!r}")
            sock.sendall(connection.data_to_send())
            if done is not None and done(answer):
                break
    assert not buffer, "a message was cut short"
    return answer


def numbers(answer: Answer) -> list[int]:
    return [
        json.loads(m.event.event.data)["n"] for m in answer.messages if m.WhichOneof("content") == "event"
    ]


def test_a_read_page_shares_data_frames(node, client):
    stream = f"paged-{uuid.uuid4().hex[:8]}"
    append(client, stream, 300)
    answer = raw_read(node.port, stream_read(stream))
    assert answer.trailers.get("grpc-status") == "0"
    assert numbers(answer) == list(range(300))
    # about 200 bytes a message, 300 messages: a few full frames, not one frame per event (as before)
    assert len(answer.frames) <= sum(answer.frames) // FRAME + 3, answer.frames
    assert max(answer.frames) <= FRAME


def test_a_small_window_is_respected_and_nothing_is_lost_or_reordered(node, client):
    stream = f"window-{uuid.uuid4().hex[:8]}"
    append(client, stream, 700)  # more than a page (512) and a first page on the loop (128)
    answer = raw_read(node.port, stream_read(stream), window=1_000)
    assert answer.trailers.get("grpc-status") == "0"
    assert numbers(answer) == list(range(700))
    assert max(answer.frames) <= 1_000  # never beyond the window the client gave


def test_messages_larger_than_a_frame_arrive_whole(node, client):
    stream = f"large-{uuid.uuid4().hex[:8]}"
    append(client, stream, 8, size=40_000, per_append=1)  # the tests' chunks are 64 KiB
    answer = raw_read(node.port, stream_read(stream), window=70_000)
    assert answer.trailers.get("grpc-status") == "0"
    assert numbers(answer) == list(range(8))
    assert all(len(m.event.event.data) > 40_000 for m in answer.messages)


def test_a_missing_stream_answers_stream_not_found_then_ok(node):
    answer = raw_read(node.port, stream_read(f"missing-{uuid.uuid4().hex[:8]}"))
    assert [m.WhichOneof("content") for m in answer.messages] == ["stream_not_found"]
    assert answer.trailers.get("grpc-status") == "0"


def test_a_subscription_sends_its_catch_up_page_together_then_live_events(node, client):
    stream = f"sub-{uuid.uuid4().hex[:8]}"
    append(client, stream, 300)
    appended_live = False

    def live_after_caught_up(answer: Answer) -> None:
        nonlocal appended_live
        if answer.messages[-1].WhichOneof("content") == "caught_up" and not appended_live:
            appended_live = True
            append(client, stream, 1)  # a live event: its number is 0 (append restarts numbering "n")

    answer = raw_read(
        node.port,
        stream_read(stream, subscribe=True),
        window=4_000,
        done=lambda a: sum(m.WhichOneof("content") == "event" for m in a.messages) == 301,
        on_message=live_after_caught_up,
    )
    kinds = [m.WhichOneof("content") for m in answer.messages]
    assert kinds[0] == "confirmation"
    assert kinds[1:301] == ["event"] * 300
    assert kinds[301] == "caught_up"
    assert kinds[302:] == ["event"]
    assert numbers(answer) == [*range(300), 0]
    revisions = [m.event.event.stream_revision for m in answer.messages if m.WhichOneof("content") == "event"]
    assert revisions == list(range(301))
    # the 300 catch-up events (about 62 KB) came in window-sized frames, not one frame per event
    assert len(answer.frames) < 60, answer.frames
