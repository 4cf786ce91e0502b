"""KurrentDB's HTTP API as its own tools use it (issue 35 point 7 and the Node.js suite's HTTP helper):
a single-event append without an event id is redirected (307) to ``/streams/{stream}/incoming/{guid}``,
where the event is written with that id (a retry of the same URI is idempotent); a single event's body
is stored as it came, valid JSON or not."""

from __future__ import annotations

import uuid

import httpx

from tests.node.conftest import ADMIN, node, node_options  # noqa: F401 (fixtures)


async def client_for(node) -> httpx.AsyncClient:  # noqa: F811
    return httpx.AsyncClient(base_url=node.http_url, auth=ADMIN, timeout=30)


async def test_a_single_event_without_an_id_is_redirected_to_an_idempotent_uri(node):  # noqa: F811
    async with await client_for(node) as client:
        headers = {"Content-Type": "application/json", "ES-EventType": "Posted"}
        first = await client.post("/streams/redirected", content=b'{"a": 1}', headers=headers)
        assert first.status_code == 307, first.text
        assert first.text == "Forwarding to idempotent URI"
        location = first.headers["Location"]
        prefix = f"{node.http_url}/streams/redirected/incoming/"
        assert location.startswith(prefix)
        guid = uuid.UUID(location[len(prefix) :])
        assert (await client.get("/streams/redirected")).status_code == 404  # nothing written yet

        # the client posts again there (curl -L, the Node.js suite's helper): written with that id
        posted = await client.post(location, content=b'{"a": 1}', headers=headers)
        assert posted.status_code == 201, posted.text
        assert posted.headers["Location"] == f"{node.http_url}/streams/redirected/0"
        again = await client.post(location, content=b'{"a": 1}', headers=headers)  # a retry: the same event
        assert again.status_code == 201 and again.headers["Location"].endswith("/streams/redirected/0")
        event = await client.get(
            "/streams/redirected/0", headers={"Accept": "application/vnd.eventstore.atom+json"}
        )
        assert event.status_code == 200
        assert event.json()["eventType"] == "Posted"
        assert uuid.UUID(event.json()["eventId"]) == guid
        head = await client.get(
            "/streams/redirected/head/backward/20", headers={"Accept": "application/json"}
        )
        assert len(head.json()["entries"]) == 1

        # an event id in a header: written at once, as before
        direct = {**headers, "ES-EventId": str(uuid.uuid4())}
        assert (await client.post("/streams/redirected", content=b"{}", headers=direct)).status_code == 201
        # a path id that is not a UUID: 400 with KurrentDB's reason, nothing written
        bad = await client.post("/streams/redirected/incoming/not-a-guid", content=b"{}", headers=headers)
        assert bad.status_code == 400 and "Unable to parse guid" in bad.text


async def test_a_single_event_body_that_is_not_json_is_stored_as_it_came(node):  # noqa: F811
    """The Node.js suite's malformed-events test: ``****`` posted as application/json is stored and
    read back as the same text (KurrentDB keeps a single event's body, isJson from its content type)."""
    async with await client_for(node) as client:
        headers = {"Content-Type": "application/json", "ES-EventType": "malformed-event"}
        headers["ES-EventId"] = str(uuid.uuid4())
        posted = await client.post("/streams/malformed", content=b"****", headers=headers)
        assert posted.status_code == 201, posted.text
    records = node.db.read_stream_forward("malformed", 0, 10)
    assert [(r.data, r.is_json) for r in records.events] == [(b"****", True)]
