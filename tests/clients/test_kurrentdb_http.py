"""KurrentDB's HTTP API as its own tools use it (issue 35 point 7 and the Node.js suite's HTTP helper):
a single-event append without an event id is redirected (307) to ``/streams/{stream}/incoming/{guid}``,
where the event is written with that id (a retry of the same URI is idempotent); a single event's body
is stored as it came, valid JSON or not."""

from __future__ import annotations

import uuid

import httpx

from evdb.licensing.issuers import issue_demo_license
from evdb.node import Node
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


async def append_one(client: httpx.AsyncClient, stream: str) -> None:
    headers = {"Content-Type": "application/json", "ES-EventType": "E", "ES-EventId": str(uuid.uuid4())}
    assert (await client.post(f"/streams/{stream}", content=b"{}", headers=headers)).status_code == 201


async def test_a_feed_carries_an_etag_and_if_none_match_answers_304(node):  # noqa: F811
    async with await client_for(node) as client:
        await append_one(client, "tagged")
        accept = {"Accept": "application/vnd.eventstore.atom+json"}
        first = await client.get("/streams/tagged", headers=accept)
        assert first.status_code == 200
        etag = first.headers["ETag"]
        assert etag.startswith('"0;') and etag.endswith('"')
        assert first.headers["Cache-Control"] == "max-age=0, no-cache, must-revalidate"
        assert first.json()["eTag"] == etag.strip('"')
        same = await client.get("/streams/tagged", headers={**accept, "If-None-Match": etag})
        assert same.status_code == 304 and same.content == b""
        await append_one(client, "tagged")  # a new event: a new version, the feed again
        changed = await client.get("/streams/tagged", headers={**accept, "If-None-Match": etag})
        assert changed.status_code == 200 and changed.headers["ETag"].startswith('"1;')
        # a page that can no longer change: cacheable, no ETag (KurrentDB's Configure)
        settled = await client.get("/streams/tagged/0/forward/1", headers=accept)
        assert (
            settled.headers["Cache-Control"] == "max-age=31536000, public" and "ETag" not in settled.headers
        )


async def test_atom_xml_and_the_description_document_are_served_when_asked_for(node):  # noqa: F811
    async with await client_for(node) as client:
        await append_one(client, "described")
        xml = await client.get("/streams/described", headers={"Accept": "application/atom+xml"})
        assert xml.status_code == 200 and xml.headers["Content-Type"].startswith("application/atom+xml")
        assert xml.text.startswith(
            '<?xml version="1.0" encoding="utf-8"?><feed xmlns="http://www.w3.org/2005/Atom">'
        )
        assert "<title>Event stream 'described'</title>" in xml.text and "<summary>E</summary>" in xml.text
        assert (
            xml.headers["ETag"]
            != (
                await client.get(
                    "/streams/described", headers={"Accept": "application/vnd.kurrent.atom+json"}
                )
            ).headers["ETag"]
        )  # the ETag names the content type too

        for media in (
            "application/vnd.kurrent.streamdesc+json",
            "application/vnd.eventstore.streamdesc+json",
        ):
            desc = await client.get("/streams/described", headers={"Accept": media})
            assert desc.status_code == 200 and desc.headers["Content-Type"].startswith(media)
            body = desc.json()
            assert body["title"] == "Description document for 'described'"
            assert body["_links"]["self"] == {"href": "/streams/described", "supportedContentTypes": [media]}
            assert body["_links"]["stream"]["href"] == "/streams/described"
            assert "application/atom+xml" in body["_links"]["stream"]["supportedContentTypes"]


async def test_users_bind_json_keys_ignoring_case_and_answer_with_error(node):  # noqa: F811
    """KurrentDB's own new-user.json (PascalCase keys) creates the user; the answers carry ``error``."""
    new_user = {
        "LoginName": "adminuser",
        "FullName": "KurrentDB Admin",
        "Groups": ["$admins", "DataScience"],
        "Password": "aVerySecurePassword",
    }
    async with await client_for(node) as client:
        created = await client.post("/users", json=new_user)
        assert created.status_code == 201, created.text
        assert created.json() == {"loginName": "adminuser", "success": True, "error": "Success"}
        listed = await client.get("/users/")
        assert listed.status_code == 200 and listed.json()["error"] == "Success"
        assert "adminuser" in [u["loginName"] for u in listed.json()["data"]]
        one = (await client.get("/users/adminuser")).json()
        assert one["data"]["fullName"] == "KurrentDB Admin" and one["data"]["groups"] == [
            "$admins",
            "DataScience",
        ]
    async with httpx.AsyncClient(base_url=node.http_url, auth=("adminuser", "aVerySecurePassword")) as signed:
        assert (await signed.get("/users/")).status_code == 200  # an admin (its password bound too)


async def test_merge_indexes_and_the_logs_endpoint(tmp_path, clock):
    """``POST /admin/mergeindexes`` answers KurrentDB's MergeIndexesResultDto; ``GET /admin/logs`` (a
    licensed feature in KurrentDB: LOGS_ENDPOINT) lists the node's JSON log files and serves them, to
    operators and admins only; without the entitlement there is no endpoint (404)."""
    licensed = node_options(
        tmp_path / "licensed",
        "--license-key",
        issue_demo_license(clock.time(), entitlements=("LOGS_ENDPOINT",)),
        "--license-trusted-issuers",
        "demo",
    )
    async with Node(licensed, clock=clock, name="logs") as n, await client_for(n) as client:
        merged = await client.post("/admin/mergeindexes", headers={"Accept": "application/json"})
        assert merged.status_code == 200, merged.text
        uuid.UUID(merged.json()["mergeIndexesId"])
        listed = await client.get("/admin/logs")
        assert listed.status_code == 200, listed.text
        files = listed.json()
        assert files and all(f["name"].endswith(".json") and f["size"] > 0 for f in files)
        assert set(files[0]) == {"name", "createdAt", "lastModified", "size"}
        one = await client.get(f"/admin/logs/{files[0]['name']}")
        assert one.status_code == 200 and one.headers["Content-Type"].startswith("application/json")
        assert one.text.startswith('{"@t"')
        async with httpx.AsyncClient(base_url=n.http_url) as anonymous:
            assert (await anonymous.get("/admin/logs")).status_code == 401
            assert (await anonymous.post("/admin/mergeindexes")).status_code == 401
    unlicensed = node_options(tmp_path / "plain")
    async with Node(unlicensed, clock=clock, name="plain") as n, await client_for(n) as client:
        assert (await client.get("/admin/logs")).status_code == 404
