"""``evdb scavenge`` and ``evdb user`` against a running node, and the admin log lines."""

from __future__ import annotations

import asyncio
import json
import uuid

from evdb.cli import main as evdb_main
from evdb.logs import log_files, read_log_lines


def cli(node, *args: str) -> list[str]:
    return [*args, "--node", node.http_url, "--user", "admin", "--password", "changeit"]


async def test_scavenge_commands_and_log_lines(node, client, capsys):
    body = [{"eventId": str(uuid.uuid4()), "eventType": "E", "data": {}} for _ in range(3)]
    await client.post(
        "/streams/s",
        content=json.dumps(body),
        headers={"Content-Type": "application/vnd.kurrent.events+json"},
    )
    code = await asyncio.to_thread(evdb_main, cli(node, "scavenge", "start", "--wait"))
    out = capsys.readouterr().out
    assert code == 0 and out.strip().endswith("Success")
    code = await asyncio.to_thread(evdb_main, cli(node, "scavenge", "stop"))
    assert code == 1  # nothing runs: 404 reported
    assert "Scavenge Id does not exist" in capsys.readouterr().err
    code = await asyncio.to_thread(evdb_main, cli(node, "scavenge", "status"))
    assert code == 0 and json.loads(capsys.readouterr().out)["running"] is False
    messages = [line["@m"] for path in log_files(node.logger) for line in read_log_lines(path)]
    assert any(m.startswith("Request scavenging because /admin/scavenge") for m in messages)
    assert "SCAVENGING: Scavenge Started." in messages
    assert any(m.startswith("SCAVENGING: Scavenge Completed. Total time taken:") for m in messages)
    assert any(
        m.startswith("Stopping scavenge because /admin/scavenge/current DELETE request") for m in messages
    )


async def test_user_commands(node, capsys):
    create = cli(node, "user", "create", "carol", "--groups", "$ops", "--new-password", "s3cret")
    assert await asyncio.to_thread(evdb_main, create) == 0
    assert await asyncio.to_thread(evdb_main, cli(node, "user", "list")) == 0
    assert "carol\t$ops\tenabled" in capsys.readouterr().out
    assert await asyncio.to_thread(evdb_main, cli(node, "user", "disable", "carol")) == 0
    assert await asyncio.to_thread(evdb_main, cli(node, "user", "delete", "carol")) == 0
    assert await asyncio.to_thread(evdb_main, cli(node, "user", "delete", "carol")) == 1


async def test_a_slow_client_does_not_block_others(node, client):
    host, port = node.http_url.removeprefix("http://").split(":")
    _, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        b"POST /streams/slow HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
    )
    await writer.drain()  # and never sends the rest
    body = [{"eventId": str(uuid.uuid4()), "eventType": "E", "data": {}}]
    r = await asyncio.wait_for(
        client.post(
            "/streams/fast",
            content=json.dumps(body),
            headers={"Content-Type": "application/vnd.kurrent.events+json"},
        ),
        10,
    )
    assert r.status_code == 201
    writer.close()
