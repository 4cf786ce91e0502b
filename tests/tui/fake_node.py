"""A fake evdb (or KurrentDB) node behind httpx.MockTransport: just enough of the HTTP API for the
dashboard's collectors, with every request it received recorded."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

import httpx


def subscription_group(
    stream: str,
    group: str,
    *,
    parked: int = 0,
    in_flight: tuple[int, ...] = (),
    known: int | None = 20,
    checkpointed: int | None = 12,
    strategy: str = "RoundRobin",
    status: str = "Live",
) -> dict[str, Any]:
    """A group's ``GET /subscriptions/{stream}/{group}/info`` as evdb answers it (KurrentDB's shape);
    one consumer per ``in_flight`` entry, with that many messages in flight of 10 slots."""

    def position(number: int | None) -> str | None:
        if number is None:
            return None
        return f"C:{number}/P:{number}" if stream == "$all" else str(number)

    connections = [
        {
            "from": f"127.0.0.1:{50000 + i}",
            "username": "admin",
            "averageItemsPerSecond": 0.0,
            "totalItemsProcessed": 10 + i,
            "countSinceLastMeasurement": 0,
            "extraStatistics": [],
            "availableSlots": 10 - n,
            "inFlightMessages": n,
            "connectionName": f"worker-{i + 1}",
        }
        for i, n in enumerate(in_flight)
    ]
    return {
        "config": {"namedConsumerStrategy": strategy, "readBatchSize": 20},
        "eventStreamId": stream,
        "groupName": group,
        "status": status,
        "averageItemsPerSecond": 0.0,
        "totalItemsProcessed": 30,
        "lastCheckpointedEventPosition": position(checkpointed),
        "lastKnownEventPosition": position(known),
        "totalInFlightMessages": sum(in_flight),
        "outstandingMessagesCount": sum(in_flight),
        "connections": connections,
        "parkedMessageCount": parked,
    }


@dataclass
class FakeSubscriptions:
    """The persistent subscription groups of a cluster: served by whichever fake node leads (an evdb
    follower answers 503 "Server Is Not Ready"; a KurrentDB follower forwards, so answers them too)."""

    groups: list[dict[str, Any]] = field(default_factory=list)
    #: (stream, group) of every replayParked received
    replayed: list[tuple[str, str]] = field(default_factory=list)

    def find(self, stream: str, group: str) -> dict[str, Any] | None:
        return next((g for g in self.groups if (g["eventStreamId"], g["groupName"]) == (stream, group)), None)

    def handle(self, node: FakeNode, method: str, path: str) -> httpx.Response:
        if node.evdb and node.state != "Leader":
            return httpx.Response(503, text="Server Is Not Ready")
        parts = path.split("/")[2:]  # the path is unquoted: a name with '/' is not supported here
        if method == "GET" and parts == []:
            keys = ("eventStreamId", "groupName", "status", "averageItemsPerSecond", "totalItemsProcessed")
            summaries = [
                {
                    **{k: g[k] for k in keys},
                    "lastCheckpointedEventPosition": g["lastCheckpointedEventPosition"],
                    "lastKnownEventPosition": g["lastKnownEventPosition"],
                    "connectionCount": len(g["connections"]),
                    "totalInFlightMessages": g["totalInFlightMessages"],
                }
                for g in self.groups
            ]
            return httpx.Response(200, json=summaries)
        if len(parts) == 3 and parts[2] in ("info", "replayParked"):
            group = self.find(parts[0], parts[1])
            if group is None:
                return httpx.Response(404, text="")
            if method == "GET" and parts[2] == "info":
                return httpx.Response(200, json=group)
            if method == "POST" and parts[2] == "replayParked":
                self.replayed.append((parts[0], parts[1]))
                group["totalItemsProcessed"] += group["parkedMessageCount"]
                group["parkedMessageCount"] = 0
                return httpx.Response(200, json={"correlationId": "c-1", "reason": "", "result": "Success"})
        return httpx.Response(404, text="Not found")


@dataclass
class FakeNode:
    host: str = "127.0.0.1"
    port: int = 2113
    state: str = "Leader"
    evdb: bool = True
    up: bool = True
    #: the other nodes of its cluster (FakeCluster sets them): gossip names them, alive while they are up
    others: list[FakeNode] = field(default_factory=list)
    #: this node's view of a peer's liveness, by port, where it differs from the peer being up
    sees_alive: dict[int, bool] = field(default_factory=dict)
    writer_checkpoint: int = 1000
    scavenge_id: str = ""
    progress: dict[str, Any] | None = None
    last: dict[str, Any] | None = None
    streams: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    auto_scavenge: dict[str, Any] | None = None
    #: evdb's GET /auto-scavenge/progress (None with auto_scavenge set: a node without it, 404)
    auto_scavenge_progress: dict[str, Any] | None = None
    #: evdb's GET /admin/certificates (None: 404, as KurrentDB)
    certificates: dict[str, Any] | None = None
    #: GET /admin/backup/current: None 404 (a node without backups), {} 204 (never backed up)
    backup: dict[str, Any] | None = None
    #: evdb's GET /info/options rows (None: 404, as KurrentDB and older evdb nodes)
    options: list[dict[str, Any]] | None = None
    #: the cluster's persistent subscriptions (None: no /subscriptions endpoint, 404)
    subscriptions: FakeSubscriptions | None = None
    #: evdb's ``es.archive`` of GET /stats (None: the archive is off, /stats has none)
    archive: dict[str, Any] | None = None
    requests: list[httpx.Request] = field(default_factory=list)
    answers: dict[tuple[str, str], tuple[int, str]] = field(default_factory=dict)
    #: GET /admin/scavenge/last: the last scavenge started here and its result (InProgress while it runs)
    last_scavenge: tuple[str, str] | None = None
    #: a started scavenge ends (with ``finish_result``) after this many reads of /admin/scavenge/last;
    #: None: only when the test ends it (finish_scavenge)
    finish_after_reads: int | None = None
    finish_result: str = "Success"
    scavenges_started: int = 0
    #: POST /auto-scavenge/cycle-now: None starts a cycle (200), a text refuses it (400 with a JSON string)
    cycle_now_refusal: str | None = None
    #: called on POST /admin/node/resign (a test moves the roles)
    on_resign: Callable[[], None] | None = None
    #: events written by POST /streams/{stream} (metadata and deletions apart), by stream
    written: dict[str, int] = field(default_factory=dict)
    _last_reads: int = 0

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def member(self) -> dict[str, Any]:
        return {
            "instanceId": f"id-{self.port}",
            "state": self.state,
            "isAlive": True,
            "httpEndPointIp": self.host,
            "httpEndPointPort": self.port,
            "writerCheckpoint": self.writer_checkpoint,
            "chaserCheckpoint": self.writer_checkpoint,
            "epochNumber": 3,
            "isReadOnlyReplica": False,
            "esVersion": "0.1.0",
        }

    def peers(self) -> list[dict[str, Any]]:
        """The other members as this node's gossip shows them (a dead one: state Unknown, as evdb's)."""
        out = []
        for other in self.others:
            member = other.member()
            member["isAlive"] = self.sees_alive.get(other.port, other.up)
            if not member["isAlive"]:
                member["state"] = "Unknown"
            out.append(member)
        return out

    def changes(self) -> list[str]:
        return [f"{r.method} {r.url}" for r in self.requests if r.method != "GET"]

    def finish_scavenge(self, result: str = "Success") -> None:
        """The running scavenge ends: /admin/scavenge/last says so, progress shows it as the last run."""
        if not self.scavenge_id:
            return
        self.last_scavenge = (self.scavenge_id, result)
        self.last = {"scavengeId": self.scavenge_id, "result": result, "phase": "Cleaning", "chunks": []}
        self.scavenge_id, self.progress = "", None

    def append(self, stream: str, event_type: str, data: Any) -> None:
        events = self.streams.setdefault(stream, [])
        events.append(
            {
                "eventType": event_type,
                "eventNumber": len(events),
                "streamId": stream,
                "data": data,
                "updated": f"2024-05-01T12:00:{len(events):02}.000000Z",
            }
        )
        every = self.streams.setdefault("$all", [])
        every.append({**events[-1], "eventNumber": len(every), "position": 1000 * len(every)})

    def _feed(self, stream: str, start: str, direction: str, count: int) -> httpx.Response:
        events = self.streams.get(stream)
        if events is None:
            return httpx.Response(404, text="")
        if direction == "forward":
            chosen = [e for e in events if e["eventNumber"] >= int(start)][:count]
            entries = list(reversed(chosen))
        else:
            top = len(events) - 1 if start == "head" else int(start)
            entries = [e for e in reversed(events) if e["eventNumber"] <= top][:count]
        return httpx.Response(200, json={"entries": entries})

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if not self.up:
            raise httpx.ConnectError("connection refused", request=request)
        path = unquote(request.url.path)
        method = request.method
        if (method, path) in self.answers:
            status, body = self.answers[(method, path)]
            return httpx.Response(status, text=body)
        if path == "/gossip":
            return httpx.Response(
                200,
                json={
                    "members": [self.member(), *self.peers()],
                    "serverIp": self.host,
                    "serverPort": self.port,
                },
            )
        if path == "/info":
            features = {"evdb": True} if self.evdb else {}
            return httpx.Response(200, json={"esVersion": "x", "features": features})
        if path == "/info/options" and self.options is not None:
            return httpx.Response(200, json=self.options)
        if path == "/admin/scavenge/current":
            link = f"/admin/scavenge/{self.scavenge_id}" if self.scavenge_id else ""
            return httpx.Response(200, json={"scavengeId": self.scavenge_id, "scavengeLink": link})
        if path == "/admin/scavenge/progress":
            if not self.evdb:
                return httpx.Response(404)
            if self.progress is not None:
                return httpx.Response(200, json={"running": True, **self.progress})
            if self.scavenge_id:  # just started: evdb's progress names it from the first moment
                body = {"running": True, "scavengeId": self.scavenge_id, "phase": "Beginning"}
                return httpx.Response(200, json=body)
            return httpx.Response(200, json={"running": False, "last": self.last})
        if path == "/admin/scavenge" and method == "POST":
            if self.scavenge_id:
                return httpx.Response(400, text="Scavenge is already running")
            self.scavenges_started += 1
            self.scavenge_id = "sc-new" if self.scavenges_started == 1 else f"sc-new-{self.scavenges_started}"
            self.last_scavenge = (self.scavenge_id, "InProgress")
            self._last_reads = 0
            return httpx.Response(200, json={"scavengeId": self.scavenge_id})
        if path == "/admin/scavenge/last":
            if self.scavenge_id and self.finish_after_reads is not None:
                self._last_reads += 1
                if self._last_reads > self.finish_after_reads:
                    self.finish_scavenge(self.finish_result)
            scavenge_id, result = self.last_scavenge or ("", "")
            return httpx.Response(200, json={"scavengeId": scavenge_id, "scavengeResult": result})
        if path.startswith("/admin/scavenge/") and method == "DELETE":
            wanted = path.rsplit("/", 1)[1]
            if not self.scavenge_id or wanted not in (self.scavenge_id, "current"):
                return httpx.Response(404, text="Scavenge Id does not exist")
            stopped, self.scavenge_id, self.progress = self.scavenge_id, "", None
            self.last_scavenge = (stopped, "Stopped")
            return httpx.Response(200, json=stopped)
        if path == "/stats":
            es: dict[str, Any] = {"writer": {"writerCheckpoint": self.writer_checkpoint}}
            if self.archive is not None:
                es["archive"] = self.archive
            return httpx.Response(200, json={"proc": {}, "sys": {}, "es": es})
        if path == "/metrics":
            return httpx.Response(
                200,
                text='kurrentdb_statuses{name="Scavenge",status="Idle"} 100\n'
                'kurrentdb_statuses{name="Scavenge",status="Calculation Phase"} 200\n',
            )
        if path.startswith("/streams/") and method in ("POST", "DELETE"):
            parts = path.split("/")[2:]
            if method == "DELETE":
                return httpx.Response(204)
            if len(parts) == 1:
                self.written[parts[0]] = self.written.get(parts[0], 0) + len(json.loads(request.content))
            return httpx.Response(201)
        if path.startswith("/streams/"):
            parts = path.split("/")[2:]
            stream = parts[0]
            if len(parts) == 4:
                return self._feed(stream, parts[1], parts[2], int(parts[3]))
            return self._feed(stream, "head", "backward", 20)
        if path.startswith("/auto-scavenge/"):
            if self.auto_scavenge is None:
                return httpx.Response(404)
            if path == "/auto-scavenge/status":
                return httpx.Response(200, json=self.auto_scavenge)
            if path == "/auto-scavenge/progress":
                if self.auto_scavenge_progress is None:
                    return httpx.Response(404)
                return httpx.Response(200, json=self.auto_scavenge_progress)
            if path == "/auto-scavenge/pause":
                self.auto_scavenge["state"] = "Paused"
                return httpx.Response(200, json={})
            if path == "/auto-scavenge/resume":
                self.auto_scavenge["state"] = "Waiting"
                return httpx.Response(200, json={})
            if path == "/auto-scavenge/cycle-now" and method == "POST":
                if self.cycle_now_refusal is not None:
                    return httpx.Response(400, json=self.cycle_now_refusal)
                self.auto_scavenge["state"] = "InProgress"
                members = [f"{n.host}:{n.port}" for n in [self, *self.others]]
                return httpx.Response(200, json={"clusterScavengeId": "cs-1", "members": members})
            if path == "/auto-scavenge/configure":
                self.auto_scavenge["schedule"] = json.loads(request.content)["schedule"]
                self.auto_scavenge["state"] = "Waiting"
                return httpx.Response(200, json={})
        if path == "/admin/backup" and method == "POST" and self.backup is not None:
            body = json.loads(request.content)
            self.backup = {
                "operation": "differential" if body["differential"] else "full",
                "state": "running",
            }
            return httpx.Response(202, json={"backupId": "b-1", "backupLink": "/admin/backup/current"})
        if path == "/admin/backup/current":
            if self.backup is None:
                return httpx.Response(404)
            return httpx.Response(200, json=self.backup) if self.backup else httpx.Response(204)
        if (
            path == "/subscriptions" or path.startswith("/subscriptions/")
        ) and self.subscriptions is not None:
            return self.subscriptions.handle(self, method, path)
        if path == "/admin/certificates" and self.certificates is not None:
            return httpx.Response(200, json=self.certificates)
        if path in ("/admin/node/resign", "/admin/reloadconfig") and method == "POST":
            if path == "/admin/node/resign" and self.on_resign is not None:
                self.on_resign()
            return httpx.Response(200)
        return NO_ROUTE()


def NO_ROUTE() -> httpx.Response:
    """What a fake answers a request it does not serve: 404, marked so that the contract's meta-test
    (tests/tui/test_client_contract.py) tells a fake lacking a request from a node's own 404."""
    return httpx.Response(404, text="Not found", headers={"x-fake": "no-route"})


@dataclass
class FakeMirror:
    """An ``evdb mirror`` started with ``--metrics-port``: ``GET /status`` answers ``status``."""

    host: str = "127.0.0.1"
    port: int = 9500
    status: dict[str, Any] | None = None  # None: 404
    up: bool = True
    requests: list[httpx.Request] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if not self.up:
            raise httpx.ConnectError("connection refused", request=request)
        if request.url.path == "/status" and self.status is not None:
            return httpx.Response(200, json=self.status)
        return NO_ROUTE()


def mirror_status(**changes: Any) -> dict[str, Any]:
    """A status as ``Mirror.status()`` writes it (evdb/mirror/mirror.py), live and caught up."""
    status: dict[str, Any] = {
        "kind": "evdb-mirror",
        "version": 1,
        "state": "live",
        "pid": 4242,
        "from": "http://127.0.0.1:2113",
        "to": "http://127.0.0.1:3113",
        "position": 81920,
        "checkpointPosition": 81920,
        "primaryHead": 81920,
        "lagBytes": 0,
        "lagSeconds": 0.0,
        "caughtUp": True,
        "eventsCopied": 1200,
        "eventsSkipped": 30,
        "metadataEvents": 2,
        "tombstones": 1,
        "appends": 90,
        "eventsPerSecond": 250.0,
        "uptimeSeconds": 60.0,
        "lastError": None,
        "metricsUrl": "http://127.0.0.1:9500",
        "checkpoint": "/tmp/mirror.json",
        "updated": "2024-05-01T12:00:00Z",
    }
    status.update(changes)
    return status


class FakeCluster:
    """Several fake nodes (and mirrors) behind one transport, routed by host:port."""

    def __init__(self, *nodes: FakeNode, mirrors: tuple[FakeMirror, ...] = ()) -> None:
        self.nodes: dict[str, FakeNode | FakeMirror] = {f"{n.host}:{n.port}": n for n in nodes}
        self.nodes.update({f"{m.host}:{m.port}": m for m in mirrors})
        for n in nodes:
            n.others = [m for m in nodes if m is not n]
        #: every changing request to any node, in the order they came
        self.journal: list[str] = []

    def transport(self) -> httpx.MockTransport:
        def handler(request: httpx.Request) -> httpx.Response:
            parts = urlsplit(str(request.url))
            if request.method != "GET":
                self.journal.append(f"{request.method} {request.url}")
            return self.nodes[f"{parts.hostname}:{parts.port}"].handle(request)

        return httpx.MockTransport(handler)
