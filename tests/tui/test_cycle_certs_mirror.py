"""The auto-scavenge cycle node by node, certificates' last reload and CA, and ``--mirror``: what the
collectors put in state from the nodes' (and mirrors') answers, and what the panels show of it."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from datetime import UTC, datetime

import httpx
from rich.console import Console

from evdb.clock import ManualClock
from evdb.dashboard_cli import register_cli
from tests.tui.conftest import make_app
from tests.tui.fake_node import FakeCluster, FakeMirror, FakeNode, mirror_status
from tests.tui.test_keys import ready, text_of
from tui.collector import MirrorCollector, NodeCollector, cycle_from_progress, node_certificates
from tui.panels import endpoint_labels, render_auto_scavenge, render_certificates, render_cluster
from tui.state import (
    AutoScavengeCycle,
    AutoScavengeState,
    DashboardState,
    Member,
    MirrorState,
    NodeCertificates,
    NodeState,
)

NOW = 1_700_000_000.0  # ManualClock's start: 2023-11-14T22:13:20Z


def iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat().replace("+00:00", "Z")


def plain(renderable, width: int = 160) -> str:
    console = Console(width=width, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


def _section(text: str, title: str) -> str:
    """The panel's text from ``title`` on, with every run of whitespace made one space (wrapped lines
    of the last column then read as one)."""
    return " ".join(text[text.index(title) :].split())


def _has(section: str, words: str) -> bool:
    return " ".join(words.split()) in section


def paths(node: FakeNode) -> list[str]:
    return [r.url.path for r in node.requests]


def progress_body(**changes) -> dict:
    """``GET /auto-scavenge/progress`` as evdb answers it (AutoScavengeState.describe + lastProblem)."""
    body = {
        "status": "MonitoringNodeScavenge",
        "schedule": "0 6 * * 6",
        "nextDue": None,
        "clusterScavengeId": "cycle-1",
        "startedAt": iso(NOW - 120),
        "members": ["127.0.0.1:2113", "127.0.0.1:2114", "127.0.0.1:2115"],
        "done": {"127.0.0.1:2115": "Success"},
        "designatedNode": "127.0.0.1:2114",
        "nodeScavengeId": "sc-77",
        "paused": False,
        "pauseRequested": False,
        "lastCompletedAt": None,
        "lastProblem": None,
    }
    body.update(changes)
    return body


def three_nodes() -> tuple[FakeNode, FakeNode, FakeNode]:
    return (
        FakeNode(port=2113, state="Leader"),
        FakeNode(port=2114, state="Follower"),
        FakeNode(port=2115, state="Follower"),
    )


def collector(node: FakeNode, clock: ManualClock, *others: FakeNode, **kwargs) -> NodeCollector:
    client = httpx.AsyncClient(transport=FakeCluster(node, *others).transport())
    return NodeCollector(NodeState(url=node.url), client, clock, **kwargs)


# -- auto-scavenge: the cycle node by node -------------------------------------------------------------
async def test_cycle_is_read_only_while_one_can_be_under_way(clock):
    leader = FakeNode(port=2113)
    leader.auto_scavenge = {"state": "Waiting", "schedule": "0 6 * * 6", "timeUntilNextCycle": "01:00:00"}
    leader.auto_scavenge_progress = progress_body()
    c = collector(leader, clock)
    await c.poll_once()  # read once at the start: when the last cycle ended
    assert paths(leader).count("/auto-scavenge/progress") == 1
    await c.poll_once()
    assert paths(leader).count("/auto-scavenge/progress") == 1  # no polling cost between cycles
    assert c.state.auto_scavenge.cycle is None
    leader.auto_scavenge["state"] = "InProgress"
    await c.poll_once()
    assert paths(leader).count("/auto-scavenge/progress") == 2
    cycle = c.state.auto_scavenge.cycle
    assert cycle == AutoScavengeCycle(
        cycle_id="cycle-1",
        status="MonitoringNodeScavenge",
        members=("127.0.0.1:2113", "127.0.0.1:2114", "127.0.0.1:2115"),
        done=(("127.0.0.1:2115", "Success"),),
        designated="127.0.0.1:2114",
        node_scavenge_id="sc-77",
        started_at=NOW - 120,
    )
    assert [(n.endpoint, n.status, n.result) for n in cycle.nodes()] == [
        ("127.0.0.1:2115", "done", "Success"),
        ("127.0.0.1:2114", "running", None),
        ("127.0.0.1:2113", "waiting", None),
    ]
    for state in ("Pausing", "Paused"):
        leader.auto_scavenge["state"] = state
        await c.poll_once()
        assert c.state.auto_scavenge.cycle is not None
    assert paths(leader).count("/auto-scavenge/progress") == 4


async def test_cycle_without_the_progress_endpoint_is_not_asked_again(clock):
    leader = FakeNode(port=2113)
    leader.auto_scavenge = {"state": "InProgress", "schedule": "0 6 * * 6", "timeUntilNextCycle": None}
    c = collector(leader, clock)  # auto_scavenge_progress None: 404, as on KurrentDB
    for _ in range(5):
        await c.poll_once()
    assert paths(leader).count("/auto-scavenge/progress") == 1
    auto = c.state.auto_scavenge
    assert auto.cycle is None and auto.cycle_available is False
    state = DashboardState(nodes={c.state.url: c.state}, selected=c.state.url)
    text = plain(render_auto_scavenge(state, clock.monotonic()))
    assert "not available on this node" in text and "Scavenging now: no node." in text


async def test_cycle_progress_error_is_shown(clock):
    leader = FakeNode(port=2113)
    leader.auto_scavenge = {"state": "InProgress", "schedule": "0 6 * * 6", "timeUntilNextCycle": None}
    leader.answers[("GET", "/auto-scavenge/progress")] = (500, '{"detail": "No leader node was found"}')
    c = collector(leader, clock)
    await c.poll_once()
    detail = 'HTTP 500 from /auto-scavenge/progress: {"detail": "No leader node was found"}'
    assert c.state.auto_scavenge.cycle_error == detail  # the node's status and what it said
    state = DashboardState(nodes={c.state.url: c.state}, selected=c.state.url)
    assert detail in plain(render_auto_scavenge(state, 0.0))


def test_cycle_node_states_while_starting_pausing_and_paused():
    base = AutoScavengeCycle(cycle_id="c", members=("a:1", "b:1"), designated="a:1")
    assert [n.status for n in base.nodes()] == ["starting", "waiting"]
    assert base.nodes()[0].status == "starting"
    pausing = AutoScavengeCycle(
        cycle_id="c", members=("a:1", "b:1"), designated="a:1", node_scavenge_id="s", pause_requested=True
    )
    assert [n.status for n in pausing.nodes()] == ["stopping", "waiting"]
    paused = AutoScavengeCycle(cycle_id="c", members=("a:1", "b:1"), designated="a:1", paused=True)
    assert [n.status for n in paused.nodes()] == ["paused", "waiting"]
    between = AutoScavengeCycle(cycle_id="c", members=("a:1", "b:1"), done=(("b:1", "Errored"),))
    assert [(n.endpoint, n.status, n.result) for n in between.nodes()] == [
        ("b:1", "done", "Errored"),
        ("a:1", "waiting", None),
    ]


def _member(host: str, port: int, state: str) -> Member:
    return Member(instance_id=f"{host}:{port}", state=state, is_alive=True, host=host, port=port)


def _named_cluster() -> DashboardState:
    """A launched cluster: nodes named node1..3, attached as localhost while gossip says 127.0.0.1,
    plus a read-only replica the dashboard does not poll."""
    members = [
        _member("127.0.0.1", 2113, "Leader"),
        _member("127.0.0.1", 2114, "Follower"),
        _member("127.0.0.1", 2115, "Follower"),
        _member("127.0.0.1", 2116, "ReadOnlyReplica"),
    ]
    state = DashboardState()
    for i, port in enumerate((2113, 2114, 2115), 1):
        own = next(m for m in members if m.port == port)
        node = NodeState(
            url=f"http://localhost:{port}",
            name=f"node{i}",
            reachable=True,
            role=own.state,
            members=[own, *(m for m in members if m is not own)],
            is_evdb=True,
        )
        state.nodes[node.url] = node
    state.selected = "http://localhost:2114"
    return state


def test_endpoints_map_to_the_labels_of_the_cluster_panel():
    labels = endpoint_labels(_named_cluster())
    assert labels["127.0.0.1:2113"] == ("node1", "Leader")
    assert labels["127.0.0.1:2114"] == ("node2", "Follower")
    assert labels["localhost:2115"] == ("node3", "Follower")
    assert labels["127.0.0.1:2116"] == ("127.0.0.1:2116", "ReadOnlyReplica")  # not polled: its address


def test_auto_scavenge_panel_shows_the_cycle_node_by_node():
    state = _named_cluster()
    cycle = AutoScavengeCycle(
        cycle_id="cycle-1",
        status="MonitoringNodeScavenge",
        members=("127.0.0.1:2113", "127.0.0.1:2114", "127.0.0.1:2115", "127.0.0.1:2116"),
        done=(("127.0.0.1:2116", "Success"), ("127.0.0.1:2115", "Stopped")),
        designated="127.0.0.1:2114",
        node_scavenge_id="sc-77",
        started_at=NOW - 120,
        last_problem="Node scavenge on 127.0.0.1:2115 cancelled: it did not come back within 300 s",
    )
    state.nodes["http://localhost:2114"].auto_scavenge = AutoScavengeState(
        available=True, enabled=True, state="InProgress", schedule="0 6 * * 6", cycle=cycle
    )
    lines = plain(render_auto_scavenge(state, 0.0)).splitlines()
    text = "\n".join(lines)
    assert "Cluster scavenge cycle-1  started 2023-11-14 22:11:20  2 of 4 nodes done" in text
    rows = [line.split() for line in lines if line[:1].isdigit()]
    assert rows == [
        ["1", "127.0.0.1:2116", "ReadOnlyReplica", "done", "Completed"],
        ["2", "node3", "(127.0.0.1:2115)", "Follower", "done", "Stopped"],
        ["3", "node2", "(127.0.0.1:2114)", "Follower", "running", "node", "scavenge", "sc-77"],
        ["4", "node1", "(127.0.0.1:2113)", "Leader", "waiting"],
    ]
    assert "last problem: Node scavenge on 127.0.0.1:2115 cancelled" in text
    # the guess from each node's own scavenge state is gone: a node scavenging outside the cycle
    # does not make it "running" in the cycle
    state.nodes["http://localhost:2113"].scavenge.running = True
    assert plain(render_auto_scavenge(state, 0.0)) == "\n".join(lines) + "\n"


def test_auto_scavenge_panel_between_cycles_and_paused_while_idle():
    state = _named_cluster()
    node = state.nodes["http://localhost:2114"]
    node.auto_scavenge = AutoScavengeState(available=True, state="Waiting", schedule="0 6 * * 6")
    assert "No cluster scavenge is in progress." in plain(render_auto_scavenge(state, 0.0))
    node.auto_scavenge = AutoScavengeState(
        available=True, state="Paused", cycle=AutoScavengeCycle(status="PausedWhileIdle", paused=True)
    )
    assert "paused between cycles" in plain(render_auto_scavenge(state, 0.0))


async def test_auto_tab_shows_the_cycle_read_through_any_node(clock):
    leader, follower, third = three_nodes()
    for node in (leader, follower, third):  # any node answers: it forwards to the leader
        node.auto_scavenge = {"state": "InProgress", "schedule": "0 6 * * 6", "timeUntilNextCycle": None}
        node.auto_scavenge_progress = progress_body()
    app = make_app(leader, follower, third, clock=clock)
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        await pilot.press("3")
        await pilot.pause()
        text = text_of(app, "auto-panel")
        assert "1 of 3 nodes done" in text
        rows = [line.split() for line in text.splitlines() if line[:1].isdigit()]
        assert rows == [
            ["1", "127.0.0.1:2115", "Follower", "done", "Completed"],
            ["2", "127.0.0.1:2114", "Follower", "running", "node", "scavenge", "sc-77"],
            ["3", "127.0.0.1:2113", "Leader", "waiting"],
        ]
        leader.auto_scavenge_progress = follower.auto_scavenge_progress = progress_body(
            done={"127.0.0.1:2115": "Success", "127.0.0.1:2114": "Success"},
            designatedNode="127.0.0.1:2113",
            nodeScavengeId=None,
        )
        await app.poll_all()
        text = text_of(app, "auto-panel")
        assert "2 of 3 nodes done" in text and "starting" in text


# -- certificates: last reload and CA --------------------------------------------------------------
def certificates_body(**last) -> dict:
    """``GET /admin/certificates`` as evdb answers it (ConfigReloader.describe, evdb/tls/reload.py)."""
    reload = {
        "time": datetime.fromtimestamp(NOW - 300, UTC).isoformat(),
        "trigger": "/admin/reloadconfig",
        "result": "Success",
        "error": None,
        "changedOptions": ["CertificateFile"],
        "certificateChanged": True,
    }
    reload.update(last)
    return {
        "secure": True,
        "certificate": {
            "subject": "CN=eventstoredb-node",
            "issuer": "CN=evdb CA",
            "commonName": "eventstoredb-node",
            "notAfter": "2024-11-14T22:13:20+00:00",
            "fingerprintSha256": "ab" * 32,
            "ipAddresses": ["127.0.0.1"],
            "dnsNames": ["localhost"],
        },
        "ca": {
            "subject": "CN=evdb CA",
            "notAfter": "2033-11-14T22:13:20+00:00",
            "fingerprintSha256": "3fa21c0d9e8b7a65" + "00" * 24,
            "thumbprint": "X",
        },
        "trustedRoots": [],
        "reservedNodeCommonName": "eventstoredb-node",
        "connectionResetIntervalSeconds": 60,
        "loadedAt": datetime.fromtimestamp(NOW - 300, UTC).isoformat(),
        "lastReload": reload,
    }


async def test_certificates_are_read_at_the_slow_cadence_and_after_a_call(clock):
    leader = FakeNode(port=2113)
    leader.certificates = certificates_body()
    c = collector(leader, clock, certificate_every=30.0)
    await c.poll_once()
    info = c.state.certificates
    assert info == NodeCertificates(
        available=True,
        secure=True,
        subject="CN=eventstoredb-node",
        dns_names=("localhost",),
        ip_addresses=("127.0.0.1",),
        ca_subject="CN=evdb CA",
        ca_fingerprint="3fa21c0d9e8b7a65" + "00" * 24,
        loaded_at=NOW - 300,
        reload_at=NOW - 300,
        reload_trigger="/admin/reloadconfig",
        reload_result="Success",
        certificate_changed=True,
    )
    for _ in range(3):
        clock.advance(1)
        await c.poll_once()
    assert paths(leader).count("/admin/certificates") == 1
    clock.advance(30)
    await c.poll_once()
    assert paths(leader).count("/admin/certificates") == 2
    c.full_poll_next = True  # the dashboard sent a reload: its result is read at once
    await c.poll_once()
    assert paths(leader).count("/admin/certificates") == 3
    c.read_certificates_now()  # the Certificates tab opened: a rotation made elsewhere shows at once
    await c.poll_once()
    assert paths(leader).count("/admin/certificates") == 4
    await c.poll_once()
    assert paths(leader).count("/admin/certificates") == 4


async def test_certificates_not_on_this_node_or_not_allowed(clock):
    kurrent = FakeNode(port=2113, evdb=False)  # no /admin/certificates: 404
    c = collector(kurrent, clock)
    await c.poll_once()
    assert c.state.certificates == NodeCertificates(available=False)
    evdb = FakeNode(port=2114)
    evdb.answers[("GET", "/admin/certificates")] = (401, "")
    c2 = collector(evdb, clock)
    await c2.poll_once()
    assert c2.state.certificates.available and "admin or ops" in (c2.state.certificates.error or "")
    state = DashboardState(nodes={c.state.url: c.state, c2.state.url: c2.state})
    text = plain(render_certificates(state, clock.time()), width=100)
    reloads = _section(text, "CA in use and last reload")
    assert _has(reloads, "127.0.0.1:2113 not available on this node")
    assert _has(reloads, "127.0.0.1:2114 HTTP 401: reading it needs an admin or ops user")


def test_certificates_panel_shows_the_last_reload_its_result_and_the_ca():
    state = DashboardState()
    answers = {
        "node1": certificates_body(),
        "node2": certificates_body(
            time=datetime.fromtimestamp(NOW - 60, UTC).isoformat(),
            trigger="SIGHUP",
            result="Failed",
            error="The private key file /certs/node.key does not exist.",
            certificateChanged=False,
        ),
        "node3": {**certificates_body(), "lastReload": None},
    }
    answers["node2"]["ca"] = {**answers["node2"]["ca"], "fingerprintSha256": "99" * 32}
    for i, (name, body) in enumerate(answers.items()):
        node = NodeState(url=f"https://127.0.0.1:{2113 + i}", name=name, reachable=True)
        node.certificates = node_certificates(httpx.Response(200, json=body))
        state.nodes[node.url] = node
    text = plain(render_certificates(state, NOW), width=120)
    reloads = _section(text, "CA in use and last reload")
    assert _has(reloads, "node1 CA CN=evdb CA sha256 3F:A2:1C:0D:9E:8B:7A:65…")
    assert _has(
        reloads, "2023-11-14 22:08:20 (5m 00s ago) via POST /admin/reloadconfig: Success, new certificate"
    )
    assert _has(reloads, "node2 CA CN=evdb CA sha256 99:99:99:99:99:99:99:99…")
    assert _has(
        reloads,
        "22:12:20 (1m 00s ago) via SIGHUP: Failed: The private key file /certs/node.key does not exist.",
    )
    assert _has(
        reloads, "last reload none since the start (certificate loaded 2023-11-14 22:08:20 (5m 00s ago))"
    )
    assert "The nodes chain to 2 different CAs" in text


def test_certificates_panel_names_each_failing_peer_and_why_above_the_reloads():
    state = DashboardState()
    failing = {
        "peer": "127.0.0.1:2115",
        "reason": "certificate validation error: certificate chain validation failed: the other node's "
        "certificate does not chain to a trusted root of this node",
        "certificate": True,
        "since": datetime.fromtimestamp(NOW - 90, UTC).isoformat(),
        "last": datetime.fromtimestamp(NOW - 1, UTC).isoformat(),
        "failures": 12,
    }
    answers = {
        "node1": {**certificates_body(), "peerErrors": [failing]},
        "node2": {**certificates_body(), "peerErrors": []},
    }
    for i, (name, body) in enumerate(answers.items()):
        node = NodeState(url=f"https://127.0.0.1:{2113 + i}", name=name, reachable=True)
        node.certificates = node_certificates(httpx.Response(200, json=body))
        state.nodes[node.url] = node
    text = plain(render_certificates(state, NOW), width=200)
    assert "Calls to other nodes failing now (peerErrors)" in text
    assert _has(
        text, "node1 → 127.0.0.1:2115: certificate validation error: certificate chain validation failed"
    )
    assert _has(text, "(for 1m 30s, 12×)")
    assert "node2 →" not in text
    assert text.index("peerErrors") < text.index("CA in use and last reload")
    # every call succeeding: no such section
    state.nodes["https://127.0.0.1:2113"].certificates = node_certificates(
        httpx.Response(200, json={**certificates_body(), "peerErrors": []})
    )
    assert "peerErrors" not in plain(render_certificates(state, NOW), width=200)


# -- mirrors -------------------------------------------------------------------------------------------
async def test_mirror_status_from_its_url_without_the_nodes_credentials(clock):
    fake = FakeMirror(status=mirror_status(updated=iso(NOW)))
    client = httpx.AsyncClient(auth=("admin", "changeit"), transport=FakeCluster(mirrors=(fake,)).transport())
    state = DashboardState()
    changes: list[int] = []
    m = MirrorCollector(fake.url, state, client, clock, on_change=lambda: changes.append(1))
    await m.poll_once()
    assert [str(r.url) for r in fake.requests] == ["http://127.0.0.1:9500/status"]
    assert "authorization" not in fake.requests[0].headers
    assert state.mirrors[fake.url] == MirrorState(
        fake.url,
        state="live",
        from_url="http://127.0.0.1:2113",
        to_url="http://127.0.0.1:3113",
        position=81920,
        primary_head=81920,
        lag_bytes=0,
        lag_seconds=0.0,
        caught_up=True,
        events_copied=1200,
        events_per_second=250.0,
        updated=NOW,
    )
    await m.poll_once()
    assert changes == [1] and state.mirrors_version == 1  # nothing changed: no redraw
    fake.up = False
    await m.poll_once()
    assert state.mirrors[fake.url].error and state.mirrors_version == 2


async def test_mirror_status_from_its_file_or_its_checkpoint(clock, tmp_path):
    client = httpx.AsyncClient(transport=httpx.MockTransport(lambda r: httpx.Response(500)))
    state = DashboardState()
    checkpoint = tmp_path / "mirror.json"
    by_checkpoint = MirrorCollector(str(checkpoint), state, client, clock)
    by_file = MirrorCollector(str(tmp_path / "mirror.status.json"), state, client, clock)
    await by_checkpoint.poll_once()
    assert "no status file" in (state.mirrors[str(checkpoint)].error or "")
    (tmp_path / "mirror.status.json").write_text(
        json.dumps(mirror_status(state="catching-up", lagBytes=4096, lagSeconds=2.5, caughtUp=False))
    )
    await by_checkpoint.poll_once()
    await by_file.poll_once()
    from_checkpoint = state.mirrors[str(checkpoint)]
    assert from_checkpoint.state == "catching-up" and from_checkpoint.lag_bytes == 4096
    assert from_checkpoint == replace(
        state.mirrors[str(tmp_path / "mirror.status.json")], source=str(checkpoint)
    )
    (tmp_path / "mirror.status.json").write_text("{not json")
    await by_file.poll_once()
    assert "cannot read" in (state.mirrors[str(tmp_path / "mirror.status.json")].error or "")


def test_mirror_section_in_the_cluster_panel():
    state = DashboardState()
    state.mirrors["http://127.0.0.1:9500"] = MirrorState(
        "http://127.0.0.1:9500",
        state="catching-up",
        from_url="http://127.0.0.1:2113",
        to_url="https://10.0.0.9:2113",
        lag_bytes=4 * 1024 * 1024,
        lag_seconds=3.25,
        events_copied=1200,
        events_per_second=812.5,
        last_error="append to the secondary: HTTP 503",
        updated=NOW - 2,
    )
    state.mirrors["/var/lib/evdb/mirror.status.json"] = MirrorState(
        "/var/lib/evdb/mirror.status.json",
        state="live",
        from_url="http://a:2113",
        to_url="http://b:2113",
        lag_bytes=0,
        lag_seconds=0.0,
        caught_up=True,
        updated=NOW - 95,
    )
    state.mirrors["/tmp/old.status.json"] = MirrorState(
        "/tmp/old.status.json",
        state="stopped",
        from_url="http://a:2113",
        to_url="http://c:2113",
        updated=NOW - 600,
    )
    state.mirrors["http://127.0.0.1:9600"] = MirrorState("http://127.0.0.1:9600", error="cannot connect")
    lines = plain(render_cluster(state, NOW), width=200).splitlines()
    row = {line.split()[1]: line for line in lines if line.startswith("⇉")}
    assert "catching-up" in row["127.0.0.1:9500"]
    assert "127.0.0.1:2113 → 10.0.0.9:2113" in row["127.0.0.1:9500"]
    assert "4.0 MiB / 3.25 s" in row["127.0.0.1:9500"] and "812.5" in row["127.0.0.1:9500"]
    assert "last error: append to the secondary: HTTP 503" in row["127.0.0.1:9500"]
    assert "STALE: not updated for 1m 35s; is the mirror running?" in row["mirror.status.json"]
    assert "0 B / 0.00 s" in row["mirror.status.json"]
    assert "stopped 10m 00s ago" in row["old.status.json"] and "STALE" not in row["old.status.json"]
    assert "cannot connect" in row["127.0.0.1:9600"]


async def test_mirror_option_shows_the_section_under_the_members(tmp_path):
    clock = ManualClock()
    leader = FakeNode(port=2113)
    fake = FakeMirror(status=mirror_status(updated=iso(NOW)))
    app = make_app(leader, fake_mirrors=(fake,), clock=clock, mirrors=[fake.url])
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        text = text_of(app, "cluster")
        assert "live" in text and "127.0.0.1:2113 → 127.0.0.1:3113" in text and "250" in text
        assert "STALE" not in text
        clock.advance(30)  # the mirror stopped writing its status
        await app.poll_all()
        app.render_panels()
        assert "STALE: not updated for 30s" in text_of(app, "cluster")
    plain_app = make_app(FakeNode(port=2113), clock=clock)
    async with plain_app.run_test(size=(160, 45)) as pilot:
        await ready(plain_app, pilot)
        assert "mirror" not in text_of(plain_app, "cluster")  # nothing when no --mirror is given


def test_mirror_option_is_repeatable():
    parser = argparse.ArgumentParser()
    register_cli(parser.add_subparsers())
    args = parser.parse_args(
        [
            "dashboard",
            "--attach",
            "http://a:2113",
            "--mirror",
            "http://m:9500",
            "--mirror",
            "/x/m.status.json",
        ]
    )
    assert args.mirror == ["http://m:9500", "/x/m.status.json"]
    assert parser.parse_args(["dashboard"]).mirror == []


def test_cycle_reads_the_shape_the_leader_answers():
    """The contract with evdb/autoscavenge: the progress body the leader builds from its events."""
    from evdb.autoscavenge import state as ev

    machine = ev.AutoScavengeState()
    ids = [ev.node_id(e) for e in ("127.0.0.1:2113", "127.0.0.1:2114", "[::1]:2115")]
    machine.apply(ev.CONFIGURATION_UPDATED, {"schedule": "0 6 * * 6", "updatedAt": iso(NOW - 3600)})
    machine.apply(
        ev.CLUSTER_SCAVENGE_STARTED, {"clusterScavengeId": "c-1", "members": ids, "startedAt": iso(NOW - 60)}
    )
    machine.apply(ev.NODE_DESIGNATED, {"nodeId": ids[2], "designatedAt": iso(NOW - 59)})
    machine.apply(
        ev.NODE_SCAVENGE_STARTED, {"nodeId": ids[2], "scavengeId": "s-1", "startedAt": iso(NOW - 58)}
    )
    machine.apply(ev.NODE_SCAVENGE_COMPLETED, {"nodeId": ids[2], "result": "Success"})
    machine.apply(ev.NODE_DESIGNATED, {"nodeId": ids[1], "designatedAt": iso(NOW - 30)})
    machine.apply(
        ev.NODE_SCAVENGE_STARTED, {"nodeId": ids[1], "scavengeId": "s-2", "startedAt": iso(NOW - 29)}
    )
    body = json.loads(json.dumps({**machine.describe(), "lastProblem": None}))  # as it crosses HTTP
    cycle = cycle_from_progress(body)
    assert cycle is not None and cycle.cycle_id == "c-1" and cycle.started_at == NOW - 60
    assert [(n.endpoint, n.status, n.result) for n in cycle.nodes()] == [
        ("[::1]:2115", "done", "Success"),
        ("127.0.0.1:2114", "running", None),
        ("127.0.0.1:2113", "waiting", None),
    ]
    assert cycle.node_scavenge_id == "s-2" and cycle.status == "MonitoringNodeScavenge"
