"""A lean sequential gRPC client for the node's latency: one HTTP/2 connection, one Streams/Append of
one new event at a time, each frame written by hand (no grpcio, no kurrentdbclient).

kurrentdbclient's own CPU per call (0.4-0.6 ms) is most of its sequential p50 on loopback; this client
spends a few tens of microseconds per call, so its p50 is the node's round trip. Every call appends an
event with a new id (a real write, fdatasync included), and its trailers must carry grpc-status 0.

Run by bench_grpc.py as a process of its own (its CPU is measured apart from the node's):

    python bench/grpc_lean.py URL CA|- STREAM SECONDS USER PASSWORD

It prints "ready" after its first append, reads the start time (a Unix time) from its standard input,
appends from then for SECONDS and prints one JSON line: calls, seconds, cpu, latencies.
"""

from __future__ import annotations

import base64
import json
import socket
import ssl
import struct
import sys
import time
import uuid
from collections.abc import Callable
from urllib.parse import urlsplit

import hpack

APPEND = "/event_store.client.streams.Streams/Append"
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE = 0x0, 0x1, 0x3, 0x4, 0x6, 0x7, 0x8
END_STREAM, ACK, END_HEADERS = 0x1, 0x1, 0x4
CONNECTION_WINDOW = 1 << 30


def frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes((kind, flags)) + struct.pack(">I", stream) + payload


def _hpack_int(value: int) -> bytes:
    """An HPACK integer with a 7-bit prefix (a string's length, Huffman bit clear)."""
    if value < 127:
        return bytes((value,))
    out = bytearray((127,))
    value -= 127
    while value >= 128:
        out.append((value & 127) | 128)
        value >>= 7
    out.append(value)
    return bytes(out)


def header_block(headers: list[tuple[str, str]]) -> bytes:
    """Literal header fields without indexing and with new names: the same bytes are valid on every
    stream (the server's decoding table never changes), so one block serves every call."""
    out = bytearray()
    for name, value in headers:
        out += b"\x00" + _hpack_int(len(name)) + name.encode() + _hpack_int(len(value)) + value.encode()
    return bytes(out)


def grpc_message(payload: bytes) -> bytes:
    return b"\x00" + struct.pack(">I", len(payload)) + payload


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 128:
        out.append((value & 127) | 128)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def append_options(stream: str) -> bytes:
    """AppendReq{options{stream_identifier{stream_name}, any{}}} (event_store.client.streams)."""
    identifier = _field(3, stream.encode())  # StreamIdentifier.stream_name = 3
    options = _field(1, identifier) + _field(4, b"")  # Options.stream_identifier = 1, any = 4
    return grpc_message(_field(1, options))  # AppendReq.options = 1


def proposed_message(event_id: uuid.UUID, data: bytes) -> bytes:
    """AppendReq{proposed_message{id{string}, metadata{type, content-type}, data}}."""
    uid = _field(2, str(event_id).encode())  # UUID.string = 2
    metadata = b"".join(
        _field(2, _field(1, key.encode()) + _field(2, value.encode()))  # map entry: key 1, value 2
        for key, value in (("type", "BenchEvent"), ("content-type", "application/json"))
    )
    message = _field(1, uid) + metadata + _field(4, data)  # id = 1, metadata = 2, data = 4
    return grpc_message(_field(2, message))  # AppendReq.proposed_message = 2


class LeanClient:
    def __init__(self, url: str, ca: str | None, user: str, password: str) -> None:
        parts = urlsplit(url)
        host, port = parts.hostname or "127.0.0.1", parts.port or 2113
        sock = socket.create_connection((host, port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if parts.scheme == "https":
            context = ssl.create_default_context(cafile=ca)
            context.set_alpn_protocols(["h2"])
            sock = context.wrap_socket(sock, server_hostname=host)
            if sock.selected_alpn_protocol() != "h2":
                raise SystemExit(f"{url}: the server did not choose h2 by ALPN")
        self.sock = sock
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        self.headers = header_block(
            [
                (":method", "POST"),
                (":scheme", parts.scheme),
                (":path", APPEND),
                (":authority", f"{host}:{port}"),
                ("content-type", "application/grpc"),
                ("te", "trailers"),
                ("authorization", f"Basic {token}"),
            ]
        )
        self.decoder = hpack.Decoder()
        self.buffer = bytearray()
        self.stream = 1
        self.received = 0
        sock.sendall(
            PREFACE
            + frame(SETTINGS, 0, 0, b"")
            + frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", CONNECTION_WINDOW - 65535))
        )

    def append(self, options: bytes, data: bytes) -> None:
        """One Append call: headers, the two messages, end of stream; waits for its trailers."""
        stream = self.stream
        self.stream += 2
        body = options + proposed_message(uuid.uuid4(), data)
        self.sock.sendall(
            frame(HEADERS, END_HEADERS, stream, self.headers) + frame(DATA, END_STREAM, stream, body)
        )
        status = None
        block = b""
        while True:
            kind, flags, sid, payload = self._frame()
            if kind == HEADERS:
                block = payload
                if not flags & END_HEADERS:
                    raise SystemExit("header blocks continued in CONTINUATION frames are not handled")
                fields = dict(self.decoder.decode(block))
                status = fields.get("grpc-status", status)
                if sid == stream and flags & END_STREAM:
                    if status != "0":
                        raise SystemExit(f"Append answered grpc-status {status}: {fields}")
                    return
            elif kind == DATA:
                self.received += len(payload)
                if self.received > CONNECTION_WINDOW // 2:
                    self.sock.sendall(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", self.received)))
                    self.received = 0
                if sid == stream and flags & END_STREAM:
                    raise SystemExit("the stream ended without trailers")
            elif kind == SETTINGS and not flags & ACK:
                self.sock.sendall(frame(SETTINGS, ACK, 0, b""))
            elif kind == PING and not flags & ACK:
                self.sock.sendall(frame(PING, ACK, 0, payload))
            elif kind in (RST_STREAM, GOAWAY):
                raise SystemExit(
                    f"the server sent {'RST_STREAM' if kind == RST_STREAM else 'GOAWAY'}: {payload!r}"
                )

    def _frame(self) -> tuple[int, int, int, bytes]:
        while True:
            if len(self.buffer) >= 9:
                length = int.from_bytes(self.buffer[:3], "big")
                if len(self.buffer) >= 9 + length:
                    kind, flags = self.buffer[3], self.buffer[4]
                    sid = int.from_bytes(self.buffer[5:9], "big") & 0x7FFFFFFF
                    payload = bytes(self.buffer[9 : 9 + length])
                    del self.buffer[: 9 + length]
                    return kind, flags, sid, payload
            chunk = self.sock.recv(65536)
            if not chunk:
                raise SystemExit("the server closed the connection")
            self.buffer += chunk


def timed_calls(call: Callable[[], object], seconds: float) -> dict:
    """A benchmark client process's protocol (bench_grpc.py's workers): make one call, print "ready",
    read the start time (a Unix time) from standard input, call from then on for ``seconds``; the
    calls, their latencies and this process's CPU time over them."""
    call()
    print("ready", flush=True)
    start_at = float(sys.stdin.readline())
    time.sleep(max(0.0, start_at - time.time()))
    latencies = []
    cpu0 = time.process_time()
    started = time.perf_counter()
    end = started + seconds
    while (now := time.perf_counter()) < end:
        call()
        latencies.append(time.perf_counter() - now)
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu0
    return {"calls": len(latencies), "seconds": elapsed, "cpu": cpu, "latencies": latencies}


def main() -> None:
    url, ca, stream, seconds, user, password = sys.argv[1:7]
    client = LeanClient(url, None if ca == "-" else ca, user, password)
    options = append_options(stream)
    data = b'{"account":"acc-17","amount":25,"currency":"EUR","note":"single-event append, lean client"}'
    print(json.dumps(timed_calls(lambda: client.append(options, data), float(seconds))))


if __name__ == "__main__":
    main()
