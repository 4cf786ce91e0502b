"""The mirror's writes to the secondary: at its leader, followed through not-leader answers and
resigns (evdb/client_retry.py), each append idempotent (see mirror.py's docstring)."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import Callable
from urllib.parse import quote

from evdb.client_retry import REQUIRE_LEADER, LeaderRetry, leader_from_gossip, member_urls, not_leader
from evdb.clock import Clock
from evdb.mirror.sides import CONNECTION_ERRORS, MirrorError, MirrorSettings, Reply, Side, Transient
from evdb.streams import MAX_EVENT_NUMBER, is_metastream, original_stream_of

__all__ = ["EVENTS_JSON", "SecondaryWriter"]

EVENTS_JSON = "application/vnd.kurrent.events+json"


class SecondaryWriter:
    """Appends, tombstones and reads of the secondary for one mirror. ``replaying`` tells whether the
    events now copied may have been copied by an earlier run; ``note_problem`` records a problem that is
    being retried (the mirror's ``lastError``)."""

    def __init__(
        self,
        settings: MirrorSettings,
        logger: logging.Logger,
        clock: Clock,
        replaying: Callable[[], bool],
        note_problem: Callable[[str], None],
    ) -> None:
        self.settings = settings
        self.logger = logger
        self.clock = clock
        self._replaying = replaying
        self._note_problem = note_problem
        self.writing_to: str | None = None  # the secondary's node the appends go to (its leader)

    async def request(self, target: Side, method: str, url: str, **kwargs) -> Reply:
        """One request to the secondary, at its leader: a write asks for the leader
        (``Kurrent-RequireLeader``) and follows a redirect to it; a not-leader answer, or a node that is
        gone, makes the mirror ask the members who leads now and try again there, bounded in time
        (evdb/client_retry.py); past that it is a transient problem (the mirror reconnects)."""
        if method != "GET":
            kwargs["headers"] = {**kwargs.get("headers", {}), **REQUIRE_LEADER}
        retry = LeaderRetry(self.settings.leader_retry_seconds, clock=self.clock)
        while True:
            try:
                response = await target.request(method, url, **kwargs)
            except CONNECTION_ERRORS as exc:
                problem = f"Writing to the secondary {target.base} failed: {type(exc).__name__}: {exc}"
                if await self._wait_for_leader(target, retry, problem):
                    continue
                raise Transient(problem) from None
            answer = not_leader(response.status, response.headers, response.body, target.base)
            if answer is None:
                break
            problem = f"The secondary {target.base} answered {response.status}: {response.text[:200]}"
            if answer.leader and answer.leader != target.base and retry.follow():
                self.follow(target, answer.leader)
                continue
            if not await self._wait_for_leader(target, retry, problem):
                raise Transient(problem)
        self.writing_to = target.base
        if response.status >= 500 or response.status in (408, 429):
            raise Transient(f"The secondary answered {response.status}: {response.text[:200]}")
        if response.status in (401, 403):
            raise MirrorError(
                f"The secondary {self.settings.target.url} refused the credentials ({response.status}): "
                "the mirror needs a user that may write every stream and its metadata (an admin)"
            )
        return response

    def follow(self, target: Side, leader: str) -> None:
        if leader != target.base:
            self.logger.info(
                "The secondary's leader is %s: the mirror writes there (was %s)", leader, target.base
            )
            target.base = leader
            if leader not in target.members:
                target.members.append(leader)

    async def learn_members(self, target: Side) -> None:
        """The secondary's members, from its gossip (a single node names itself), and its leader."""
        try:
            reply = await target.request("GET", "/gossip", headers={"Accept": "application/json"})
            gossip = reply.json() if reply.status == 200 else None
        except (*CONNECTION_ERRORS, ValueError):
            return
        self._take_gossip(target, gossip)

    def _take_gossip(self, target: Side, gossip: object) -> bool:
        """Add the members a gossip answer names to ``target``'s, and follow the leader it names (True when
        it names one)."""
        scheme = target.base.split("://", 1)[0]
        for url in member_urls(gossip, scheme):
            if url not in target.members:
                target.members.append(url)
        leader = leader_from_gossip(gossip, scheme)
        if leader is None:
            return False
        self.follow(target, leader)
        return True

    async def _wait_for_leader(self, target: Side, retry: LeaderRetry, problem: str) -> bool:
        """After a not-leader answer or a node gone: wait the retry's next pause, then point ``target`` at
        the leader the first answering member names. False once the retry's time is spent."""
        wait = retry.next_wait()
        if wait is None:
            return False
        self._note_problem(problem)
        self.logger.debug("%s; asking the members who leads in %.1f s", problem, wait)
        await asyncio.sleep(wait)
        for member in list(target.members):
            try:
                async with target.session.get(
                    member + "/gossip", headers={"Accept": "application/json"}, allow_redirects=False
                ) as response:
                    gossip = json.loads(await response.read()) if response.status == 200 else None
            except (*CONNECTION_ERRORS, ValueError):
                continue
            if self._take_gossip(target, gossip):
                return True
        return True

    async def append(self, target: Side, stream: str, events: list[dict]) -> None:
        body = json.dumps(
            [
                {
                    "eventId": e["eventId"],
                    "eventType": e["eventType"],
                    "dataBase64": e.get("dataBase64", ""),
                    "metadataBase64": e.get("metaDataBase64", ""),
                    "isJson": bool(e.get("isJson")),
                }
                for e in events
            ]
        )
        first = events[0]["eventNumber"]
        if first == 0 and self._replaying() and await self._soft_deleted(target, stream):
            # Expected version -1 (no stream) succeeds on a soft-deleted stream, recreating it:
            # a replayed first run would be written twice. The primary's event 0 comes before any
            # soft delete of its stream in $all, so the secondary's soft delete was copied after it.
            self.logger.debug(
                "Stream %s is soft-deleted on the secondary: its first events were copied", stream
            )
            return
        response = await self.request(
            target,
            "POST",
            f"/streams/{quote(stream, safe='')}",
            data=body,
            headers={"Content-Type": EVENTS_JSON, "Kurrent-ExpectedVersion": str(first - 1)},
        )
        if response.status == 201:
            return
        current = response.headers.get("Kurrent-CurrentVersion")
        if response.status == 400 and current is not None:
            if len(events) > 1:  # some were copied before a restart: one by one, each idempotent
                for event in events:
                    await self.append(target, stream, [event])
                return
            await self._resolve_conflict(target, stream, events[0], int(current))
            return
        if response.status == 410:
            # The mirror copies in $all order and a tombstone is a stream's last record: the
            # secondary's tombstone was copied after these events (a restart from an older checkpoint).
            self.logger.debug(
                "Stream %s is tombstoned on the secondary: events %d..%d were copied before",
                stream,
                first,
                events[-1]["eventNumber"],
            )
            return
        raise MirrorError(
            f"The secondary refused events {first}..{events[-1]['eventNumber']} of '{stream}' "
            f"({response.status}): {response.text[:300]}"
        )

    async def _soft_deleted(self, target: Side, stream: str) -> bool:
        if is_metastream(stream):
            return False
        response = await self.request(target, "GET", f"/streams/{quote(stream, safe='')}/metadata")
        try:
            return response.status == 200 and response.json().get("$tb") == MAX_EVENT_NUMBER
        except (ValueError, AttributeError):
            return False

    async def _resolve_conflict(self, target: Side, stream: str, event: dict, current: int) -> None:
        """A single event the secondary refused as a wrong expected version (and not as a repeat)."""
        number = event["eventNumber"]
        if is_metastream(stream) and current >= number:
            # Appending to a soft-deleted stream makes the secondary write its own $$stream event
            # (new $tb) with its own id, as the primary did: the same metadata, another event id.
            # A higher version means this mirror already copied later metadata events after it.
            if current > number:
                return
            original = original_stream_of(stream)
            response = await self.request(target, "GET", f"/streams/{quote(original, safe='')}/metadata")
            try:
                theirs = response.json() if response.status == 200 else None
                ours = json.loads(base64.b64decode(event.get("dataBase64", "")))
            except ValueError:
                theirs, ours = None, object()
            if theirs == ours:
                self.logger.debug("Metadata event %d of %s is already on the secondary", number, original)
                return
        raise MirrorError(
            f"The secondary's stream '{stream}' is at version {current}, but the primary's event {number} "
            f"({event['eventId']}) follows version {number - 1}. Either something other than this mirror "
            "wrote to the secondary, or the primary's older events of this stream were scavenged before "
            "the mirror copied them; see docs/operations/recovery.md (seeding a secondary from a backup)."
        )

    async def tombstone(self, target: Side, stream: str) -> None:
        response = await self.request(
            target,
            "DELETE",
            f"/streams/{quote(stream, safe='')}",
            headers={"Kurrent-HardDelete": "true", "Kurrent-ExpectedVersion": "-2"},
        )
        if response.status in (204, 410):  # 410: already tombstoned (copied before a restart)
            return
        raise MirrorError(
            f"The secondary refused to tombstone '{stream}' ({response.status}): {response.text[:300]}"
        )
