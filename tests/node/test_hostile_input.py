"""Hostile input over HTTP and gRPC gets a clear 4xx / INVALID_ARGUMENT and changes nothing.

Issue 20, items 2 (metadata numbers beyond 64 bits), 4 ($all positions of 32 decimal digits) and 7
(deep JSON, NaN, scavenge parameters, a 5,000-byte stream name over gRPC, $acl role lists, a backup
folder with a NUL byte).
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from urllib.parse import urlsplit

import grpc
import pytest
from kurrentdbclient.protos.v1 import shared_pb2, streams_pb2

from evdb.grpc import operations_pb2
from evdb.streams import NewEvent

EVENTS = "application/vnd.kurrent.events+json"
STREAMS = "/event_store.client.streams.Streams/"
OPERATIONS = "/event_store.client.operations.Operations/"
DEEP = b"[" * 3000 + b"]" * 3000
DEEP_OBJECT = b'{"a":' * 3000 + b"1" + b"}" * 3000


def events_body(data=None, metadata=None, event_type: str = "E") -> list[dict]:
    item = {"eventId": str(uuid.uuid4()), "eventType": event_type, "data": data or {"x": 1}}
    if metadata is not None:
        item["metadata"] = metadata
    return [item]


async def post_events(client, stream: str, body, **headers):
    content = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return await client.post(
        f"/streams/{stream}", content=content, headers={"Content-Type": EVENTS, **headers}
    )


def grpc_target(node) -> str:
    return urlsplit(node.http_url).netloc


# -- item 2: stream metadata numbers ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("key", "value"), [("$maxAge", 2**63), ("$tb", 2**63), ("$maxCount", 2**64), ("$cacheControl", 10**30)]
)
async def test_metadata_beyond_64_bits_is_400_naming_the_key(node, client, key, value):
    before = node.db.committed_position
    r = await client.post("/streams/s/metadata", content=json.dumps({key: value}))
    assert r.status_code == 400, r.text
    assert key in r.text and "9223372036854775807" in r.text
    # the same metadata appended as a $metadata event of the metastream
    r = await post_events(client, "%24%24s", events_body({key: value}, event_type="$metadata"))
    assert r.status_code == 400, r.text
    assert key in r.text
    assert node.db.committed_position == before
    assert (await client.get("/streams/s/metadata")).json() == {}


async def test_metadata_beyond_64_bits_is_invalid_argument_over_grpc(node):
    """kurrentdbclient sets metadata by appending a ``$metadata`` event to ``$$stream`` (BatchAppend)."""
    before = node.db.committed_position
    data = json.dumps({"$tb": 2**63}).encode()
    async with grpc.aio.insecure_channel(grpc_target(node)) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await append_call(channel)(append_requests("$$s", "$metadata", data))
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "$tb" in raised.value.details()
        answer = await batch_answer(channel, "$$s", "$metadata", data)
    assert_bad_request(answer, "$tb")
    assert node.db.committed_position == before


async def test_acl_roles_that_are_not_strings_are_400(node, client):
    before = node.db.committed_position
    r = await client.post("/streams/s/metadata", content=json.dumps({"$acl": {"$r": ["$all", 5]}}))
    assert r.status_code == 400 and "$r" in r.text
    r = await client.post("/streams/s/metadata", content=json.dumps({"$acl": {"$w": {"x": 1}}}))
    assert r.status_code == 400 and "$w" in r.text
    assert node.db.committed_position == before
    r = await client.post("/streams/s/metadata", content=json.dumps({"$acl": {"$r": ["$all", "ops"]}}))
    assert r.status_code == 201


# -- item 4: $all positions -------------------------------------------------------------------------------
def _all_digit_position(link: str) -> bool:
    match = re.search(r"/streams/%24all/([0-9A-F]{32})/", link)
    return match is not None and match.group(1).isdigit() and match.group(1).strip("0") != ""


async def _follow(client, url: str, relation: str, seen_links: list[str]) -> list[tuple[str, int]]:
    seen: list[tuple[str, int]] = []
    for _ in range(2000):
        r = await client.get(url, headers={"Accept": "application/vnd.kurrent.atom+json"})
        assert r.status_code == 200, (url, r.text)
        feed = r.json()
        if not feed["entries"]:
            return seen
        entries = [(e["streamId"], e["eventNumber"]) for e in feed["entries"]]
        seen += entries if relation == "next" else list(reversed(entries))
        url = next(link["uri"] for link in feed["links"] if link["relation"] == relation)
        seen_links.append(url)
    raise AssertionError(f"paging by {relation!r} did not end")


async def _readable_all(node, timeout: float = 10.0) -> list[tuple[str, int]]:
    """Every event of $all, once reads serve everything committed (bounded wait)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        readable = getattr(node.db, "readable_position", node.db.committed_position)
        if readable >= node.db.committed_position:
            return [(e.stream, e.event_number) for e in node.db.iter_all(0)]
        assert asyncio.get_running_loop().time() < deadline, "reads never caught up with the log"
        await asyncio.sleep(0.02)


@pytest.mark.parametrize("count", [1, 3])
async def test_paging_all_forward_and_backward_sees_every_event_once(node, client, count):
    for i in range(60):
        r = await post_events(client, f"stream-{i % 7}", events_body({"i": i, "pad": "x" * (i % 13)}))
        assert r.status_code == 201
    expected = await _readable_all(node)
    links: list[str] = []
    first = (await client.get("/streams/%24all", headers={"Accept": "application/json"})).json()
    last_link = next(link["uri"] for link in first["links"] if link["relation"] == "last")
    forward = await _follow(client, last_link.replace("/20", f"/{count}"), "previous", links)
    assert forward == expected
    backward = await _follow(client, f"/streams/%24all/head/backward/{count}", "next", links)
    assert backward == list(reversed(expected))
    # the pages were linked through positions whose 32 hex digits are all decimal digits
    assert any(_all_digit_position(link) for link in links)


async def test_all_positions_that_are_not_32_hex_digits_or_a_number_are_400(client):
    for text in ("0" * 31 + "G", "0_1", " 12", "1" * 33 + "X"):
        r = await client.get(f"/streams/%24all/{text}/forward/5")
        assert r.status_code == 400, text


# -- item 7: JSON bodies ----------------------------------------------------------------------------------
JSON_ENDPOINTS = [
    ("POST", "/streams/s", {"Content-Type": EVENTS}),
    ("POST", "/streams/s/metadata", {"Content-Type": "application/json"}),
    ("POST", "/users", {"Content-Type": "application/json"}),
    ("PUT", "/users/admin", {"Content-Type": "application/json"}),
    ("POST", "/users/admin/command/reset-password", {"Content-Type": "application/json"}),
    ("POST", "/admin/backup", {"Content-Type": "application/json"}),
]


@pytest.mark.parametrize(("method", "path", "headers"), JSON_ENDPOINTS)
@pytest.mark.parametrize("body", [DEEP, DEEP_OBJECT], ids=["array", "object"])
async def test_json_nested_3000_deep_is_400_everywhere(node, client, method, path, headers, body):
    before = node.db.committed_position
    r = await client.request(method, path, content=body, headers=headers)
    assert r.status_code == 400, r.text
    assert "deep" in r.text
    assert node.db.committed_position == before


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity", "1e400"])
async def test_nan_and_infinity_in_json_event_data_are_400(node, client, constant):
    before = node.db.committed_position
    data = f'{{"x": {constant}}}'
    item = f'[{{"eventId": "{uuid.uuid4()}", "eventType": "E", "data": {data}}}]'
    r = await post_events(client, "s", item)
    assert r.status_code == 400, r.text
    item = f'[{{"eventId": "{uuid.uuid4()}", "eventType": "E", "data": {{}}, "metadata": {data}}}]'
    assert (await post_events(client, "s", item)).status_code == 400
    assert (await client.post("/streams/s/metadata", content=data)).status_code == 400
    assert node.db.committed_position == before
    # a single event's body is stored as the bytes it is, JSON by its content type or not (KurrentDB)
    headers = {
        "Content-Type": "application/json",
        "Kurrent-EventType": "E",
        "Kurrent-EventId": str(uuid.uuid4()),
    }
    assert (await client.post("/streams/s", content=data, headers=headers)).status_code == 201
    headers = {
        "Content-Type": "application/octet-stream",
        "Kurrent-EventType": "E",
        "Kurrent-EventId": str(uuid.uuid4()),
    }
    assert (await client.post("/streams/s", content=data, headers=headers)).status_code == 201


async def test_feeds_stay_valid_json_over_data_stored_before_the_rule(node, client):
    node.db.append("old", [NewEvent("E", b'{"x": NaN}', b"[Infinity]", uuid.uuid4(), True)])
    node.db.append("old", [NewEvent("E", DEEP, b"", uuid.uuid4(), True)])
    await _readable_all(node)
    r = await client.get("/streams/old/0/forward/5", params={"embed": "body"})
    assert r.status_code == 200
    feed = json.loads(r.text, parse_constant=lambda c: pytest.fail(f"{c} in the feed"))
    assert [e["data"] for e in reversed(feed["entries"])] == ['{"x": NaN}', DEEP.decode()]


# -- item 7: scavenge parameters --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("query", "name"),
    [
        (f"startFromChunk={2**70}", "startFromChunk"),
        (f"startFromChunk={2**31}", "startFromChunk"),
        (f"threshold={10**100}", "threshold"),
        (f"threshold={2**31}", "threshold"),
        ("threshold=-2", "threshold"),
        (f"threshold={-(2**31) - 1}", "threshold"),
        (f"threads={2**31}", "threads"),
        (f"throttlePercent={10**30}", "throttlePercent"),
        ("threshold=1_000", "threshold"),
    ],
)
async def test_scavenge_parameters_out_of_range_are_400(client, query, name):
    r = await client.post(f"/admin/scavenge?{query}")
    assert r.status_code == 400, (query, r.text)
    assert r.text.startswith(name), r.text
    last = (await client.get("/admin/scavenge/last", headers={"Accept": "application/json"})).json()
    assert last["scavengeId"] == "00000000-0000-0000-0000-000000000000"  # none ran: KurrentDB's zero GUID


async def test_scavenge_parameters_at_the_limits_are_accepted(client):
    r = await client.post(
        f"/admin/scavenge?startFromChunk={2**31 - 1}&threshold={2**31 - 1}",
        headers={"Accept": "application/json"},
    )
    assert r.status_code == 200, r.text


@pytest.mark.parametrize(("threads", "start"), [(-1, 0), (1, -1)])
async def test_grpc_start_scavenge_with_negative_numbers_is_invalid_argument(node, threads, start):
    async with grpc.aio.insecure_channel(grpc_target(node)) as channel:
        start_scavenge = channel.unary_unary(
            OPERATIONS + "StartScavenge",
            request_serializer=operations_pb2.StartScavengeReq.SerializeToString,
            response_deserializer=operations_pb2.ScavengeResp.FromString,
        )
        request = operations_pb2.StartScavengeReq(
            options={"thread_count": threads, "start_from_chunk": start}
        )
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await start_scavenge(request)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert raised.value.details()
    assert node.scavenge.last() is None


# -- item 7: a 5,000-byte stream name over gRPC -------------------------------------------------------------
def append_call(channel):
    return channel.stream_unary(
        STREAMS + "Append",
        request_serializer=streams_pb2.AppendReq.SerializeToString,
        response_deserializer=streams_pb2.AppendResp.FromString,
    )


async def batch_answer(channel, stream: str, event_type: str = "E", data: bytes = b"{}"):
    """One batch (what kurrentdbclient's append_to_stream sends); the server's answer to it."""
    call = channel.stream_stream(
        STREAMS + "BatchAppend",
        request_serializer=streams_pb2.BatchAppendReq.SerializeToString,
        response_deserializer=streams_pb2.BatchAppendResp.FromString,
    )
    options = streams_pb2.BatchAppendReq.Options(
        stream_identifier=shared_pb2.StreamIdentifier(stream_name=stream.encode())
    )
    options.any.SetInParent()
    request = streams_pb2.BatchAppendReq(
        correlation_id=shared_pb2.UUID(string=str(uuid.uuid4())),
        options=options,
        proposed_messages=[
            streams_pb2.BatchAppendReq.ProposedMessage(
                id=shared_pb2.UUID(string=str(uuid.uuid4())),
                metadata={"type": event_type, "content-type": "application/json"},
                data=data,
            )
        ],
        is_final=True,
    )
    responses = call(iter([request]))
    answers = [answer async for answer in responses]
    assert len(answers) == 1
    return answers[0]


def assert_bad_request(answer, text: str) -> None:
    """A batch refused for bad input: INVALID_ARGUMENT with a BadRequest detail giving the reason."""
    assert answer.WhichOneof("result") == "error"
    assert answer.error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    detail = shared_pb2.BadRequest()
    assert answer.error.details.Unpack(detail), answer.error.details.type_url
    assert text in detail.message and text in answer.error.message


def append_requests(stream: str, event_type: str = "E", data: bytes = b"{}"):
    options = streams_pb2.AppendReq.Options(
        stream_identifier=shared_pb2.StreamIdentifier(stream_name=stream.encode())
    )
    options.any.CopyFrom(shared_pb2.Empty())
    yield streams_pb2.AppendReq(options=options)
    yield streams_pb2.AppendReq(
        proposed_message=streams_pb2.AppendReq.ProposedMessage(
            id=shared_pb2.UUID(string=str(uuid.uuid4())),
            metadata={"type": event_type, "content-type": "application/json"},
            data=data,
        )
    )


def read_request(stream: str) -> streams_pb2.ReadReq:
    o = streams_pb2.ReadReq.Options
    options = o(read_direction=o.Forwards, resolve_links=False, count=10)
    stream_options = o.StreamOptions(
        stream_identifier=shared_pb2.StreamIdentifier(stream_name=stream.encode())
    )
    stream_options.start.CopyFrom(shared_pb2.Empty())
    options.stream.CopyFrom(stream_options)
    options.no_filter.CopyFrom(shared_pb2.Empty())
    options.uuid_option.string.CopyFrom(shared_pb2.Empty())
    return streams_pb2.ReadReq(options=options)


def delete_request(stream: str) -> streams_pb2.DeleteReq:
    options = streams_pb2.DeleteReq.Options(
        stream_identifier=shared_pb2.StreamIdentifier(stream_name=stream.encode())
    )
    options.any.CopyFrom(shared_pb2.Empty())
    return streams_pb2.DeleteReq(options=options)


async def test_a_5000_byte_stream_name_over_grpc_is_invalid_argument(node):
    name = "n" * 5000
    before = node.db.committed_position
    async with grpc.aio.insecure_channel(grpc_target(node)) as channel:
        append = append_call(channel)
        read = channel.unary_stream(
            STREAMS + "Read",
            request_serializer=streams_pb2.ReadReq.SerializeToString,
            response_deserializer=streams_pb2.ReadResp.FromString,
        )
        delete = channel.unary_unary(
            STREAMS + "Delete",
            request_serializer=streams_pb2.DeleteReq.SerializeToString,
            response_deserializer=streams_pb2.DeleteResp.FromString,
        )
        for call in (
            lambda: append(append_requests(name)),
            lambda: _drain(read(read_request(name))),
            lambda: delete(delete_request(name)),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await call()
            assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "4096 bytes" in raised.value.details()
        assert_bad_request(await batch_answer(channel, name), "4096 bytes")
    assert node.db.committed_position == before


async def _drain(call) -> list:
    return [message async for message in call]


# -- item 7: a backup folder with a NUL byte ----------------------------------------------------------------
async def test_backup_folder_with_a_nul_byte_is_400_and_starts_nothing(client, tmp_path):
    target = tmp_path / "backup"
    r = await client.post("/admin/backup", json={"to": f"{target}\x00evil"})
    assert r.status_code == 400, r.text
    assert "NUL" in r.text
    assert not target.exists()
    assert (await client.get("/admin/backup/current")).status_code == 204
