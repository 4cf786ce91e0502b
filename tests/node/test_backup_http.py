"""Backups the node runs itself: POST /admin/backup and GET /admin/backup/current."""

from __future__ import annotations

import asyncio
import json

import httpx

from evdb.backup.verify import verify_backup

EVENT = {"eventType": "E", "data": {"n": 1}}


async def _append(client: httpx.AsyncClient, stream: str, count: int) -> None:
    import uuid

    events = [{**EVENT, "eventId": str(uuid.uuid4())} for _ in range(count)]
    r = await client.post(
        f"/streams/{stream}",
        content=json.dumps(events),
        headers={"Content-Type": "application/vnd.kurrent.events+json"},
    )
    assert r.status_code == 201, r.text


async def _wait_finished(client: httpx.AsyncClient) -> dict:
    for _ in range(600):
        body = (await client.get("/admin/backup/current")).json()
        if body["state"] != "running":
            return body
        await asyncio.sleep(0.05)
    raise AssertionError(f"the backup did not finish: {body}")


async def test_full_then_differential_backup_through_the_node(node, client, tmp_path):
    assert (await client.get("/admin/backup/current")).status_code == 204
    for i in range(5):
        await _append(client, f"s-{i}", 40)
    dest = tmp_path / "backup"
    r = await client.post("/admin/backup", json={"to": str(dest)})
    assert r.status_code == 202, r.text
    backup_id = r.json()["backupId"]
    body = await _wait_finished(client)
    assert body["backupId"] == backup_id and body["state"] == "completed", body
    assert body["kind"] == "full" and body["filesCopied"] > 0 and body["chaser"] > 0
    report = verify_backup(str(dest))
    assert report.ok, report.problems
    full_chaser = report.chaser

    await _append(client, "later", 10)
    r = await client.post("/admin/backup", json={"to": str(dest), "differential": True})
    assert r.status_code == 202, r.text
    body = await _wait_finished(client)
    assert body["state"] == "completed" and body["kind"] == "differential", body
    assert body["filesSkipped"] > 0  # unchanged chunks and tables are not copied again
    report = verify_backup(str(dest))
    assert report.ok and report.chaser > full_chaser


async def test_bad_backup_requests_are_refused_and_write_nothing(node, client, tmp_path):
    cases = [
        ({"to": "relative/folder"}, "absolute path"),
        ({"to": ""}, "Name the backup folder"),
        ({"to": str(tmp_path / "db" / "inside")}, "must be outside"),
        ({"to": str(tmp_path / "x"), "differential": "yes"}, '"differential" must be true or false'),
        ({"to": str(tmp_path / "x"), "extra": 1}, "Unknown field"),
        (["not", "an", "object"], "JSON object"),
    ]
    for body, message in cases:
        r = await client.post("/admin/backup", json=body)
        assert r.status_code == 400 and message in r.text, (body, r.status_code, r.text)
    assert not (tmp_path / "x").exists() and not (tmp_path / "db" / "inside").exists()
    r = await client.post("/admin/backup", content=b"{nope", headers={"Content-Type": "application/json"})
    assert r.status_code == 400
    assert (await client.get("/admin/backup/current")).status_code == 204


async def test_a_second_backup_is_refused_while_one_runs(node, client, tmp_path, monkeypatch):
    import threading

    import evdb.http.backup as backup_routes

    release = threading.Event()
    real_run_backup = backup_routes.run_backup

    def held_run_backup(*args, **kwargs):
        assert release.wait(30)
        return real_run_backup(*args, **kwargs)

    monkeypatch.setattr(backup_routes, "run_backup", held_run_backup)
    await _append(client, "s", 10)
    first = await client.post("/admin/backup", json={"to": str(tmp_path / "one")})
    assert first.status_code == 202
    second = await client.post("/admin/backup", json={"to": str(tmp_path / "two")})
    assert second.status_code == 400 and "already running" in second.text
    assert (await client.get("/admin/backup/current")).json()["backupId"] == first.json()["backupId"]
    release.set()
    body = await _wait_finished(client)
    assert body["state"] == "completed" and not (tmp_path / "two").exists()


async def test_a_backup_during_a_scavenge_is_refused_at_once_with_what_to_send(node, client, tmp_path):
    """The spec forbids a file-copy backup overlapping a scavenge: POST /admin/backup answers 409 at
    once (not 202 and a failure later), tells an HTTP caller what to send, and starts nothing."""
    import threading

    from evdb.scavenge.service import ScavengeRequest

    await _append(client, "s", 10)
    gate = threading.Event()
    node.scavenge.stage_hook = lambda stage: gate.wait(30)
    scavenge_id = await asyncio.to_thread(node.scavenge.start, ScavengeRequest())
    try:
        r = await client.post("/admin/backup", json={"to": str(tmp_path / "bk")})
        assert r.status_code == 409, (r.status_code, r.text)
        assert scavenge_id in r.text and '"stopScavenge": true' in r.text
        assert "--stop-scavenge" not in r.text  # words for an HTTP caller, not the CLI's
        assert (await client.get("/admin/backup/current")).status_code == 204
        assert not (tmp_path / "bk").exists()
        assert node.scavenge.current_id() == scavenge_id  # the scavenge goes on
    finally:
        gate.set()
        await asyncio.to_thread(node.scavenge.wait, 30)
