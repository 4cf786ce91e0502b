"""Per-node collectors: poll a node's HTTP API into its :class:`NodeState`.

One poll is in flight per node at any time: the next poll is scheduled when the previous one has
finished (``interval`` later), every request has a timeout, and a node that does not answer is
polled less and less often (doubling up to ``max_backoff``) until it answers again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import httpx

from evdb.archive.figures import archive_figures
from evdb.clock import Clock
from tui.answers import (
    backup_state,
    check,
    cycle_from_progress,
    describe,
    json_object,
    mirror_state,
    node_certificates,
    node_endpoint,
    parse_iso,
    status_error,
    subscription_group,
)
from tui.certificates import read_certificate
from tui.client import NodeClient, as_node_client
from tui.collect_scavenge import ScavengeReader
from tui.state import (
    ArchiveState,
    AutoScavengeCycle,
    AutoScavengeState,
    AutoScavengeTransition,
    BackupState,
    DashboardState,
    FinishedCycle,
    Member,
    MirrorState,
    NodeState,
    ProcessFigures,
    SourceError,
    SubscriptionsState,
)

__all__ = [
    "MirrorCollector",
    "NodeCollector",
    "backup_state",
    "cycle_from_progress",
    "member_url",
    "mirror_state",
    "node_certificates",
    "normalise_url",
    "parse_iso",
    "parse_timespan",
]

#: auto-scavenge states in which a cluster scavenge can be under way (its progress is read then)
_CYCLE_STATES = ("InProgress", "Pausing", "Paused")
_TIMESPAN = re.compile(r"^(?:(\d+)\.)?(\d+):(\d+):(\d+)(?:\.(\d+))?$")
#: auto-scavenge transitions kept (and ``$auto-scavenges`` events read)
_TRANSITIONS = 20
#: ``$auto-scavenges`` events (evdb/autoscavenge/state.py): the state each leads to, and what it says
_AUTO_EVENTS = {
    "$cluster-scavenge-started": ("InProgress", "cluster scavenge started"),
    "$node-designated": ("", "next node"),
    "$node-scavenge-completed": ("", "scavenged:"),
    "$pause-requested": ("Pausing", "pause requested: stopping the node scavenge"),
    "$paused": ("Paused", "paused"),
    "$resumed": ("", "resumed"),
    "$cluster-scavenge-completed": ("Waiting", "cluster scavenge completed"),
}
#: the archive's figures (``/stats``) are read every this many polls (every poll while the Archive tab is
#: shown), and on a full poll
ARCHIVE_EVERY = 5

#: persistent subscription groups whose ``/info`` is read each poll (the rest are listed without it)
MAX_SUBSCRIPTION_DETAILS = 50


def normalise_url(url: str) -> str:
    parts = urlsplit(url if "://" in url else f"http://{url}")
    if not parts.hostname:
        raise ValueError(f"not a node address: {url!r}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{parts.scheme}://{host}:{port}"


def member_url(member: Member, scheme: str) -> str:
    host = f"[{member.host}]" if ":" in member.host else member.host
    return f"{scheme}://{host}:{member.port}"


def parse_timespan(text: str | None) -> float | None:
    """.NET TimeSpan text (``[d.]hh:mm:ss[.fffffff]``) to seconds."""
    if not text:
        return None
    m = _TIMESPAN.match(text.strip())
    if not m:
        return None
    days, hours, minutes, seconds, fraction = m.groups()
    total = int(days or 0) * 86400 + int(hours) * 3600 + int(minutes) * 60 + int(seconds)
    return total + (float(f"0.{fraction}") if fraction else 0.0)


class NodeCollector:
    """Polls one node. ``poll_once`` is one full poll; ``run`` repeats it until cancelled."""

    def __init__(
        self,
        state: NodeState,
        client: NodeClient | httpx.AsyncClient,
        clock: Clock,
        *,
        interval: float = 1.0,
        timeout: float = 2.0,
        max_backoff: float = 16.0,
        ca_file: str | None = None,
        trust: Callable[[], ssl.SSLContext | None] | None = None,
        certificate_every: float = 30.0,
        on_members: Callable[[NodeState], None] | None = None,
    ) -> None:
        self.state = state
        self.client = as_node_client(client, timeout)
        self.clock = clock
        self.interval = interval
        self.timeout = timeout
        self.max_backoff = max_backoff
        self.ca_file = ca_file
        #: the dashboard's own trust (old and new CA during a rotation), read at each handshake
        self.trust = trust
        self.certificate_every = certificate_every
        self.on_members = on_members
        self._in_flight = False
        self._certificate_at: float | None = None
        self._certificates_at: float | None = None
        self._cycle_available: bool | None = None
        self._read_at: dict[str, float] = {}  # clock.time() of each source's last good read
        self._io_last: tuple[float, int, int] | None = None
        self._process: Any = None
        #: the scavenge's readers (tui/collect_scavenge.py): progress, history, or what KurrentDB tells
        self.scavenge = ScavengeReader(self.client, state, self._from)
        self.wake = asyncio.Event()
        #: set by the app after it sent this node a call: the next poll reads everything at once
        self.full_poll_next = False
        #: set by the app while its subscriptions screen is open: each poll reads the node's persistent
        #: subscriptions (``/subscriptions`` and each group's ``/info``)
        self.subscriptions_wanted = False
        #: set by the app while its Archive tab is shown: each poll reads the archive's figures (/stats)
        self.archive_wanted = False

    def read_certificates_now(self) -> None:
        """The next poll reads the node's certificates (the TLS handshake and /admin/certificates),
        whatever their slow pace says: a certificate changed outside the dashboard (``evdb certs
        rotate``) shows as soon as somebody looks."""
        self._certificate_at = None
        self._certificates_at = None

    # -- scheduling ------------------------------------------------------------------------------------
    def next_delay(self) -> float:
        if self.state.failures == 0:
            return self.interval
        return min(self.max_backoff, self.interval * 2 ** min(self.state.failures, 10))

    async def run(self) -> None:
        while True:
            await self.poll_once()
            sleeper = asyncio.ensure_future(self.clock.sleep(self.next_delay()))
            waker = asyncio.ensure_future(self.wake.wait())
            try:
                await asyncio.wait({sleeper, waker}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (sleeper, waker):
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            self.wake.clear()

    async def poll_once(self) -> None:
        if self._in_flight:  # never two polls of one node at once
            return
        self._in_flight = True
        try:
            await self._poll()
        finally:
            self._in_flight = False

    async def _poll(self) -> None:
        s = self.state
        before = self._fingerprint()
        s.polls += 1
        full, self.full_poll_next = self.full_poll_next, False
        try:
            gossip = await self.client.gossip(self.state.url)
            check(gossip)
            body = gossip.json()
        except (httpx.HTTPError, ValueError) as exc:
            s.reachable = False
            s.failures += 1
            s.error = describe(exc)
            self._failed("gossip", exc)
            s.role = "Unreachable"
            s.process = self._process_figures()
            if self._fingerprint() != before:
                s.version += 1
            return
        s.reachable = True
        s.failures = 0
        s.error = ""
        s.errors.pop("gossip", None)
        s.last_ok = self._read_at["gossip"] = self.clock.time()
        self._read_gossip(body)
        tasks = [self._from("scavenge", self.scavenge.read())]
        if s.polls == 1 or s.polls % 10 == 0 or not s.info:
            tasks.append(self._from("info", self._read_info()))
            if s.options_available is not False or s.polls % 30 == 0:
                tasks.append(self._from("options", self._read_options()))
        if s.auto_scavenge is None or s.auto_scavenge.available or s.polls % 30 == 0:
            tasks.append(self._from("auto-scavenge", self._read_auto_scavenge()))
        # a backup is read every poll while one runs; else every 5th poll (30th where the node has none)
        backup = s.backup
        if (
            backup is None
            or full
            or (backup.available and (backup.body.get("state") == "running" or s.polls % 5 == 0))
            or s.polls % 30 == 0
        ):
            tasks.append(self._from("backup", self._read_backup()))
        # certificates at a slow pace (a TLS handshake; evdb's /admin/certificates beside it), and at once
        # after the dashboard sent this node a call (a reload shows its result on the next poll)
        now = self.clock.monotonic()
        if full or self._certificate_at is None or now - self._certificate_at >= self.certificate_every:
            self._certificate_at = now
            tasks.append(self._from("TLS handshake", self._read_certificate()))
        if full or self._certificates_at is None or now - self._certificates_at >= self.certificate_every:
            self._certificates_at = now
            tasks.append(self._from("certificates", self._read_node_certificates()))
        if full or self.archive_wanted or s.archive is None or s.polls % ARCHIVE_EVERY == 0:
            tasks.append(self._from("archive", self._read_archive()))
        if self.subscriptions_wanted:
            tasks.append(self._from("subscriptions", self._read_subscriptions()))
        else:
            s.errors.pop("subscriptions", None)  # nothing of them is shown: nothing is stale
        results = await asyncio.gather(*tasks, return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        for error in errors:
            if isinstance(error, asyncio.CancelledError):
                raise error
        if errors:
            s.error = describe(errors[0])
        s.process = self._process_figures()
        if self.on_members is not None:
            self.on_members(s)
        if self._fingerprint() != before:
            s.version += 1

    async def _from(self, source: str, read: Any) -> None:
        """Run one reader: a failure is kept as that source's error (what was read before stays,
        marked stale), a success clears it."""
        try:
            await read
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._failed(source, exc)
            raise
        self.state.errors.pop(source, None)
        self._read_at[source] = self.clock.time()

    def _failed(self, source: str, exc: BaseException) -> None:
        errors = self.state.errors
        previous = errors.get(source)
        since = previous.since if previous is not None else self.clock.time()
        errors[source] = SourceError(describe(exc), since, self._read_at.get(source))

    def _fingerprint(self) -> tuple:
        s = self.state
        return (
            s.reachable,
            s.error,
            tuple(sorted(s.errors.items())),
            tuple(s.members),
            s.role,
            repr(s.scavenge),
            s.auto_scavenge,
            s.backup,
            s.certificate,
            s.certificates,
            s.process,
            repr(s.info),
            s.subscriptions,
            s.archive.figures if s.archive is not None else None,
            s.options,
            s.writer_jump,
        )

    # -- readers ---------------------------------------------------------------------------------------
    def _read_gossip(self, body: dict[str, Any]) -> None:
        s = self.state
        members = [Member.from_gossip(m) for m in body.get("members", []) if isinstance(m, dict)]
        s.members = members
        own_host = urlsplit(s.url)
        server = (str(body.get("serverIp", "")), int(body.get("serverPort") or 0))
        own: Member | None = None
        for m in members:
            if (m.host, m.port) == server or (m.host == own_host.hostname and m.port == own_host.port):
                own = m
                break
        if own is None and members:
            own = members[0]
        s.role = own.state if own is not None and own.state else "Unknown"
        s.last_role = s.role
        if own is not None:
            s.own_endpoint = f"[{own.host}]:{own.port}" if ":" in own.host else own.endpoint
            self._mark_writer(own)

    async def _read_info(self) -> None:
        response = await self.client.info(self.state.url)
        if response.status_code == 200:
            self.state.info = response.json()
            self.state.is_evdb = bool(self.state.info.get("features", {}).get("evdb"))

    async def _read_options(self) -> None:
        """evdb's ``GET /info/options``: each option's value in effect and whether it waits for a
        restart (KurrentDB and older evdb nodes answer 404: nothing is shown of them)."""
        response = await self.client.options(self.state.url)
        if response.status_code in (404, 405):
            self.state.options, self.state.options_available = None, False
            return
        check(response)
        rows = response.json()
        if not isinstance(rows, list):
            raise ValueError(f"/info/options answered {type(rows).__name__}, not a list")
        self.state.options = tuple(r for r in rows if isinstance(r, dict))
        self.state.options_available = True

    def _mark_writer(self, own: Member) -> None:
        """Remember where each chunk's data ended: a writer that moves into another chunk jumps to that
        chunk's start (a scavenge point or a full chunk completed it), which is not data written."""
        s, size = self.state, self.state.chunk_size
        position = own.writer_checkpoint
        if size is None or position < 0:
            return
        chunk = position // size
        last = max(s.writer_marks.items(), default=None)
        if last is not None and chunk > last[0]:
            s.writer_jump = (last[1], position, self.clock.time())
        s.writer_marks[chunk] = max(position, s.writer_marks.get(chunk, -1))
        for old in sorted(s.writer_marks)[:-8]:
            del s.writer_marks[old]

    async def _read_auto_scavenge(self) -> None:
        s = self.state
        before = s.auto_scavenge
        response = await self.client.auto_scavenge_status(self.state.url)
        if response.status_code in (404, 405):
            s.auto_scavenge = AutoScavengeState(available=False)
            return
        check(response)  # any other failure: the state read before stays, marked stale
        body = response.json()
        state = str(body.get("state", ""))
        cycle: AutoScavengeCycle | None = None
        cycle_error: str | None = None
        last_seen = before.last_seen_cycle if before is not None else None
        finished = before.finished if before is not None else None
        # the cycle node by node: while one can be under way, once at the start (the last cycle's end)
        # and once when one has just ended; only where the node has it (asked again every 30th poll
        # after a 404, in case the node was upgraded)
        first = before is None or not before.available or not before.state
        ended = before is not None and before.state in _CYCLE_STATES and state not in _CYCLE_STATES
        schedule = body.get("schedule") if isinstance(body.get("schedule"), str) else None
        # the operator's own text of the schedule: kept while the node's normal form stays the same,
        # read again (with the progress) when it changes
        given = before.schedule_as_given if before is not None and before.schedule == schedule else None
        rescheduled = schedule is not None and given is None
        if (state in _CYCLE_STATES or first or ended or rescheduled) and (
            self._cycle_available is not False or s.polls % 30 == 0
        ):
            progress = await self.client.auto_scavenge_progress(self.state.url)
            if progress.status_code in (404, 405):
                self._cycle_available = False
            elif progress.status_code == 200:
                self._cycle_available = True
                answer = progress.json()
                as_given = json_object(answer).get("scheduleAsGiven")
                if schedule is not None and json_object(answer).get("schedule") == schedule:
                    given = as_given if isinstance(as_given, str) and as_given else schedule
                seen = cycle_from_progress(answer)
                if state in _CYCLE_STATES:
                    cycle = seen
                completed = parse_iso(json_object(answer).get("lastCompletedAt"))
                if completed is not None and (finished is None or finished.completed_at != completed):
                    summary = None
                    if last_seen is not None and (seen is None or seen.cycle_id != last_seen.cycle_id):
                        summary = last_seen
                    finished = FinishedCycle(completed, summary)
                    if summary is not None:
                        last_seen = None
                if seen is not None and seen.cycle_id:
                    last_seen = seen
            else:
                cycle_error = describe(status_error(progress))
        transitions = before.transitions if before is not None else ()
        from_events = before.transitions_from_events if before is not None else False
        changed = before is None or before.state != state
        if changed or first or s.polls % 5 == 0:
            read = await self._auto_scavenge_events()
            if read is not None:
                transitions, from_events = read, True
        if not from_events and before is not None and before.state and changed:
            observed = AutoScavengeTransition(
                self.clock.time(), state, f"seen by the dashboard (was {before.state})"
            )
            transitions = (observed, *transitions)[:_TRANSITIONS]
        s.auto_scavenge = AutoScavengeState(
            available=True,
            enabled=True,
            state=state,
            transitions=transitions,
            transitions_from_events=from_events,
            schedule=schedule,
            schedule_as_given=given,
            time_until_next_cycle=parse_timespan(body.get("timeUntilNextCycle")),
            read_at=self.clock.monotonic(),
            cycle=cycle,
            cycle_available=self._cycle_available,
            cycle_error=cycle_error,
            last_seen_cycle=last_seen,
            finished=finished,
        )

    async def _auto_scavenge_events(self) -> tuple[AutoScavengeTransition, ...] | None:
        """The newest ``$auto-scavenges`` events (the leader writes every step there, replicated to every
        node) as transitions, newest first; None where the stream cannot be read (not there, no rights)."""
        response = await self.client.read_stream(self.state.url, "$auto-scavenges", count=_TRANSITIONS)
        if response.status_code != 200:
            return None
        out = []
        for e in response.json().get("entries", []):
            data = json_object(e.get("data"))
            kind = str(e.get("eventType", ""))
            step = _AUTO_EVENTS.get(kind)
            if step is None:
                continue
            state, detail = step
            if kind in ("$cluster-scavenge-started", "$cluster-scavenge-completed"):
                detail = f"{detail} {data.get('clusterScavengeId', '')}".rstrip()
            elif kind == "$node-scavenge-completed":
                detail = f"{detail} {data.get('result', '')}"
            stamped = next((v for k, v in data.items() if k.endswith("At") and isinstance(v, str)), None)
            at = parse_iso(stamped) or parse_iso(e.get("updated"))
            out.append(AutoScavengeTransition(at, state, detail, node_endpoint(data.get("nodeId"))))
        return tuple(out)

    async def _read_subscriptions(self) -> None:
        """``GET /subscriptions``, then each group's ``/info`` (strategy, consumers, parked count).

        A node that does not serve them says so (a follower forwards the request to its leader, as
        KurrentDB's do; one that knows no leader answers 503 "Server Is Not Ready"): kept as its
        answer, not as a failure. Any other failure keeps what was read before, marked stale."""
        s = self.state
        response = await self.client.subscriptions(self.state.url)
        if response.status_code in (404, 405):
            s.subscriptions = SubscriptionsState(available=False)
            return
        if response.status_code == 503 and s.role != "Leader":
            s.subscriptions = SubscriptionsState(available=True, not_served=describe(status_error(response)))
            return
        if response.status_code >= 300 and s.subscriptions is not None and s.subscriptions.not_served:
            s.subscriptions = None  # what it said as a follower is not the leader's answer: unknown
        check(response)
        body = response.json()
        if not isinstance(body, list):
            raise ValueError("/subscriptions did not answer a JSON list")
        summaries = [item for item in body if isinstance(item, dict)]
        shown = summaries[:MAX_SUBSCRIPTION_DETAILS]
        details = await asyncio.gather(*(self._subscription_info(item) for item in shown))
        groups = [subscription_group(item, *detail) for item, detail in zip(shown, details, strict=True)]
        groups += [subscription_group(item, None, None) for item in summaries[MAX_SUBSCRIPTION_DETAILS:]]
        s.subscriptions = SubscriptionsState(
            available=True,
            groups=tuple(groups),
            details_left_out=max(0, len(summaries) - MAX_SUBSCRIPTION_DETAILS),
        )

    async def _subscription_info(self, summary: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
        """A group's ``/info`` answer, or why it could not be read."""
        stream, group = str(summary.get("eventStreamId", "")), str(summary.get("groupName", ""))
        try:
            response = await self.client.subscription_info(self.state.url, stream, group)
        except httpx.HTTPError as exc:
            return None, describe(exc)
        if response.status_code != 200:
            return None, describe(status_error(response))
        try:
            body = response.json()
        except ValueError:
            return (
                None,
                f"/subscriptions/{quote(stream, safe='')}/{quote(group, safe='')}/info did not answer JSON",
            )
        return (body, None) if isinstance(body, dict) else (None, "the group's info is not a JSON object")

    async def _read_archive(self) -> None:
        """``GET /stats``: the archive's figures of evdb's ``es.archive`` (none: the archive is off
        there, or the node is not evdb). A failure keeps what was read before, marked stale."""
        response = await self.client.stats(self.state.url)
        check(response)
        self.state.archive = ArchiveState(archive_figures(response.json()), self.clock.time())

    async def _read_backup(self) -> None:
        s = self.state
        response = await self.client.backup_current(self.state.url)
        if response.status_code in (404, 405):
            s.backup = BackupState(available=False)
        elif response.status_code == 200:
            body = response.json() if response.content else {}
            s.backup = backup_state(s.backup, body if isinstance(body, dict) else {})
        elif response.status_code == 204:
            s.backup = BackupState(available=True)
        else:
            raise status_error(response)  # the backup read before stays, marked stale

    async def _read_certificate(self) -> None:
        try:
            context = self.trust() if self.trust is not None else None
            cert = await read_certificate(
                self.state.url, self.ca_file, self.clock.time(), self.timeout, trust=context
            )
        except (OSError, TimeoutError, ValueError) as exc:
            self._certificate_at = None  # try again on the next poll
            raise ConnectionError(f"TLS handshake: {exc}") from exc
        self.state.certificate = cert

    async def _read_node_certificates(self) -> None:
        """evdb's ``/admin/certificates``: the CA in use and the last reload (KurrentDB: 404)."""
        try:
            response = await self.client.certificates(self.state.url)
        except httpx.HTTPError:
            self._certificates_at = None  # try again on the next poll
            raise
        known = self.state.certificates
        if response.status_code >= 500 and known is not None and known.available and not known.error:
            self._certificates_at = None
            raise status_error(response)  # what was read before stays, marked stale
        self.state.certificates = node_certificates(response)

    def _process_figures(self) -> ProcessFigures | None:
        pid = self.state.pid
        if not pid:
            return None
        import psutil

        try:
            if self._process is None or self._process.pid != pid:
                self._process = psutil.Process(pid)
                self._process.cpu_percent(None)
            p = self._process
            with p.oneshot():
                cpu = p.cpu_percent(None)
                rss = p.memory_info().rss
                try:
                    io = p.io_counters()
                    read_bytes, write_bytes = io.read_bytes, io.write_bytes
                except (AttributeError, psutil.AccessDenied):
                    read_bytes = write_bytes = 0
        except psutil.Error:
            self._process = None
            return None
        now = self.clock.monotonic()
        read_rate = write_rate = 0.0
        if self._io_last is not None and now > self._io_last[0]:
            span = now - self._io_last[0]
            read_rate = max(0.0, (read_bytes - self._io_last[1]) / span)
            write_rate = max(0.0, (write_bytes - self._io_last[2]) / span)
        self._io_last = (now, read_bytes, write_bytes)
        return ProcessFigures(pid, cpu, rss, read_rate, write_rate)


class MirrorCollector:
    """Reads one ``evdb mirror``'s status: ``GET <url>/status`` (``--metrics-port``) or its status file
    (``<checkpoint>.status.json``; a checkpoint file names its status file beside it).

    Like the node collectors: one read in flight, the next scheduled when it finished."""

    def __init__(
        self,
        source: str,
        state: DashboardState,
        client: NodeClient | httpx.AsyncClient,
        clock: Clock,
        *,
        interval: float = 1.0,
        timeout: float = 2.0,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.source = source
        self.state = state
        self.client = as_node_client(client, timeout)
        self.clock = clock
        self.interval = interval
        self.timeout = timeout
        self.on_change = on_change
        self._in_flight = False

    @property
    def is_url(self) -> bool:
        return self.source.startswith(("http://", "https://"))

    def status_url(self) -> str:
        url = self.source.rstrip("/")
        return url if url.endswith("/status") else f"{url}/status"

    def status_path(self) -> Path:
        path = Path(self.source).expanduser()
        if path.is_dir():  # the mirror's folder: its default checkpoint's status file
            return path / "checkpoint.status.json"
        if path.name.endswith(".status.json"):
            return path
        stem = path.stem if path.suffix == ".json" else path.name  # a checkpoint file: its status file
        return path.with_name(stem + ".status.json")

    async def run(self) -> None:
        while True:
            await self.poll_once()
            await self.clock.sleep(self.interval)

    async def poll_once(self) -> None:
        if self._in_flight:
            return
        self._in_flight = True
        try:
            new = await self._read()
        finally:
            self._in_flight = False
        if self.state.mirrors.get(self.source) != new:
            self.state.mirrors[self.source] = new
            self.state.mirrors_version += 1
            if self.on_change is not None:
                self.on_change()

    async def _read(self) -> MirrorState:
        if self.is_url:
            try:
                response = await self.client.mirror_status(self.source)
            except httpx.HTTPError as exc:
                return MirrorState(self.source, error=describe(exc))
            if response.status_code != 200:
                return MirrorState(self.source, error=f"HTTP {response.status_code} from {self.status_url()}")
            try:
                body = response.json()
            except ValueError:
                return MirrorState(self.source, error=f"{self.status_url()} did not answer JSON")
        else:
            path = self.status_path()
            try:
                body = json.loads(path.read_text())
            except FileNotFoundError:
                return MirrorState(self.source, error=f"no status file {path} (is the mirror started?)")
            except (OSError, ValueError) as exc:
                return MirrorState(self.source, error=f"cannot read {path}: {exc}")
        return mirror_state(self.source, body)
