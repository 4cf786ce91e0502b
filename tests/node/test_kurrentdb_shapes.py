"""Small mismatches with KurrentDB over HTTP, options and logs (issue 25, "Also found"), each as
KurrentDB's source has it."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import uuid

import httpx
import pytest

from evdb.grpc.cluster import cluster_info
from evdb.logs import node_log_files, read_log_lines
from evdb.node import Node
from evdb.options import load_options
from tests.node.conftest import ADMIN, OPS, node_options

EVENTS = "application/vnd.kurrent.events+json"
JSON = {"Accept": "application/json"}


def log_messages(node: Node) -> list[str]:
    return [
        line["@m"] for path in node_log_files(node.options.log, node.name) for line in read_log_lines(path)
    ]


async def _scavenge(client: httpx.AsyncClient, query: str = "") -> str:
    r = await client.post(f"/admin/scavenge{query}", headers=JSON)
    assert r.status_code == 200, r.text
    scavenge_id = r.json()["scavengeId"]
    for _ in range(3000):
        current = (await client.get("/admin/scavenge/current", headers=JSON)).json()
        if current["scavengeId"] == "":
            return scavenge_id
        await asyncio.sleep(0.01)
    raise AssertionError("the scavenge did not finish")


async def _history(client: httpx.AsyncClient, scavenge_id: str) -> list[dict]:
    r = await client.get(
        f"/streams/$scavenges-{scavenge_id}/0/forward/100", headers={"Accept": "application/json"}
    )
    assert r.status_code == 200, r.text
    return r.json()["entries"]


async def _write_removable(client: httpx.AsyncClient) -> None:
    body = [{"eventId": str(uuid.uuid4()), "eventType": "E", "data": {"i": i}} for i in range(4)]
    await client.post("/streams/s", content=json.dumps(body), headers={"Content-Type": EVENTS})
    await client.post("/streams/s/metadata", json={"$maxCount": 1})


# -- options ------------------------------------------------------------------------------------------
async def test_a_kurrentdb_config_with_scavenge_backend_page_size_in_bytes_starts_a_node(tmp_path, clock):
    config = tmp_path / "kurrentdb.conf"
    config.write_text("ScavengeBackendPageSize: 16384\nNodePort: 0\nInsecure: true\nStatsPeriodSec: 0\n")
    options = load_options(
        ["--config", str(config), "--db", str(tmp_path / "db"), "--log", str(tmp_path / "log")], {}
    )
    assert options.scavenge_backend_page_size == 16384 and options.http_port == 0
    async with Node(options, clock=clock, name="kdb") as node:
        path = node.scavenge.state.path
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA page_size").fetchone()[0] == 16384


async def test_kurrentdb_environment_variables_are_named_with_the_service_form_at_start(tmp_path, clock):
    environ = {"KURRENTDB_CLUSTER_SIZE": "3", "EVENTSTORE_NO_SUCH_OPTION": "1"}
    options = load_options(
        ["--db", str(tmp_path / "db"), "--log", str(tmp_path / "log"), "--insecure", "--http-port", "0",
         "--stats-period-sec", "0"],
        environ,
    )  # fmt: skip
    assert options.cluster_size == 1  # ignored, as before, but no longer silently
    async with Node(options, clock=clock, name="env") as node:
        messages = log_messages(node)
    assert any("KURRENTDB_CLUSTER_SIZE is ignored: evdb reads SERVICE_CLUSTER_SIZE" in m for m in messages)
    assert any("EVENTSTORE_NO_SUCH_OPTION is ignored" in m for m in messages)


# -- access -------------------------------------------------------------------------------------------
async def test_a_user_without_ops_reading_a_scavenge_stream_gets_401(node, client):
    await client.post("/users", json={"loginName": "carol", "fullName": "", "groups": [], "password": "pw"})
    scavenge_id = await _scavenge(client)
    async with (
        httpx.AsyncClient(base_url=node.http_url, auth=("carol", "pw")) as carol,
        httpx.AsyncClient(base_url=node.http_url, auth=OPS) as ops,
    ):
        refused = await carol.get(f"/streams/$scavenges-{scavenge_id}", headers=JSON)
        assert refused.status_code == 401 and refused.text == ""  # KurrentDB: a denied controller action
        assert (await ops.get(f"/streams/$scavenges-{scavenge_id}", headers=JSON)).status_code == 200


# -- the scavenge's history and log lines --------------------------------------------------------------
async def test_chunks_completed_are_written_only_for_chunks_scavenged(node, client):
    await _write_removable(client)
    skipped = await _scavenge(client, "?threshold=1000")
    types = [e["summary"] for e in await _history(client, skipped)]
    assert "$scavengeChunksCompleted" not in types and "$scavengeCompleted" in types
    messages = log_messages(node)
    skipped_lines = [m for m in messages if m.startswith("SCAVENGING: Skipped physical chunk")]
    assert skipped_lines and all(" with weight " in m and ".0." not in m for m in skipped_lines)
    # KurrentDB's {physicalWeight:N0}: a whole number (three removable events weigh 2 each)
    assert any(m.endswith("with weight 6. The threshold is 1000.") for m in skipped_lines), skipped_lines

    scavenged = await _scavenge(client, "?threshold=-1")
    types = [e["summary"] for e in await _history(client, scavenged)]
    assert "$scavengeChunksCompleted" in types
    started = [
        m for m in log_messages(node) if m.startswith("SCAVENGING: Started to scavenge physical chunk")
    ]
    assert started and all(".0. " not in m for m in started), started


# -- configuration reload ------------------------------------------------------------------------------
async def test_a_failed_reload_answers_200_and_shows_in_the_log_and_the_certificates(tmp_path, clock):
    config = tmp_path / "node.yaml"
    config.write_text("Insecure: true\nHttpPort: 0\nStatsPeriodSec: 0\n")
    options = load_options(
        ["--config", str(config), "--db", str(tmp_path / "db"), "--log", str(tmp_path / "log")], {}
    )
    async with Node(options, clock=clock, name="reload") as node:
        async with httpx.AsyncClient(base_url=node.http_url, auth=ADMIN) as admin:
            config.write_text("LogLevel: [Debug\n")
            r = await admin.post("/admin/reloadconfig")
            assert (r.status_code, r.text) == (200, "")
            last = (await admin.get("/admin/certificates")).json()["lastReload"]
        messages = log_messages(node)
    assert last["result"] == "Failed" and "not valid YAML" in last["error"] and str(config) in last["error"]
    errors = [m for m in messages if m.startswith("An error has occurred while reloading the configuration")]
    assert errors and str(config) in errors[-1]


# -- formats ------------------------------------------------------------------------------------------
async def test_admin_answers_are_negotiated_as_kurrentdb_s(client):
    text = await client.get("/admin/scavenge/current")
    assert text.headers["Content-Type"].startswith("text/plain")
    assert text.text == "ScavengeId: , ScavengeLink: "
    indented = await client.get("/admin/scavenge/current", headers=JSON)
    assert indented.text == '{\n  "scavengeId": "",\n  "scavengeLink": ""\n}'
    xml = await client.get("/admin/scavenge/current", headers={"Accept": "application/xml"})
    assert xml.headers["Content-Type"].startswith("application/xml")
    assert xml.text == (
        '<?xml version="1.0" encoding="utf-8"?><ScavengeGetCurrentResultDto '
        'xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xmlns:xsd="http://www.w3.org/2001/XMLSchema">'
        "<ScavengeId /><ScavengeLink /></ScavengeGetCurrentResultDto>"
    )
    assert (
        (await client.get("/admin/scavenge/last?format=xml")).headers["Content-Type"].startswith("text/xml")
    )
    html = await client.get("/admin/scavenge/current", headers={"Accept": "text/html"})
    assert html.status_code == 406 and html.text == ""
    browser = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
    assert (
        (await client.get("/gossip", headers={"Accept": browser}))
        .headers["Content-Type"]
        .startswith("application/xml")
    )
    info = await client.get("/info", headers={"Accept": "text/xml"})
    assert info.headers["Content-Type"].startswith("text/xml") and json.loads(info.text)["dbVersion"]
    assert (await client.get("/info", headers={"Accept": "text/html"})).status_code == 406
    assert (await client.post("/admin/scavenge", headers={"Accept": "text/html"})).status_code == 406
    assert (await client.get("/admin/scavenge/current", headers=JSON)).json()["scavengeId"] == ""


async def test_auto_scavenge_answers_stay_compact(tmp_path):
    from evdb.http.common import json_response

    assert json_response({"a": 1}, compact=True).text == '{"a":1}'
    assert json_response({"a": [1]}).text == '{\n  "a": [\n    1\n  ]\n}'


# -- advertising --------------------------------------------------------------------------------------
@pytest.fixture
async def advertised(tmp_path, clock):
    options = node_options(
        tmp_path,
        "--advertise-host-to-client-as",
        "db.example.com",
        "--advertise-node-port-to-client-as",
        "443",
        "--node-host-advertise-as",
        "localhost",
    )
    async with Node(options, clock=clock, name="adv") as node:
        yield node


async def test_gossip_tells_clients_the_advertised_host_and_keeps_the_cluster_s_address(advertised):
    node = advertised
    async with httpx.AsyncClient(base_url=node.http_url) as anon:
        gossip = (await anon.get("/gossip")).json()
    (member,) = gossip["members"]
    assert (gossip["serverIp"], gossip["serverPort"]) == ("db.example.com", 443)
    assert (member["httpEndPointIp"], member["httpEndPointPort"]) == ("db.example.com", 443)
    assert (member["internalHttpEndPointIp"], member["internalHttpEndPointPort"]) == ("localhost", node.port)
    assert "clientHttpEndPointIp" not in member
    (grpc_member,) = cluster_info(node.api_services()).members
    assert (grpc_member.http_end_point.address, grpc_member.http_end_point.port) == ("db.example.com", 443)
    assert node.cluster.leader_client_endpoint() == ("db.example.com", 443)
    assert node.cluster.leader_http_endpoint() == ("localhost", node.port)


def test_a_peer_s_served_gossip_is_read_back_in_the_cluster_form():
    from evdb.cluster.advertising import client_member, cluster_member

    internal = {"instanceId": "x", "httpEndPointIp": "10.0.0.1", "httpEndPointPort": 2113}
    internal |= {"clientHttpEndPointIp": "db1.example.com", "clientHttpEndPointPort": 443}
    served = client_member(internal)
    assert (served["httpEndPointIp"], served["internalHttpEndPointIp"]) == ("db1.example.com", "10.0.0.1")
    back = cluster_member(served)
    assert (back["httpEndPointIp"], back["httpEndPointPort"]) == ("10.0.0.1", 2113)
    assert (back["clientHttpEndPointIp"], back["clientHttpEndPointPort"]) == ("db1.example.com", 443)
    plain = {"httpEndPointIp": "10.0.0.2", "httpEndPointPort": 2113}  # an earlier evdb: one address
    assert cluster_member(plain) == plain
