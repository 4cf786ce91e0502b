"""The system projections' rules, record by record (KurrentDB's Standard handlers and $all filter)."""

from __future__ import annotations

import json
import uuid

from evdb.projections.links import parse_link
from evdb.projections.standard import by_name, category_of, passes_source
from evdb.storage.records import MAX_EVENT_NUMBER, EventRecord


def rec(
    stream: str,
    number: int = 0,
    kind: str = "Ev",
    data: bytes = b"{}",
    *,
    json_flag: bool = True,
    meta: bytes = b"",
) -> EventRecord:
    flags = 0x100 if json_flag else 0
    return EventRecord(
        100, number, stream, kind, uuid.uuid4().bytes, 17_000_000_000_000_000, flags, data, meta
    )


def emit(name: str, record: EventRecord) -> list[tuple[str, str, bytes]]:
    projection = by_name(name)
    assert projection is not None
    return [(e.stream, e.event_type, e.data) for e in projection.process(record)]


def test_category_is_before_the_first_dash():
    assert category_of("order-1-a") == "order"
    assert category_of("order") is None and category_of("-x") is None and category_of("$ce-order") is None


def test_source_filter_skips_system_streams_but_not_metadata_of_user_streams():
    assert passes_source(rec("order-1"), include_links=False)
    assert passes_source(rec("$$order-1", kind="$metadata"), include_links=False)
    assert not passes_source(rec("$$$ce-order", kind="$metadata"), include_links=False)
    assert not passes_source(rec("$users"), include_links=True)
    assert not passes_source(rec("order-1", kind="$>", data=b"0@x", json_flag=False), include_links=False)
    assert passes_source(rec("order-1", kind="$>", data=b"0@x", json_flag=False), include_links=True)


def test_each_projection():
    assert emit("$streams", rec("order-1", 0)) == [("$streams", "$>", b"0@order-1")]
    assert emit("$streams", rec("order-1", 1)) == []
    assert emit("$stream_by_category", rec("order-1", 0)) == [("$category-order", "$@", b"order-1")]
    assert emit("$by_category", rec("order-1", 4)) == [("$ce-order", "$>", b"4@order-1")]
    # a link event in a user stream: $by_category links to its target; $by_event_type skips it
    link = rec("order-9", 0, kind="$>", data=b"7@elsewhere", json_flag=False)
    assert emit("$by_category", link) == [("$ce-order", "$>", b"7@elsewhere")]
    assert emit("$by_event_type", link) == []
    assert emit("$by_event_type", rec("x", 2, kind="Made")) == [("$et-Made", "$>", b"2@x")]
    # content validation: an event flagged JSON must hold JSON
    assert emit("$by_event_type", rec("x", 2, kind="Made", data=b"")) == []
    assert emit("$by_event_type", rec("x", 2, kind="Made", data=b"nope", json_flag=False)) != []
    meta = json.dumps({"$correlationId": "abc"}).encode()
    assert emit("$by_correlation_id", rec("x", 3, meta=meta)) == [("$bc-abc", "$>", b"3@x")]
    assert emit("$by_correlation_id", rec("x", 3)) == []


def test_deletions():
    tombstone = rec("cart-1", MAX_EVENT_NUMBER, kind="$streamDeleted", data=b"", json_flag=False)
    assert emit("$by_event_type", tombstone) == [
        ("$et-$deleted", "$>", f"{MAX_EVENT_NUMBER}@cart-1".encode())
    ]
    soft = rec("$$cart-1", 2, kind="$metadata", data=json.dumps({"$tb": MAX_EVENT_NUMBER}).encode())
    assert emit("$by_category", soft) == [("$ce-cart", "$>", b"2@$$cart-1")]
    assert emit("$by_event_type", soft) == [("$et-$deleted", "$>", b"2@cart-1")]


def test_link_data():
    assert parse_link(b"12@order-1") == (12, "order-1")
    assert parse_link(b"3@a@b") == (3, "a@b")
    assert parse_link(b"x@order") is None and parse_link(b"12") is None and parse_link(b"\xff@a") is None
