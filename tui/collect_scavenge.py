"""A node's scavenge, read for its collector (tui/collector.py): evdb's progress (which names the
running scavenge), or without it ``/admin/scavenge/current`` with ``$scavenges-<id>`` and ``/metrics``
(KurrentDB); and the history of runs from ``$scavenges`` (a finished run's details read once)."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

from tui.answers import check, history_entry, json_object, json_or_text, status_error
from tui.client import NodeClient
from tui.state import ChunkRow, NodeState, ScavengeHistoryEntry, ScavengeState

__all__ = ["ScavengeReader"]

# KurrentDB's status gauge: kurrentdb_statuses{name="Scavenge",status="Accumulation Phase"} 1.7e9
_STATUS = re.compile(r'^\w*statuses\{[^}]*name="Scavenge"[^}]*status="([^"]+)"[^}]*\}\s+([0-9.eE+-]+)', re.M)
_METRIC_PHASES = {
    "Accumulation Phase": "Accumulation",
    "Calculation Phase": "Calculation",
    "Chunk execution Phase": "Chunk execution",
    "Chunk merging Phase": "Chunk merging",
    "Index execution Phase": "Index execution",
    "Cleaning Phase": "Cleaning",
}
#: links of ``$scavenges`` read for the history (two per run: started, completed)
_HISTORY_LINKS = 100


class ScavengeReader:
    """Reads one node's scavenge into its ``NodeState.scavenge``; ``track`` runs a read as one source of
    the collector's (its failure kept apart, the figures read before stay marked stale)."""

    def __init__(
        self, client: NodeClient, state: NodeState, track: Callable[[str, Awaitable[None]], Awaitable[None]]
    ) -> None:
        self.client = client
        self.state = state
        self.track = track
        self._history_ids: tuple[str, ...] = ()
        self._history_detail: dict[str, ScavengeHistoryEntry] = {}

    async def read(self) -> None:
        s = self.state
        sc = s.scavenge
        if sc.progress_available:  # evdb's progress names the running scavenge: one request suffices
            progress = await self.client.scavenge_progress(self.state.url)
            if progress.status_code == 200:
                body = progress.json()
                current = str(body.get("scavengeId") or "") if body.get("running") else ""
                changed = current != sc.current_id
                sc.current_id = current
                self._apply_progress(sc, body)
                self._confirm_start(sc)
                if changed or s.polls % 5 == 1 or not self._history_ids:
                    await self.track("history", self._read_history(sc))
                if self._ended_in_history(sc):
                    await self._reread_progress(sc)
                return
            if progress.status_code not in (404, 405):
                raise status_error(progress)  # the figures read before stay, marked stale
            sc.progress_available = None  # ask both again
        response = await self.client.scavenge_current(self.state.url)
        if response.status_code == 401:
            raise PermissionError(
                "401 from /admin/scavenge/current: give --user/--password of an admin or ops user"
            )
        check(response)
        current = json_or_text(response).get("scavengeId", "") or ""
        changed = current != sc.current_id
        if sc.progress_available is not False:
            progress = await self.client.scavenge_progress(self.state.url)
            if progress.status_code in (404, 405):
                sc.progress_available = False
            elif progress.status_code == 200:
                sc.progress_available = True
                sc.current_id = current
                self._apply_progress(sc, progress.json())
            else:
                raise status_error(progress)
        sc.current_id = current
        if sc.progress_available is False:
            await self._scavenge_from_streams(sc, current)
        self._confirm_start(sc)
        if changed or s.polls % 5 == 1 or not self._history_ids:
            await self.track("history", self._read_history(sc))
        if sc.progress_available and self._ended_in_history(sc):
            await self._reread_progress(sc)

    def _ended_in_history(self, sc: ScavengeState) -> bool:
        """The history (read after the progress) says the run the progress showed running has ended:
        the progress is the older of the two (a short run ends between the reads)."""
        return sc.running and any(
            h.scavenge_id == sc.current_id and h.result not in ("InProgress", "Unknown") for h in sc.history
        )

    async def _reread_progress(self, sc: ScavengeState) -> None:
        """Read the progress again, so that the panel never shows a run as running below a history
        that says it ended; if the node still says running, the history's end is believed."""
        progress = await self.client.scavenge_progress(self.state.url)
        if progress.status_code == 200:
            body = progress.json()
            sc.current_id = str(body.get("scavengeId") or "") if body.get("running") else ""
            self._apply_progress(sc, body)
        if self._ended_in_history(sc):
            ended = next(h for h in sc.history if h.scavenge_id == sc.current_id)
            sc.running, sc.current_id, sc.result = False, "", ended.result

    def _confirm_start(self, sc: ScavengeState) -> None:
        """A poll begun after the answer to a start tells the truth about it: the optimistic "starting"
        gives way (a poll that was under way when the answer came does not count)."""
        if sc.starting_id and self.state.polls > sc.starting_after_poll:
            sc.starting_id = ""

    def _apply_progress(self, sc: ScavengeState, body: dict[str, Any]) -> None:
        running = bool(body.get("running"))
        figures = body if running else (body.get("last") or {})
        sc.running = running
        if not figures:
            sc.phase = ""
            sc.shown_id = ""
            sc.chunks = []
            sc.weights = {}
            sc.result = None
            sc.point = None
            sc.phase_seconds = {}
            sc.executed_through = None
            return
        sc.shown_id = str(figures.get("scavengeId", ""))
        point = figures.get("scavengePoint")
        sc.point = point if isinstance(point, dict) else None
        sc.phase = str(figures.get("phase", ""))
        sc.phase_elapsed = float(figures.get("phaseElapsedSeconds") or 0)
        sc.elapsed = float(figures.get("elapsedSeconds") or 0)
        sc.threads = figures.get("threads")
        sc.threshold = figures.get("threshold")
        sc.throttle_percent = figures.get("throttlePercent")
        sc.chunks_total = int(figures.get("chunksTotal") or 0)
        sc.chunks_done = int(figures.get("chunksDone") or 0)
        sc.streams_total = int(figures.get("streamsTotal") or 0)
        sc.streams_done = int(figures.get("streamsDone") or 0)
        sc.current_chunk = figures.get("currentChunk")
        sc.bytes_reclaimed = int(figures.get("bytesReclaimed") or 0)
        sc.records_removed = int(figures.get("recordsRemoved") or 0)
        sc.weights = {int(k): float(v) for k, v in (figures.get("chunkWeights") or {}).items()}
        sc.chunks = [
            ChunkRow(
                start=int(c["chunkStartNumber"]),
                end=int(c["chunkEndNumber"]),
                weight=c.get("weight"),
                executed=c.get("executed"),
                merged=bool(c.get("merged")),
                size_before=c.get("sizeBefore"),
                size_after=c.get("sizeAfter"),
                space_saved=(c["sizeBefore"] - c["sizeAfter"])
                if c.get("sizeBefore") is not None and c.get("sizeAfter") is not None
                else None,
            )
            for c in figures.get("chunks") or []
        ]
        sc.phase_seconds = {
            str(p["phase"]): float(p["seconds"])
            for p in figures.get("phaseSeconds") or []
            if isinstance(p, dict) and isinstance(p.get("seconds"), (int, float)) and p.get("phase")
        }
        through = figures.get("executedThrough")
        sc.executed_through = through if isinstance(through, int) else None
        sc.result = "InProgress" if running else figures.get("result")

    async def _read_events(self, stream: str, start: int, count: int = 100) -> list[dict[str, Any]]:
        """Events of a stream, oldest first (KurrentDB's AtomPub feed with ``embed=body``)."""
        response = await self.client.read_stream(self.state.url, stream, start, "forward", count)
        if response.status_code in (404, 410):
            return []
        response.raise_for_status()
        return list(reversed(response.json().get("entries", [])))

    async def _scavenge_from_streams(self, sc: ScavengeState, current: str) -> None:
        """Without evdb's progress endpoint: what ``$scavenges-<id>`` and ``/metrics`` tell."""
        sc.running = bool(current)
        if not current:
            sc.phase = ""
            return
        if sc.shown_id != current:
            sc.shown_id = current
            sc.chunks = []
            sc.bytes_reclaimed = 0
        sc.result = "InProgress"
        entries = await self._read_events(f"$scavenges-{current}", 0, 4096)
        rows = []
        saved = 0
        for e in entries:
            data = json_object(e.get("data"))
            if e.get("eventType") == "$scavengeChunksCompleted":
                rows.append(
                    ChunkRow(
                        start=int(data.get("chunkStartNumber", 0)),
                        end=int(data.get("chunkEndNumber", 0)),
                        executed=bool(data.get("wasScavenged")),
                        space_saved=data.get("spaceSaved"),
                    )
                )
                saved += int(data.get("spaceSaved") or 0)
            elif e.get("eventType") == "$scavengeMergeCompleted" and data.get("wasMerged"):
                rows.append(
                    ChunkRow(
                        start=int(data.get("chunkStartNumber", 0)),
                        end=int(data.get("chunkEndNumber", 0)),
                        executed=True,
                        merged=True,
                        space_saved=data.get("spaceSaved"),
                    )
                )
                saved += int(data.get("spaceSaved") or 0)
        sc.chunks = rows
        sc.bytes_reclaimed = saved
        sc.phase = await self._phase_from_metrics() or ("Chunk execution" if rows else "")

    async def _phase_from_metrics(self) -> str:
        response = await self.client.metrics(self.state.url)
        if response.status_code != 200:
            return ""
        latest = max(((float(v), name) for name, v in _STATUS.findall(response.text)), default=None)
        return _METRIC_PHASES.get(latest[1], "") if latest else ""

    async def _read_history(self, sc: ScavengeState) -> None:
        response = await self.client.read_stream(self.state.url, "$scavenges", count=_HISTORY_LINKS)
        if response.status_code in (401, 403, 404, 410):
            sc.history = []
            self._history_ids = ()
            return
        check(response)
        ids: list[str] = []
        started: dict[str, str] = {}
        nodes: dict[str, str] = {}
        finished: dict[str, dict[str, Any]] = {}
        for e in response.json().get("entries", []):
            data = e.get("data")
            event_type = e.get("eventType")
            if event_type == "$>" and isinstance(data, str):  # an unresolved link: "n@$scavenges-<id>"
                scavenge_id = data.partition("@")[2].removeprefix("$scavenges-")
            elif isinstance(data, dict):  # KurrentDB resolves links: the linked event itself
                scavenge_id = str(data.get("scavengeId", ""))
                if data.get("nodeEndpoint"):
                    nodes[scavenge_id] = str(data["nodeEndpoint"])
                if event_type == "$scavengeCompleted":
                    finished[scavenge_id] = data
                elif event_type == "$scavengeStarted":
                    started[scavenge_id] = str(e.get("updated", ""))
            else:
                continue
            if scavenge_id and scavenge_id not in ids:
                ids.append(scavenge_id)
        for i, scavenge_id in enumerate(ids):
            known = self._history_detail.get(scavenge_id)
            if known is not None and (known.result not in ("InProgress", "Unknown") or i >= 10):
                continue  # finished runs are read once; unfinished ones again while they are recent
            if scavenge_id in finished:
                self._history_detail[scavenge_id] = history_entry(
                    scavenge_id, finished[scavenge_id], started.get(scavenge_id, ""), nodes.get(scavenge_id)
                )
                continue
            self._history_detail[scavenge_id] = await self._history_from_stream(scavenge_id)
        self._history_ids = tuple(ids)
        sc.history = [self._history_detail[i] for i in ids]

    async def _history_from_stream(self, scavenge_id: str) -> ScavengeHistoryEntry:
        stream = f"$scavenges-{scavenge_id}"
        first = await self.client.read_stream(self.state.url, stream, 0, "forward", 1)
        last = await self.client.read_stream(self.state.url, stream, count=1)
        started = ""
        node = ""
        if first.status_code == 200 and first.json().get("entries"):
            entry = first.json()["entries"][0]
            started = str(entry.get("updated", ""))
            node = str(json_object(entry.get("data")).get("nodeEndpoint") or "")
        if last.status_code == 200 and last.json().get("entries"):
            entry = last.json()["entries"][0]
            if entry.get("eventType") == "$scavengeCompleted" and isinstance(entry.get("data"), dict):
                return history_entry(scavenge_id, entry["data"], started, node)
            running = scavenge_id == self.state.scavenge.current_id
            return ScavengeHistoryEntry(
                scavenge_id, "InProgress" if running else "Unknown", started, node=node
            )
        return ScavengeHistoryEntry(scavenge_id, "Unknown", started, node=node)
