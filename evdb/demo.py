"""``evdb demo-load``: write demo data that gives a scavenge something to reclaim.

:func:`write_demo_data` writes events across ten streams of one run (``demo-<run>-...``, a new run id
each time, so it can be run again), then sets ``$maxCount`` on three of them, soft-deletes two and
hard-deletes two; three are left whole. Its :class:`DemoReport` says what was written and how many
bytes a scavenge should reclaim on each node: the log records of the deleted streams' events and of
the events beyond ``$maxCount`` (record frames as the node stores them; the deletion records and
the newest ``$maxCount`` events stay). A scavenge writes a scavenge point, which completes the active
chunk, so even data written into a fresh database's first chunk is reclaimed.

A cluster may change its leader while the demo writes (a resign, a node stopped). Its writes ask for
the leader (``Kurrent-RequireLeader``): a follower's redirect is followed at once; an answer ``503 This
node is not the leader`` (or no answer) is retried, for up to :data:`FOLLOW_LEADER_FOR` seconds, against
the leader the nodes' gossip names, which the rest of the run then writes to (:class:`_Target`, with
evdb/client_retry.py's rules). A retry
never writes an event twice: every batch carries its event ids and the exact version the stream is at,
so a batch that was written before the answer was lost is answered as a duplicate; the metadata is
written at an exact version too, and a deletion is retried only when the leader shows it is not done.

The dashboard's demo key calls :func:`write_demo_data` (in a worker thread: it is synchronous) with
``LocalCluster(...).client(url)``; the command line finds the local cluster's CA and credentials
itself (:func:`connection_settings`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from os import PathLike
from typing import Any
from urllib.parse import quote, urlsplit

import httpx

from evdb.client_retry import REQUIRE_LEADER, LeaderRetry, leader_from_gossip, member_urls, not_leader
from evdb.clock import Clock, SystemClock
from evdb.errors import EvdbError, InvalidInput
from evdb.storage.records import event_frame_size

__all__ = [
    "FOLLOW_LEADER_FOR",
    "MAX_COUNT",
    "ConnectionSettings",
    "DemoLoadError",
    "DemoReport",
    "check_event_count",
    "connection_settings",
    "register_cli",
    "write_demo_data",
]

MIN_EVENTS, MAX_EVENTS = 10, 1_000_000
#: enough for a local cluster (64 KiB chunks) to hold ~500 chunks and a scavenge to last seconds
DEFAULT_EVENTS = 100_000
MAX_COUNT = 10  # the $maxCount set on the streams of that kind
BATCH = 100  # events a request: about 32 KiB, half the smallest chunk (an append fits in one chunk)
EVENTS_TYPE = "application/vnd.kurrent.events+json"
#: seconds one request is retried while the cluster has no leader, or its node does not answer (an
#: election takes a few seconds; a stopped leader's followers notice it within GossipTimeoutMs)
FOLLOW_LEADER_FOR = 60.0

#: the ten streams of a run: (name, kind, event type); kinds: kept, max-count, soft-deleted, hard-deleted
STREAMS = (
    ("orders-1", "kept", "OrderPlaced"),
    ("orders-2", "kept", "OrderPlaced"),
    ("orders-3", "kept", "OrderPlaced"),
    ("sensor-1", "max-count", "TemperatureRead"),
    ("sensor-2", "max-count", "TemperatureRead"),
    ("sensor-3", "max-count", "TemperatureRead"),
    ("cart-1", "soft-deleted", "ItemAdded"),
    ("cart-2", "soft-deleted", "ItemAdded"),
    ("session-1", "hard-deleted", "SessionStarted"),
    ("session-2", "hard-deleted", "SessionStarted"),
)
_FILLER = "The quick brown fox jumps over the lazy dog. " * 4  # about 180 bytes an event


class DemoLoadError(EvdbError):
    """The node refused a demo write or did not answer; names the node, the request and the answer."""


def check_event_count(events: object) -> int:
    """The rule for how many demo events to write: a whole number from 10 (one a stream) to 1,000,000.
    Raises InvalidInput (exit code 2) before anything is sent."""
    if isinstance(events, bool) or not isinstance(events, int) or not MIN_EVENTS <= events <= MAX_EVENTS:
        raise InvalidInput(
            f"The number of demo events must be a whole number from {MIN_EVENTS} to {MAX_EVENTS:,}, "
            f"not {events!r}."
        )
    return events


@dataclass(frozen=True)
class DemoReport:
    """What :func:`write_demo_data` wrote, and what a scavenge of each node should reclaim."""

    run: str  # the run id in every stream name: demo-<run>-...
    events_written: int
    bytes_written: int  # the events' record frames in the log
    kept: list[str] = field(default_factory=list)
    max_count: list[str] = field(default_factory=list)  # $maxCount = MAX_COUNT
    soft_deleted: list[str] = field(default_factory=list)
    hard_deleted: list[str] = field(default_factory=list)
    reclaimable_events: int = 0
    reclaimable_bytes: int = 0

    def summary(self) -> list[str]:
        """The lines ``evdb demo-load`` prints."""
        return [
            f"Wrote {self.events_written:,} events ({_size(self.bytes_written)}) to 10 streams demo-{self.run}-*:",
            f"  kept whole:                {', '.join(self.kept)}",
            f"  $maxCount {MAX_COUNT} (older events go): {', '.join(self.max_count)}",
            f"  soft-deleted:              {', '.join(self.soft_deleted)}",
            f"  hard-deleted (tombstoned): {', '.join(self.hard_deleted)}",
            f"On each node a scavenge should reclaim about {_size(self.reclaimable_bytes)} "
            f"({self.reclaimable_events:,} events), e.g. evdb scavenge start --node URL --wait.",
        ]


def _size(n: int) -> str:
    for unit, factor in (("MiB", 1024**2), ("KiB", 1024)):
        if n >= factor:
            return f"{n / factor:,.1f} {unit}"
    return f"{n:,} bytes"


def _check(response: httpx.Response, what: str) -> httpx.Response:
    if response.status_code >= 300:
        raise DemoLoadError(
            f"{what}: {response.request.method} {response.request.url} answered {response.status_code} "
            f"{response.text[:200]}"
        )
    return response


def _not_ready(response: httpx.Response) -> bool:
    """A node's answer that it cannot take a write this moment, without naming another node: 503 with
    Retry-After (a new leader taking office, a member waiting for its sign-in lease after an election)."""
    return response.status_code == 503 and "Retry-After" in response.headers


class _Target:
    """Where the demo's requests go: the node it was given until a node says it is not the leader (or
    does not answer); then the leader that answer or the nodes' gossip names, as KurrentDB's clients
    do (evdb/client_retry.py: writes ask for the leader, a follower's redirect is followed, a
    not-leader answer is tried again at the leader, bounded by ``patience`` seconds of ``clock``;
    ``sleep`` is injected)."""

    def __init__(
        self,
        client: httpx.Client,
        *,
        patience: float,
        clock: Clock,
        sleep: Callable[[float], None],
        notice: Callable[[str], None] | None,
    ) -> None:
        self.client = client
        self.url = str(client.base_url).rstrip("/")
        self.scheme = urlsplit(self.url).scheme
        self.known = [self.url]  # nodes to ask for the leader: the one given, then every member seen
        self.patience = patience
        self.clock = clock
        self.sleep = sleep
        self.notice = notice
        self.answered = False  # a node answered a request of this run (then one that does not is retried)

    def send(
        self,
        method: str,
        path: str,
        what: str,
        *,
        json: Any = None,
        headers: dict[str, str] | None = None,
        done: Callable[[httpx.Response | None], bool] | None = None,
    ) -> httpx.Response | None:
        """The answer to the request (raising DemoLoadError for a refusal). ``done(answer)`` is asked
        before each retry and of a retry's answer (``None``: before the retry is sent): True means the
        earlier attempt was written after all, and None is returned."""
        retry = LeaderRetry(self.patience, clock=self.clock)
        headers = {**(headers or {}), **REQUIRE_LEADER}
        retried = False
        while True:
            if retried and done is not None and done(None):
                return None
            try:
                response = self.client.request(method, self.url + path, json=json, headers=headers)
            except httpx.TransportError as exc:
                if not self.answered:  # no node of it ever answered: nothing to follow
                    raise DemoLoadError(f"The node at {self.url} did not answer: {exc!r}") from None
                problem = f"{self.url} did not answer ({exc!r})"
            else:
                self.answered = True
                answer = not_leader(response.status_code, response.headers, response.content, self.url)
                if answer is None and not _not_ready(response):
                    if retried and done is not None and done(response):
                        return None
                    return _check(response, what)
                problem = f"{method} {self.url}{path} answered {response.status_code} {response.text[:200]}"
                if answer is not None and answer.leader and answer.leader != self.url and retry.follow():
                    self._point_at(answer.leader)  # a follower's redirect: the leader, at once
                    retried = True
                    continue
            wait = retry.next_wait()
            if wait is None:
                raise DemoLoadError(
                    f"{what}: no leader took the write within {self.patience:.0f} s ({problem})"
                )
            self.sleep(wait)
            retried = True
            self._follow_leader()

    def read(self, path: str) -> httpx.Response | None:
        """A read from the current target, None when it does not answer or is not the leader."""
        try:
            response = self.client.get(self.url + path, headers={"Accept": "application/json"})
        except httpx.TransportError:
            return None
        return None if response.status_code >= 500 else response

    def _point_at(self, leader: str) -> None:
        if leader != self.url and self.notice is not None:
            self.notice(f"following the leader at {leader}")
        self.url = leader
        if leader not in self.known:
            self.known.append(leader)

    def _follow_leader(self) -> None:
        """Point at the leader that the first answering node's gossip names (nothing changes while none
        is known: the next attempt goes where the last did)."""
        for node in list(self.known):
            try:
                gossip = self.client.get(node + "/gossip", timeout=5).json()
            except (httpx.HTTPError, ValueError):
                continue
            self.known += [url for url in member_urls(gossip, self.scheme) if url not in self.known]
            leader = leader_from_gossip(gossip, self.scheme)
            if leader is not None:
                self._point_at(leader)
                return


def write_demo_data(
    client: httpx.Client,
    *,
    events: int = DEFAULT_EVENTS,
    progress: Callable[[int, int], None] | None = None,
    notice: Callable[[str], None] | None = None,
    patience: float = FOLLOW_LEADER_FOR,
    clock: Clock,
    sleep: Callable[[float], None] = time.sleep,
) -> DemoReport:
    """Write ``events`` demo events (10 to 1,000,000) with ``client`` (base URL and credentials of a
    node; a follower forwards the writes), spread evenly over ten new streams, then the metadata and
    deletions. ``progress(done, total)`` is called after each batch; ``notice(text)`` when the writes
    move to another node (a new leader). Raises InvalidInput for a bad count (nothing is sent) and
    DemoLoadError when the node refuses a request, or no leader takes it within ``patience`` seconds."""
    total = check_event_count(events)
    run = uuid.uuid4().hex[:6]
    names = {short: f"demo-{run}-{short}" for short, _, _ in STREAMS}
    counts = {
        short: total // len(STREAMS) + (1 if i < total % len(STREAMS) else 0)
        for i, (short, _, _) in enumerate(STREAMS)
    }
    frames: dict[str, list[int]] = {short: [] for short in names}
    target = _Target(client, patience=patience, clock=clock, sleep=sleep, notice=notice)
    done = 0
    # a batch of each stream in turn, so that a chunk holds several streams' events: its weight (what a
    # scavenge removes from it) lies anywhere from none to all, to read against a threshold
    for first in range(0, max(counts.values()), BATCH):
        for short, _kind, event_type in STREAMS:
            if first >= counts[short]:
                continue
            stream = names[short]
            batch = []
            for n in range(first, min(first + BATCH, counts[short])):
                data = {"stream": short, "n": n, "note": _FILLER}
                stored = json.dumps(data, separators=(",", ":")).encode()  # as the node stores it
                frames[short].append(event_frame_size(len(stream.encode()), len(event_type), len(stored), 0))
                batch.append({"eventId": str(uuid.uuid4()), "eventType": event_type, "data": data})
            # the exact version makes a retry of a batch already written a duplicate, answered 201
            target.send(
                "POST",
                f"/streams/{quote(stream)}",
                f"writing demo events to {stream}",
                json=batch,
                headers={"Content-Type": EVENTS_TYPE, "Kurrent-ExpectedVersion": str(first - 1)},
            )
            done += len(batch)
            if progress is not None:
                progress(done, total)
    for short, kind, _ in STREAMS:
        stream, path = names[short], f"/streams/{quote(names[short])}"
        last = counts[short] - 1
        if kind == "max-count":
            # the run's own new metadata stream: only this run writes it, so on a retry a wrong
            # expected version (400) means the first attempt was written
            target.send(
                "POST",
                f"{path}/metadata",
                f"setting $maxCount on {stream}",
                json={"$maxCount": MAX_COUNT},
                headers={"Kurrent-ExpectedVersion": "-1"},
                done=lambda r: r is not None and r.status_code == 400 and "Wrong expected" in r.text,
            )
        elif kind == "soft-deleted":

            def soft_deleted(r: httpx.Response | None, path: str = path) -> bool:
                if r is not None:
                    return False
                metadata = target.read(f"{path}/metadata")  # at the leader, before a retry
                return metadata is not None and metadata.status_code == 200 and "$tb" in metadata.json()

            target.send(
                "DELETE",
                path,
                f"soft-deleting {stream}",
                headers={"Kurrent-ExpectedVersion": str(last)},
                done=soft_deleted,
            )
        elif kind == "hard-deleted":
            target.send(
                "DELETE",
                path,
                f"hard-deleting {stream}",
                headers={"Kurrent-HardDelete": "true", "Kurrent-ExpectedVersion": str(last)},
                done=lambda r: r is not None and r.status_code == 410,  # the tombstone is there already
            )
    reclaimable: list[int] = []
    by_kind: dict[str, list[str]] = {"kept": [], "max-count": [], "soft-deleted": [], "hard-deleted": []}
    for short, kind, _ in STREAMS:
        by_kind[kind].append(names[short])
        if kind in ("soft-deleted", "hard-deleted"):
            reclaimable += frames[short]
        elif kind == "max-count":
            reclaimable += frames[short][: max(0, counts[short] - MAX_COUNT)]
    return DemoReport(
        run=run,
        events_written=done,
        bytes_written=sum(sum(f) for f in frames.values()),
        kept=by_kind["kept"],
        max_count=by_kind["max-count"],
        soft_deleted=by_kind["soft-deleted"],
        hard_deleted=by_kind["hard-deleted"],
        reclaimable_events=len(reclaimable),
        reclaimable_bytes=sum(reclaimable),
    )


# -- connecting ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ConnectionSettings:
    url: str
    user: str
    password: str
    verify: bool | str  # a CA file, True (the system's roots) or False (no verification)

    def client(self, timeout: float = 60.0) -> httpx.Client:
        return httpx.Client(
            base_url=self.url, auth=(self.user, self.password), verify=self.verify, timeout=timeout
        )


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return parts.scheme, (parts.hostname or "").lower(), parts.port


def connection_settings(
    url: str | None,
    *,
    data_dir: str | PathLike[str] | None = None,
    user: str | None = None,
    password: str | None = None,
    ca: str | None = None,
    insecure_skip_verify: bool = False,
) -> ConnectionSettings:
    """How to reach ``url``: a node of the local cluster in ``data_dir`` (default: the user's, as
    ``evdb cluster up`` and the dashboard use) is verified with that cluster's CA and reached with its
    credentials, as the dashboard does; any other node with the system's roots and admin/changeit.
    ``ca``, ``user``, ``password`` and ``insecure_skip_verify`` win over both. Without ``url``: a
    running node of the local cluster (ClusterLaunchError when none runs). InvalidInput for a URL
    that is not http(s)://host:port."""
    from evdb.cluster.launcher import ClusterLaunchError, LocalCluster, default_data_dir

    cluster = LocalCluster(data_dir if data_dir is not None else default_data_dir())
    info: dict[str, Any] | None = cluster.info() if cluster.exists() else None
    if url is None:
        running = cluster.running_nodes() if info is not None else []
        if not running:
            raise ClusterLaunchError(
                f"no node of the local cluster in {cluster.data_dir} is running: start it (evdb cluster up "
                f"--data {cluster.data_dir}) or give --url"
            )
        url = str(running[0]["url"])
    scheme, host, _port = _origin(url)
    if scheme not in ("http", "https") or not host:
        raise InvalidInput(
            f"--url must be a node's http:// or https:// address (host and port), not {url!r}."
        )
    url = url.rstrip("/")
    ours = info is not None and any(_origin(n["url"]) == _origin(url) for n in info["nodes"])
    verify: bool | str = True
    if ours and info is not None and info.get("ca"):
        verify = str(info["ca"])
    if ca:
        verify = ca
    if insecure_skip_verify:
        verify = False
    return ConnectionSettings(
        url=url,
        user=user or (str(info["user"]) if ours and info is not None else "admin"),
        password=password or (str(info["password"]) if ours and info is not None else "changeit"),
        verify=verify,
    )


# -- the command --------------------------------------------------------------------------------------
def register_cli(subparsers: argparse._SubParsersAction) -> None:
    from evdb.cluster.launcher import default_data_dir

    parser = subparsers.add_parser(
        "demo-load",
        help="write demo events, deletions and $maxCount metadata so a scavenge has something to reclaim",
        description=(
            "Write demo events across ten new streams, set $maxCount on three, soft-delete two and "
            "hard-delete two, then print how much a scavenge should reclaim on each node."
        ),
    )
    parser.add_argument(
        "--url", help="a node's address (default: a running node of the local cluster in --data)"
    )
    parser.add_argument(
        "--events", type=int, default=DEFAULT_EVENTS, help=f"events to write (default {DEFAULT_EVENTS})"
    )
    parser.add_argument(
        "--data",
        default=str(default_data_dir()),
        help=f"folder of the local cluster whose CA and credentials to use (default: {default_data_dir()})",
    )
    parser.add_argument("--user", help="user (default: the local cluster's, else admin)")
    parser.add_argument("--password", help="password of --user (default: the local cluster's, else changeit)")
    parser.add_argument(
        "--ca", metavar="FILE", help="CA certificate of the node (default: the local cluster's)"
    )
    parser.add_argument(
        "--insecure-skip-verify", action="store_true", help="do not verify the node's certificate"
    )
    parser.set_defaults(func=_demo_load)


def _demo_load(args: argparse.Namespace) -> int:
    from evdb.cluster.launcher import ClusterLaunchError

    try:
        events = check_event_count(args.events)
        settings = connection_settings(
            args.url,
            data_dir=args.data,
            user=args.user,
            password=args.password,
            ca=args.ca,
            insecure_skip_verify=args.insecure_skip_verify,
        )
    except (InvalidInput, ClusterLaunchError) as exc:
        print(f"evdb demo-load: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, InvalidInput) else 1
    print(f"Writing {events:,} demo events to {settings.url} …", file=sys.stderr)
    try:
        with settings.client() as client:
            report = write_demo_data(
                client,
                events=events,
                clock=SystemClock(),  # the command's own real clock
                notice=lambda text: print(f"evdb demo-load: {text}", file=sys.stderr),
            )
    except DemoLoadError as exc:
        print(f"evdb demo-load: {exc}", file=sys.stderr)
        return 1
    print("\n".join(report.summary()))
    return 0
