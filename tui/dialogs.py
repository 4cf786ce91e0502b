"""Modal dialogs: confirmation of a call (showing the exact request) or of a job (showing its command
line), the start-scavenge, backup and restore forms, the auto-scavenge schedule form, the log filter,
help and quit."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widget import Widget
from textual.widgets import Button, Input, Label, Static

from tui.calls import STOP_AND_RESUME, BackupForm, FormError, PlannedCall, ScavengeForm, next_cron_runs
from tui.widgets import TickBox

__all__ = [
    "BackupDialog",
    "ConfirmCall",
    "Confirmable",
    "CronDialog",
    "FilterDialog",
    "HelpScreen",
    "QuitDialog",
    "RestoreDialog",
    "ScavengeDialog",
]

ResultT = TypeVar("ResultT")
#: what a dialog that starts on Cancel says beside its buttons
CANCEL_FIRST = "Focus starts on Cancel (Enter alone changes nothing): Tab to the button, then Enter {what}."

_CSS = """
ModalScreen { align: center middle; }
ModalScreen > Vertical {
    width: 90; max-width: 100%; height: auto; max-height: 100%; border: thick $accent; background: $surface;
    padding: 0 1; overflow-y: auto;
}
ModalScreen .warning { color: $warning; height: auto; margin-bottom: 1; }
ModalScreen TickBox { margin-bottom: 1; }
ModalScreen #help-scroll { height: auto; max-height: 1fr; }
ModalScreen #help-notes { margin-top: 1; }
ModalScreen .title { text-style: bold; margin-bottom: 1; }
ModalScreen .request { background: $boost; padding: 0 1; margin-bottom: 1; }
ModalScreen .error { color: $error; height: auto; }
ModalScreen .hint { color: $text-muted; height: auto; }
ModalScreen Horizontal { height: auto; align-horizontal: right; margin-top: 1; }
ModalScreen Button { margin-left: 2; }
ModalScreen Input { margin-bottom: 1; }
"""


class Confirmable(Protocol):
    """What a confirmation shows: an HTTP call (tui.calls.PlannedCall), a job's command line
    (tui.jobs.PlannedJob) or a routine's step (tui.routine.RoutineItem)."""

    @property
    def node_url(self) -> str: ...
    @property
    def node_label(self) -> str: ...
    @property
    def title(self) -> str: ...
    def describe(self, user: str | None = None) -> str: ...


class ConfirmCall(ModalScreen[bool]):
    """Shows the exact HTTP request (or the command a job is the same as); focus starts on Cancel, so
    Enter alone sends nothing. ``title`` replaces the one made from the calls' own."""

    DEFAULT_CSS = _CSS
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(
        self, calls: Sequence[Confirmable], user: str | None, note: str = "", title: str | None = None
    ) -> None:
        super().__init__()
        self.calls = list(calls)
        self.user = user
        self.note = note
        self.title_text = title

    def compose(self) -> ComposeResult:
        title = self.calls[0].title if self.calls else "Send"
        names = [call.node_label or call.node_url for call in self.calls]
        if self.title_text is not None:
            title = self.title_text
        elif len(self.calls) > 1:
            title += f" on {len(self.calls)} nodes, in this order: {', '.join(names)}"
        elif self.calls and self.calls[0].node_label:
            title += f" on {names[0]}"
        with Vertical():
            yield Label(f"{title}?", classes="title")
            if self.note:
                yield Static(self.note)
            if len(self.calls) > 1:
                text = "\n\n".join(
                    f"{i}. {name}\n{call.describe(self.user)}"
                    for i, (name, call) in enumerate(zip(names, self.calls, strict=True), 1)
                )
            else:
                text = "\n\n".join(call.describe(self.user) for call in self.calls)
            yield Static(Text(text), classes="request", id="request")
            yield Static(CANCEL_FIRST.format(what="sends"), classes="hint", id="cancel-first")
            with Horizontal():
                yield Button("Cancel", id="cancel", variant="primary")
                yield Button("Send", id="send", variant="error")

    def on_mount(self) -> None:
        self.query_one("#cancel", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "send")

    def action_cancel(self) -> None:
        self.dismiss(False)


class _Form(ModalScreen[ResultT | None]):
    """A form that becomes a result: Enter or the primary button validates it (``result`` raises
    FormError naming the field: the error shows under the fields and that field takes focus), Cancel or
    Esc closes it without one."""

    DEFAULT_CSS = _CSS
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def result(self) -> ResultT:
        """The validated result of the fields as they are (each form defines it)."""
        raise NotImplementedError

    def buttons(self, review: str = "Review request") -> ComposeResult:
        yield Static("", classes="error", id="error")
        with Horizontal():
            yield Button("Cancel", id="cancel")
            yield Button(review, id="review", variant="primary")

    def show_error(self, exc: FormError) -> None:
        self.query_one("#error", Static).update(f"✖ {exc}")
        self.query_one(f"#{exc.field_name}", Widget).focus()

    def _submit(self) -> None:
        try:
            value = self.result()
        except FormError as exc:
            self.show_error(exc)
            return
        self.dismiss(value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self._submit()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "review":
            self._submit()
        else:
            self.dismiss(None)

    def action_cancel(self) -> None:
        self.dismiss(None)


class _CallForm(_Form[PlannedCall]):
    """A form that becomes a PlannedCall of the node's API."""

    def __init__(self, node_url: str, node_label: str) -> None:
        super().__init__()
        self.node_url = node_url
        self.node_label = node_label

    def current_form(self) -> BackupForm | ScavengeForm:
        raise NotImplementedError

    def result(self) -> PlannedCall:
        return self.planned_call()

    def planned_call(self) -> PlannedCall:
        return self.current_form().call(self.node_url)


class BackupDialog(_CallForm):
    """Where the node writes the backup, full or differential; checks the node's state first: with a
    scavenge running it says so and offers to stop it and resume it after the backup (``stopScavenge``)."""

    def __init__(
        self,
        node_url: str,
        node_label: str,
        previous: BackupForm | None = None,
        running_scavenge: str | None = None,
    ) -> None:
        super().__init__(node_url, node_label)
        self.form = previous or BackupForm()
        self.running_scavenge = running_scavenge

    def compose(self) -> ComposeResult:
        f = self.form
        with Vertical():
            yield Label(f"Back {self.node_label} up", classes="title")
            yield Label("backup folder (absolute path on the node's host; created if missing)")
            yield Input(f.destination, id="destination", placeholder=f"/var/backups/evdb/{self.node_label}")
            yield TickBox(
                "differential (copy only new or changed files into that backup)",
                f.differential,
                id="differential",
            )
            if self.running_scavenge:
                yield Static(
                    f"A scavenge ({self.running_scavenge}) is running on {self.node_label}: a file-copy "
                    "backup must not overlap it.",
                    classes="warning",
                    id="scavenge-warning",
                )
                yield TickBox(STOP_AND_RESUME, True, id="stop_scavenge")
            else:
                yield TickBox(
                    f"if a scavenge runs when the backup starts: {STOP_AND_RESUME}",
                    f.stop_scavenge,
                    id="stop_scavenge",
                )
            yield from self.buttons()

    def planned_call(self) -> PlannedCall:
        return self.current_form().call(self.node_url, self.running_scavenge)

    def on_mount(self) -> None:
        self.query_one("#destination", Input).focus()

    def current_form(self) -> BackupForm:
        return BackupForm(
            self.query_one("#destination", Input).value,
            self.query_one("#differential", TickBox).value,
            self.query_one("#stop_scavenge", TickBox).value,
        )


class ScavengeDialog(_CallForm):
    """threads, threshold, throttlePercent, syncOnly, validated as the spec says before anything is sent."""

    def __init__(self, node_url: str, node_label: str, previous: ScavengeForm | None = None) -> None:
        super().__init__(node_url, node_label)
        self.form = previous or ScavengeForm()

    def compose(self) -> ComposeResult:
        f = self.form
        with Vertical():
            yield Label(f"Start a scavenge on {self.node_label}", classes="title")
            yield Label("threads (1 or more; above 4 the node uses 4)")
            yield Input(f.threads, id="threads")
            yield Label("threshold (-1 every chunk, 0 chunks with something to remove, N minimum weight)")
            yield Input(f.threshold, id="threshold")
            yield Label("throttlePercent (1–100; must be 100 with more than one thread)")
            yield Input(f.throttle_percent, id="throttle_percent")
            yield TickBox(
                "syncOnly (only scavenge to an existing, unreached scavenge point)",
                f.sync_only,
                id="sync_only",
            )
            yield from self.buttons()

    def on_mount(self) -> None:
        self.query_one("#threads", Input).focus()

    def current_form(self) -> ScavengeForm:
        return ScavengeForm(
            threads=self.query_one("#threads", Input).value,
            threshold=self.query_one("#threshold", Input).value,
            throttle_percent=self.query_one("#throttle_percent", Input).value,
            sync_only=self.query_one("#sync_only", TickBox).value,
        )


class RestoreDialog(_Form[tuple[str, bool]]):
    """Restore a stopped node of the local cluster from a backup folder on this machine. ``check``
    (tui.jobs.RestoreForm.check) runs on Enter or "Review": the node must be stopped and the folder a
    finished backup; its error shows under the field, which keeps focus. Returns (folder, start)."""

    def __init__(self, node_label: str, folder: str, check: Callable[[str, bool], str]) -> None:
        super().__init__()
        self.node_label = node_label
        self.folder = folder
        self.check = check

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(f"Restore {self.node_label} from a backup", classes="title")
            yield Static(
                f"{self.node_label}'s database files are replaced by the backup's. The node must be stopped "
                "(key o); started again, it cuts its log at the backup's position and catches up from the "
                "leader.",
                classes="warning",
            )
            yield Label("backup folder (on this machine: the local cluster's)")
            yield Input(self.folder, id="backup_folder", placeholder=f"/var/backups/evdb/{self.node_label}")
            yield TickBox("start the node afterwards and wait until it follows again", True, id="start_node")
            yield from self.buttons("Review")

    def on_mount(self) -> None:
        self.query_one("#backup_folder", Input).focus()

    def result(self) -> tuple[str, bool]:
        start = self.query_one("#start_node", TickBox).value
        return self.check(self.query_one("#backup_folder", Input).value, start), start


class CronDialog(_Form[str]):
    """The auto-scavenge schedule: a five-field CRON expression, its next run times previewed."""

    def __init__(self, current: str | None, now: Callable[[], float]) -> None:
        super().__init__()
        self.current = current or ""
        self.now = now

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("Auto-scavenge schedule (CRON: minute hour day month weekday, UTC)", classes="title")
            yield Input(self.current, placeholder="0 6 * * 6", id="schedule")
            yield Static("", id="preview")
            with Horizontal():
                yield Button("Cancel", id="cancel")
                yield Button("Review request", id="review", variant="primary")

    def on_mount(self) -> None:
        self.query_one("#schedule", Input).focus()
        self._preview(self.current)

    def _preview(self, text: str) -> bool:
        preview = self.query_one("#preview", Static)
        if not text.strip():
            preview.update(Text("type a schedule", style="dim"))
            return False
        try:
            runs = next_cron_runs(text, self.now())
        except FormError as exc:
            preview.update(Text(f"✖ {exc}", style="bold red"))
            return False
        preview.update("next runs: " + ", ".join(r.strftime("%a %Y-%m-%d %H:%M") for r in runs))
        return True

    def on_input_changed(self, event: Input.Changed) -> None:
        self._preview(event.value)

    def result(self) -> str:
        value = self.query_one("#schedule", Input).value
        if not value.strip():
            raise FormError("schedule", "type a schedule")
        next_cron_runs(value, self.now())
        return value.strip()

    def show_error(self, exc: FormError) -> None:
        """The preview under the field already says what is wrong."""
        self._preview(self.query_one("#schedule", Input).value)


class FilterDialog(ModalScreen[str | None]):
    """The log filter: ``node:NAME level:Warning words``."""

    DEFAULT_CSS = _CSS
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, current: str, validate: Callable[[str], str | None]) -> None:
        super().__init__()
        self.current = current
        self.validate = validate

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("Filter logs: node:NAME level:Warning and words (empty clears)", classes="title")
            yield Input(self.current, id="filter")
            yield Static("", classes="error", id="error")

    def on_mount(self) -> None:
        self.query_one("#filter", Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        problem = self.validate(event.value)
        if problem:
            self.query_one("#error", Static).update(f"✖ {problem}")
            return
        self.dismiss(event.value.strip())

    def action_cancel(self) -> None:
        self.dismiss(None)


class HelpScreen(ModalScreen[None]):
    """Every key, generated from the app's bindings, with whether it can act now and why not; then
    ``notes`` (the local cluster and its node options)."""

    DEFAULT_CSS = _CSS
    BINDINGS = [Binding("escape,question_mark,q", "close", "Close")]

    def __init__(self, rows: list[tuple[str, str, str]], notes: Sequence[str] = ()) -> None:
        super().__init__()
        self.rows = rows
        self.notes = list(notes)

    def compose(self) -> ComposeResult:
        table = Table(box=None, header_style="bold", expand=True)
        table.add_column("key")
        table.add_column("action")
        table.add_column("now")
        for key, description, status in self.rows:
            table.add_row(
                Text(key, style="bold cyan"),
                description,
                Text(status, style="green" if status == "available" else "dim"),
            )
        with Vertical():
            yield Label("Keys", classes="title")
            with VerticalScroll(id="help-scroll"):
                yield Static(table, id="help-table")
                if self.notes:
                    yield Static(Text("\n".join(self.notes)), id="help-notes")
            yield Label("esc closes", classes="")

    def action_close(self) -> None:
        self.dismiss(None)


class QuitDialog(ModalScreen[str | None]):
    """Leaving a dashboard that launched the local cluster: stop it, or leave it running."""

    DEFAULT_CSS = _CSS
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, data_dir: str) -> None:
        super().__init__()
        self.data_dir = data_dir

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("Quit the dashboard", classes="title")
            yield Static(f"The local cluster in {self.data_dir} is running. Stop it?")
            yield Static(CANCEL_FIRST.format(what="chooses"), classes="hint", id="cancel-first")
            with Horizontal():
                yield Button("Cancel", id="cancel", variant="primary")
                yield Button("Leave it running", id="leave")
                yield Button("Stop the cluster", id="stop", variant="error")

    def on_mount(self) -> None:
        self.query_one("#cancel", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(None if event.button.id == "cancel" else event.button.id)

    def action_cancel(self) -> None:
        self.dismiss(None)
