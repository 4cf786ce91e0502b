"""The gRPC call's own cost (issue 24) without a change of answer: a signed-in ``Authorization`` header
is found again with one lookup and forgotten at every change of a user; evdb's call handler answers
malformed calls as grpclib does, ends an OK call with the trailers grpclib sends, and a reset stream
still cancels the call's awaits (the wrapper finds its task through the loop it is given)."""

from __future__ import annotations

import asyncio
import base64
import socket
from collections.abc import Iterator

import h2.connection
import h2.events
import pytest
from h2.config import H2Configuration
from hpack import Encoder
from hyperframe.frame import DataFrame, Frame, HeadersFrame
from kurrentdbclient.protos.v1 import shared_pb2, streams_pb2

from evdb.auth import UserStore
from evdb.database import Database
from evdb.grpc.server import _LoopWrapper
from tests.clients.conftest import NodeThread, node_options
from tests.hash_cost import SUITE_COST

APPEND = "/event_store.client.streams.Streams/Append"


def basic(login: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{login}:{password}".encode()).decode()


# -- the header cache ------------------------------------------------------------------------------------
@pytest.fixture
def users() -> Iterator[UserStore]:
    db = Database.open(None)
    store = UserStore(db, cache_size=2, hash_cost=SUITE_COST)
    store.ensure_defaults()
    store.create("alice", "Alice", ["readers"], "alice-password")
    yield store
    db.close()


async def test_a_signed_in_header_is_found_again_until_a_user_changes(users):
    header = basic("alice", "alice-password")
    assert users.by_header(header) is None
    principal = await users.sign_in_header(header, "alice", "alice-password")
    assert principal is not None and principal.name == "alice"
    assert users.by_header(header) == principal
    assert users.by_header(header + " ") is None  # the value as received, nothing else

    users.reset_password("alice", "new-password")  # any change of a user forgets every header
    assert users.by_header(header) is None
    assert await users.sign_in_header(header, "alice", "alice-password") is None
    assert users.by_header(header) is None  # a refused header is not remembered


async def test_cached_credentials_are_remembered_under_their_header_again_after_a_change(users):
    """After a user changes, every header is forgotten while the other users' credentials stay cached:
    the next look-up on the loop (principal_now, as HTTP, the lean path and gRPC do) finds them there
    and remembers the header again, so later requests take one dict lookup."""
    alice, admin = basic("alice", "alice-password"), basic("admin", "changeit")
    assert await users.sign_in_header(admin, "admin", "changeit") is not None
    users.update("alice", "Alice", ["readers"])  # forgets every header, keeps admin's credentials
    assert users.by_header(admin) is None
    principal = users.principal_now(admin)
    assert principal is not None and principal.name == "admin"
    assert users.by_header(admin) == principal
    assert users.principal_now(alice) is None  # never signed in: a sign-in is needed
    assert users.principal_now("Basic not-base64!") is None  # malformed


async def test_a_change_during_the_sign_in_is_not_remembered_and_the_cache_is_bounded(users, monkeypatch):
    header = basic("alice", "alice-password")
    real = users.authenticate

    def changed_meanwhile(login: str, password: str, *, leased: bool = True):
        principal = real(login, password, leased=leased)
        users.update("admin", "Administrator", ["$admins"])  # a change that lands during the sign-in
        return principal

    monkeypatch.setattr(users, "authenticate", changed_meanwhile)
    assert await users.sign_in_header(header, "alice", "alice-password") is not None
    assert users.by_header(header) is None
    monkeypatch.undo()

    headers = [basic("alice", "alice-password"), basic("admin", "changeit"), basic("ops", "changeit")]
    for h in headers:
        login, _, password = base64.b64decode(h[6:]).decode().partition(":")
        assert await users.sign_in_header(h, login, password) is not None
    assert users.by_header(headers[0]) is None  # cache_size 2: the oldest went
    assert users.by_header(headers[1]) is not None and users.by_header(headers[2]) is not None


# -- the call handler, seen from a bare HTTP/2 client ----------------------------------------------------
@pytest.fixture(scope="module")
def node(tmp_path_factory) -> Iterator[NodeThread]:
    thread = NodeThread(node_options(tmp_path_factory.mktemp("calls"), "--insecure"), name="calls").start()
    yield thread
    thread.stop()


def call(node: NodeThread, headers: list[tuple[str, str]], body: bytes) -> list[list[tuple[str, str]]]:
    """One call over a bare HTTP/2 connection: the header blocks of the answer (headers, trailers)."""
    with socket.create_connection(("localhost", node.port), timeout=20) as sock:
        connection = h2.connection.H2Connection()
        connection.initiate_connection()
        connection.send_headers(1, headers)
        connection.send_data(1, body, end_stream=True)
        sock.sendall(connection.data_to_send())
        blocks: list[list[tuple[str, str]]] = []
        while True:
            data = sock.recv(65536)
            assert data, "the server closed the connection without an answer"
            for event in connection.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived | h2.events.TrailersReceived):
                    blocks.append([(k.decode(), v.decode()) for k, v in event.headers])
                if isinstance(event, h2.events.StreamEnded | h2.events.StreamReset):
                    return blocks
            sock.sendall(connection.data_to_send())


def grpc_headers(node: NodeThread, changes: dict[str, str | None] | None = None) -> list[tuple[str, str]]:
    headers = {
        ":method": "POST",
        ":scheme": "http",
        ":path": APPEND,
        ":authority": f"localhost:{node.port}",
        "content-type": "application/grpc",
        "te": "trailers",
    }
    for key, value in (changes or {}).items():
        if value is None:
            headers.pop(key, None)
        else:
            headers[key] = value
    return list(headers.items())


def append_body(stream: str) -> bytes:
    options = streams_pb2.AppendReq(
        options=streams_pb2.AppendReq.Options(
            stream_identifier=shared_pb2.StreamIdentifier(stream_name=stream.encode()),
            any=shared_pb2.Empty(),
        )
    )
    event = streams_pb2.AppendReq(
        proposed_message=streams_pb2.AppendReq.ProposedMessage(
            id=shared_pb2.UUID(string="0b7d2c1c-6a0e-4d3b-9f49-3f1c1d2b8a11"),
            metadata={"type": "Happened", "content-type": "application/json"},
            data=b"{}",
        )
    )
    parts = [m.SerializeToString() for m in (options, event)]
    return b"".join(b"\x00" + len(p).to_bytes(4, "big") + p for p in parts)


def test_an_ok_call_ends_with_grpclibs_headers_and_trailers(node):
    blocks = call(node, grpc_headers(node), append_body("call-cost-ok"))
    assert blocks == [
        [(":status", "200"), ("content-type", "application/grpc+proto")],
        [("grpc-status", "0")],
    ]


@pytest.mark.parametrize(
    ("changes", "status", "grpc_status", "message"),
    [
        ({":method": "GET"}, "405", None, None),
        ({"content-type": None}, "415", "2", "Missing content-type header"),
        ({"content-type": "text/plain"}, "415", "2", "Unacceptable content-type header"),
        ({"te": None}, "400", "2", 'Required "te: trailers" header is missing'),
        ({":path": "/nowhere.Nothing/Never"}, "200", "12", "Method not found"),
        ({"grpc-timeout": "soon"}, "200", "2", "Invalid grpc-timeout header"),
        ({"grpc-timeout": "0n"}, "200", "4", "Deadline Exceeded"),
    ],
)
def test_malformed_calls_are_answered_as_grpclib_answers_them(node, changes, status, grpc_status, message):
    blocks = call(node, grpc_headers(node, changes), append_body("call-cost-bad"))
    answer = dict(blocks[0])
    assert answer[":status"] == status
    assert answer.get("grpc-status") == grpc_status
    assert answer.get("grpc-message") == message


def test_a_call_with_time_left_is_served(node):
    blocks = call(node, grpc_headers(node, {"grpc-timeout": "10S"}), append_body("call-cost-timeout"))
    assert blocks[-1] == [("grpc-status", "0")]


async def test_the_wrapper_cancels_the_awaits_of_its_task():
    wrapper = _LoopWrapper(asyncio.get_running_loop())
    entered = asyncio.Event()

    async def waits() -> None:
        with wrapper:
            entered.set()
            await asyncio.Event().wait()

    task = asyncio.create_task(waits())
    await entered.wait()
    wrapper.cancel(ConnectionError("reset"))
    with pytest.raises(ConnectionError):
        await task
    assert wrapper.cancelled and not wrapper.cancel_failed
    with pytest.raises(ConnectionError), wrapper:  # a later await of the call fails at once
        pass


# -- h2 without the per-frame trace text -----------------------------------------------------------------
REQUEST = [(":method", "POST"), (":scheme", "http"), (":path", "/s/m"), (":authority", "x")]


def _exchange(server_class: type, script: str, texts: list[int]) -> list[str]:
    """What a server connection of ``server_class`` answers to a scripted client: its events (by
    name), the bytes it sends and the error it raises, step by step. ``texts`` gets the number of
    frame texts (``Frame.__repr__``) built while the server received."""
    server = server_class(config=H2Configuration(client_side=False, header_encoding="ascii"))
    server.initiate_connection()
    client = h2.connection.H2Connection()
    client.initiate_connection()
    seen: list[str] = []

    def deliver(raw: bytes = b"") -> None:
        before = _REPRS[0]
        try:
            events = server.receive_data(client.data_to_send() + raw)
            seen.append(" ".join(type(e).__name__ for e in events))
        except Exception as exc:
            seen.append(type(exc).__name__)
        texts.append(_REPRS[0] - before)
        out = server.data_to_send()
        seen.append(out.hex())
        client.receive_data(out)

    deliver()
    client.send_headers(1, REQUEST)
    client.send_data(1, b"request")
    deliver()
    if script == "reset":  # the server resets the stream while the client's data is on its way
        server.reset_stream(1)
        deliver(DataFrame(1, b"late").serialize())
    elif script == "ended":  # both sides ended the stream, then more data comes
        client.end_stream(1)
        deliver()
        server.send_headers(1, [(":status", "200")], end_stream=True)
        deliver(DataFrame(1, b"late").serialize())
    elif script == "too-low":  # stream 5 opens, then a request on stream 3
        client.send_headers(5, REQUEST, end_stream=True)
        deliver()
        headers = HeadersFrame(3, Encoder().encode(REQUEST), flags=["END_HEADERS", "END_STREAM"])
        deliver(headers.serialize())
    return seen


_REPRS = [0]


@pytest.mark.parametrize("script", ["plain", "reset", "ended", "too-low"])
def test_the_quiet_h2_connection_answers_as_h2_does_without_building_frame_text(script, monkeypatch):
    from evdb.grpc.server import _QuietH2Connection

    real = Frame.__repr__

    def counted(frame: Frame) -> str:
        _REPRS[0] += 1
        return real(frame)

    monkeypatch.setattr(Frame, "__repr__", counted)
    h2_texts: list[int] = []
    quiet_texts: list[int] = []
    assert _exchange(_QuietH2Connection, script, quiet_texts) == _exchange(
        h2.connection.H2Connection, script, h2_texts
    )
    assert sum(h2_texts) > 0 and sum(quiet_texts) == 0
