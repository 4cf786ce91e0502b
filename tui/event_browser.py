"""The dashboard's event browser: pick a stream, page through its events newest first.

Reads go through the node's HTTP API (``GET /streams/{stream}/{from}/backward/{count}?embed=body``),
so the node's access rules apply and its errors are shown as it sent them. An event whose record
flag ``IsRedacted`` is set (evdb's ``isRedacted``) is labelled "redacted" and its data is never
shown: it is only 0xFF bytes of the original size.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Input, Label, OptionList, Static

from tui.client import NodeClient
from tui.widgets import KeyBar, TickBox

__all__ = ["DELETED_MARK", "PAGE", "EventBrowser", "EventPage", "EventRow", "EventSource", "payload_text"]

PAGE = 20
#: how the stream list names a hard-deleted stream (cut off again when it is opened)
DELETED_MARK = "  (deleted)"
_MAX_SHOWN = 2000


def payload_text(value: Any) -> str:
    """Event data or metadata from an atom entry (JSON already parsed by the node, or text)."""
    if value is None or value == "":
        return ""
    if isinstance(value, str):
        return value if len(value) <= _MAX_SHOWN else value[:_MAX_SHOWN] + f" … ({len(value)} characters)"
    text = json.dumps(value, indent=2, ensure_ascii=False)
    return text if len(text) <= _MAX_SHOWN else text[:_MAX_SHOWN] + " …"


@dataclass(frozen=True)
class EventRow:
    number: int
    event_type: str
    position: int | None  # evdb gives each event's log position; KurrentDB's feed does not
    timestamp: str
    is_redacted: bool
    data: str  # "[redacted: N bytes]" for a redacted event, never its 0xFF bytes
    metadata: str

    @classmethod
    def from_entry(cls, entry: dict[str, Any]) -> EventRow:
        redacted = entry.get("isRedacted") is True
        if redacted:
            data = f"[redacted: {_redacted_size(entry.get('data'))}]"
        else:
            data = payload_text(entry.get("data"))
        position = entry.get("position")
        return cls(
            number=int(entry.get("eventNumber", -1)),
            event_type=str(entry.get("eventType", "")),
            position=position if isinstance(position, int) else None,
            timestamp=str(entry.get("updated", "")),
            is_redacted=redacted,
            data=data,
            metadata=payload_text(entry.get("metaData")),
        )


def _redacted_size(data: Any) -> str:
    """The node sends a redacted event's 0xFF bytes as base64 (they are not text): their count."""
    if isinstance(data, str):
        try:
            return f"{len(base64.b64decode(data, validate=True))} bytes"
        except ValueError:
            pass
    return "data hidden"


@dataclass(frozen=True)
class EventPage:
    stream: str
    events: list[EventRow] = field(default_factory=list)
    start: int | None = None  # the event number the page was read back from (None: the newest)
    newer_from: int | None = None
    older_from: int | None = None
    error: str | None = None  # the node's answer when it refused or failed, as it sent it


class EventSource:
    """Stream reads of one node, over any httpx client (a MockTransport in tests, a real node too)."""

    def __init__(self, client: NodeClient, node_url: str, *, timeout: float = 10.0) -> None:
        self.client = client
        self.node_url = node_url.rstrip("/")
        self.timeout = timeout

    async def _get(
        self, stream: str, start: int | None, count: int, *, embed: bool
    ) -> tuple[httpx.Response | None, str | None]:
        """A page read backward from ``start`` (None: the head); or the node's answer when it is none."""
        where = "head" if start is None else str(start)
        path = f"/streams/{quote(stream, safe='')}/{where}/backward/{count}" + (
            "?embed=body" if embed else ""
        )
        try:
            response = await self.client.read_stream(
                self.node_url, stream, where, "backward", count, embed=embed, timeout=self.timeout
            )
        except httpx.HTTPError as exc:
            return None, f"GET {path} → no answer: {exc or type(exc).__name__}"
        if response.status_code != 200:
            body = response.text.strip()
            return None, f"GET {path} → {response.status_code} {response.reason_phrase}" + (
                f": {body}" if body else ""
            )
        return response, None

    async def streams(self, scan: int = 4096) -> tuple[list[str], str | None]:
        """Streams by their newest event, from the newest ``scan`` events of ``$all`` (the most one
        read of it gives), the streams that can be read first: a hard-deleted stream (its newest event
        the ``$streamDeleted`` tombstone) after them, named so (``DELETED_MARK``)."""
        response, error = await self._get("$all", None, scan, embed=False)
        if response is None:
            return [], error
        names: list[str] = []
        deleted: set[str] = set()
        for entry in response.json().get("entries", []):
            name = entry.get("streamId") or str(entry.get("title", "")).partition("@")[2]
            if name and name not in names:
                names.append(name)
                if entry.get("eventType") == "$streamDeleted":
                    deleted.add(name)
        live = [n for n in names if n not in deleted]
        return live + [n + DELETED_MARK for n in names if n in deleted], None

    async def page(self, stream: str, start: int | None = None, count: int = PAGE) -> EventPage:
        response, error = await self._get(stream, start, count, embed=True)
        if response is None:
            return EventPage(stream, start=start, error=error)
        body = response.json()
        events = [EventRow.from_entry(e) for e in body.get("entries", [])]
        older = events[-1].number - 1 if events and events[-1].number > 0 else None
        newer = None
        if events and not body.get("headOfStream", False):
            newer = events[0].number + count
        return EventPage(stream, events, start, newer, older)


class EventNumberInput(Input):
    """The event number field: digits only; ``[`` and ``]`` are left to the browser's paging keys."""

    def check_consume_key(self, key: str, character: str | None) -> bool:
        return character not in ("[", "]") and super().check_consume_key(key, character)

    async def _on_key(self, event) -> None:
        if event.character in ("[", "]"):
            event.prevent_default()  # not typed here (Input's handler does not run): the screen pages


def is_system_stream(name: str) -> bool:
    """``$``-prefixed: the node's own streams (``$scavenges-…``, ``$$`` metadata streams, …)."""
    return name.startswith("$")


class EventBrowser(Screen[None]):
    """Pick a stream (typed, or from the list read from ``$all``; system streams only when asked),
    then page through its events, or jump to an event number."""

    DEFAULT_CSS = """
    EventBrowser #title { text-style: bold; padding: 0 1; }
    EventBrowser #pick { width: 40%; max-width: 60; min-width: 24; padding: 0 1; }
    EventBrowser #stream-list { height: 1fr; text-wrap: nowrap; text-overflow: ellipsis; }
    EventBrowser #event-number { margin-bottom: 0; }
    EventBrowser #events-side { width: 1fr; }
    EventBrowser #events { height: 1fr; }
    EventBrowser #detail { height: auto; max-height: 12; border: round $accent; padding: 0 1; }
    EventBrowser #status { padding: 0 1; height: auto; }
    EventBrowser #status.error { color: $error; }
    """
    BINDINGS = [
        Binding("right_square_bracket", "older", "Older page", key_display="]"),
        Binding("left_square_bracket", "newer", "Newer page", key_display="["),
        Binding("home", "newest", "Newest"),
        Binding("f5", "reload_streams", "Reload streams"),
        Binding("escape", "back", "Back"),
    ]

    def __init__(self, source: EventSource, node_label: str) -> None:
        super().__init__()
        self.source = source
        self.node_label = node_label
        self.page: EventPage | None = None
        self.stream_names: list[str] = []  # every stream read from $all, system ones too

    def compose(self) -> ComposeResult:
        yield Label(f"Events on {self.node_label}", id="title")
        with Horizontal():
            with Vertical(id="pick"):
                yield Input(placeholder="stream name, Enter opens", id="stream-name")
                yield EventNumberInput(
                    placeholder="event number, Enter jumps to it", id="event-number", restrict=r"[0-9]*"
                )
                yield TickBox("system streams ($…)", False, id="show-system")
                yield OptionList(id="stream-list", markup=False)
            with Vertical(id="events-side"):
                yield Static("Pick a stream.", id="status")
                yield DataTable(id="events", cursor_type="row", zebra_stripes=True)
                yield Static(id="detail")
        yield KeyBar(last=("back",))

    async def on_mount(self) -> None:
        table = self.query_one("#events", DataTable)
        table.add_columns("#", "Type", "Timestamp", "Position", "Data")
        self.query_one("#stream-name", Input).focus()
        await self.load_streams()

    # -- loading ---------------------------------------------------------------------------------------
    async def load_streams(self) -> None:
        names, error = await self.source.streams()
        self.stream_names = names
        self._show_streams()
        if error:
            self._status(f"Stream list: {error}", error=True)

    def _show_streams(self) -> None:
        system = self.query_one("#show-system", TickBox).value
        options = self.query_one("#stream-list", OptionList)
        options.clear_options()
        options.add_options([n for n in self.stream_names if system or not is_system_stream(n)])

    def on_checkbox_changed(self, event: TickBox.Changed) -> None:
        if event.checkbox.id == "show-system":
            self._show_streams()

    async def open_stream(self, stream: str, start: int | None = None) -> None:
        page = await self.source.page(stream, start)
        self.page = page
        table = self.query_one("#events", DataTable)
        table.clear()
        self.query_one("#detail", Static).update("")
        if page.error:
            self._status(page.error, error=True)
        else:
            first = f"{page.events[0].number}–{page.events[-1].number}" if page.events else "no events"
            self._status(f"{stream}: events {first}, newest first ([ newer, ] older)")
            for event in page.events:
                table.add_row(*self._cells(event), key=str(event.number))
            if page.events:
                self._show_detail(page.events[0])
            # the next thing typed is an event number (Tab, or typing, never replaces the stream's
            # name); [ and ] still page from there
            self.query_one("#event-number", Input).focus()
        self.refresh_bindings()

    @staticmethod
    def _cells(event: EventRow) -> tuple[Any, ...]:
        type_cell = Text(event.event_type)
        if event.is_redacted:
            type_cell.append(" ")
            type_cell.append(" redacted ", style="bold white on magenta")
        data = event.data.replace("\n", " ")
        data_cell = Text(data[:80], style="italic magenta" if event.is_redacted else "")
        position = "" if event.position is None else f"{event.position:,}"
        # whole seconds, before the position: in a narrow terminal the time is never cut (the detail
        # below has the full timestamp)
        when = event.timestamp[:19].replace("T", " ")
        return str(event.number), type_cell, when, position, data_cell

    def _show_detail(self, event: EventRow) -> None:
        text = Text()
        text.append(f"#{event.number} {event.event_type}", style="bold")
        if event.is_redacted:
            text.append("  redacted", style="bold magenta")
        text.append(
            f"\nposition {f'{event.position:,}' if event.position is not None else '?'} · {event.timestamp}\n"
        )
        text.append("data: ", style="bold")
        text.append(event.data or "(empty)", style="italic magenta" if event.is_redacted else "")
        text.append("\nmetadata: ", style="bold")
        text.append(event.metadata or "(none)")
        self.query_one("#detail", Static).update(text)

    def _status(self, message: str, *, error: bool = False) -> None:
        status = self.query_one("#status", Static)
        status.update(message)
        status.set_class(error, "error")

    # -- events ----------------------------------------------------------------------------------------
    async def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "event-number":
            await self.jump(event.value)
            return
        name = event.value.strip()
        if name:
            await self.open_stream(name)

    async def jump(self, text: str) -> None:
        """Open the stream at an event number: that event first, the older ones under it."""
        stream = self.page.stream if self.page else self.query_one("#stream-name", Input).value.strip()
        if not stream:
            self._status("Jump: open a stream first (type its name, or pick it from the list).", error=True)
            return
        try:
            number = int(text.strip())
        except ValueError:
            number = -1
        if number < 0:
            self._status(f"Jump: an event number is 0 or more (got {text.strip()!r}).", error=True)
            return
        await self.open_stream(stream, number)

    async def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        name = str(event.option.prompt).removesuffix(DELETED_MARK)
        self.query_one("#stream-name", Input).value = name
        await self.open_stream(name)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if self.page is None or event.row_key.value is None:
            return
        number = int(event.row_key.value)
        for row in self.page.events:
            if row.number == number:
                self._show_detail(row)
                return

    # -- keys ------------------------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        page = self.page
        if action == "older":
            return bool(page and page.older_from is not None)
        if action == "newer":
            return bool(page and page.newer_from is not None)
        if action == "newest":
            return bool(page and page.start is not None)
        return True

    async def action_older(self) -> None:
        if self.page and self.page.older_from is not None:
            await self.open_stream(self.page.stream, self.page.older_from)

    async def action_newer(self) -> None:
        if self.page and self.page.newer_from is not None:
            await self.open_stream(self.page.stream, self.page.newer_from)

    async def action_newest(self) -> None:
        if self.page:
            await self.open_stream(self.page.stream)

    async def action_reload_streams(self) -> None:
        await self.load_streams()

    def action_back(self) -> None:
        self.app.pop_screen()
