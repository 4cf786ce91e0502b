"""The Archive tab: the archive, its checkpoint and the archiver's upload lag, the retention policy, and
per node its local chunk files against what it reads from the archive only and what the next scavenge
would free (each node's ``GET /stats``, ``es.archive``, read by evdb/archive/figures.py)."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from evdb.archive.figures import ArchiveFigures, retention_words, upload_lag_words
from tui.panels.common import WIDE, number, size, stale_note
from tui.state import DashboardState, NodeState

#: the per-node columns, least important last: in a narrow terminal they give way from the end
_COLUMNS = ("node", "on disk", "archive only", "next scavenge frees", "archived", "read cache")


def _figures(node: NodeState) -> ArchiveFigures | None:
    return node.archive.figures if node.archive is not None else None


def _chunks(n: int | None) -> str:
    return "–" if n is None else f"{number(n)} chunk{'' if n == 1 else 's'}"


def _files(n: int | None, nbytes: int | None) -> str:
    if n is None:
        return "–"
    return f"{number(n)} file{'' if n == 1 else 's'}, {size(nbytes)}"


def _row(node: NodeState, now: float) -> list[Text]:
    label = Text(node.label, style="bold")
    stale = node.errors.get("archive") or node.errors.get("gossip")
    if stale is not None and node.archive is not None:
        label.append(" ⚠", style="bold yellow")
    if node.archive is None:
        return [label, Text("reading…" if stale is None else "unknown", style="dim")]
    f = node.archive.figures
    if f is None:
        return [label, Text("archive off", style="dim")]
    cache = "–"
    if f.cache_hits is not None or f.cache_downloads is not None:
        cache = f"{number(f.cache_hits)} hits, {number(f.cache_downloads)} downloads"
    archived = (
        Text(size(f.archived_logical_bytes)) if f.archive_checkpoint is not None else Text("unknown", "red")
    )
    frees = _files(f.frees_chunk_files, f.frees_bytes) if f.archive_checkpoint is not None else "unknown"
    return [
        label,
        Text(_files(f.local_chunk_files, f.local_bytes)),
        Text(_chunks(f.archived_only_chunks)),
        Text(frees, style="green" if f.frees_chunk_files else ""),
        archived,
        Text(cache),
    ]


def _archiver_line(state: DashboardState, now: float) -> Text:
    found = [(n, f.archiver) for n in state.ordered() if (f := _figures(n)) is not None and f.archiver]
    if not found:
        return Text(
            "Archiver: no node reports one (the read-only replica with Archiver: true uploads the chunks)",
            style="yellow",
        )
    node, a = found[0]
    assert a is not None
    line = Text.assemble(("Archiver ", "bold"), (node.label, "bold"), ": ")
    line.append(upload_lag_words(a, now, size), style="green" if a.pending_chunks == 0 else "yellow")
    line.append(f" · {number(a.uploaded)} uploaded")
    if a.kept:
        line.append(f", {number(a.kept)} found uploaded")
    if a.failures:
        line.append(f"\nfailing ({a.failures} in a row, retrying): {a.last_error or ''}", style="bold red")
    if len(found) > 1:
        others = ", ".join(n.label for n, _ in found[1:])
        line.append(
            f"\nmore than one node reports an archiver ({others}): one archiver per cluster", "bold red"
        )
    return line


def render_archive(state: DashboardState, now: float, width: int | None = None) -> RenderableType:
    width = width or WIDE
    nodes = state.ordered()
    reported = [(n, f) for n in nodes if (f := _figures(n)) is not None]
    if not reported:
        if any(n.archive is not None for n in nodes):
            return Text(
                "Archive: no node reports one (Archive: Enabled is off, or the nodes are not evdb; "
                "docs/operations/archive.md).",
                style="dim",
            )
        return Text("Archive: reading the nodes' /stats…", style="dim")
    selected = state.node()
    first = next((f for n, f in reported if n is selected), reported[0][1])
    chunk_size = next((n.chunk_size for n in nodes if n.chunk_size), None)
    head = Text.assemble(("Archive ", "bold"), (first.location, "cyan"))
    policy = Text.assemble(("Retention ", "bold"), retention_words(first, size))
    checkpoints = {f.archive_checkpoint for _, f in reported if f.archive_checkpoint is not None}
    checkpoint = max(checkpoints) if checkpoints else None
    point = Text.assemble(("Archive checkpoint ", "bold"))
    if checkpoint is None:
        point.append("unknown: no node could read it", style="red")
    else:
        point.append(number(checkpoint))
        if chunk_size:
            point.append(f" ({_chunks(checkpoint // chunk_size)} archived)", style="dim")
    parts: list[RenderableType] = [head, policy, point, _archiver_line(state, now), Text("")]
    rows = [_row(n, now) for n in nodes]
    cells = [[r[i].cell_len if i < len(r) else 0 for r in rows] for i in range(len(_COLUMNS))]
    widths = [max(len(title), *column) for title, column in zip(_COLUMNS, cells, strict=True)]
    shown = len(_COLUMNS)
    while shown > 3 and sum(widths[:shown]) + 2 * (shown - 1) > width:
        shown -= 1  # the least important column gives way
    table = Table(box=None, header_style="bold", pad_edge=False, padding=(0, 2, 0, 0))
    for title, w in zip(_COLUMNS[:shown], widths[:shown], strict=True):
        table.add_column(title, no_wrap=True, min_width=min(w, len(title)) if title != "node" else w)
    for row in rows:
        table.add_row(*row[:shown])
    parts.append(table)
    if shown < len(_COLUMNS):
        hidden = _COLUMNS[shown:]
        plural = "s" if len(hidden) > 1 else ""
        parts.append(Text(f"+{len(hidden)} column{plural}: widen ({', '.join(hidden)})", "dim"))
    notes: list[RenderableType] = []
    for node in nodes:
        for source in ("gossip", "archive"):
            stale = stale_note(node, source, now)
            if stale is not None and node.archive is not None:
                notes.append(
                    Text.assemble(
                        (f"{node.label}: ⚠ ", "bold yellow"), stale, ("  (last figures shown)", "dim")
                    )
                )
        f = _figures(node)
        if f is not None and f.archive_error:
            notes.append(
                Text.assemble((f"{node.label}: ", "bold"), (f"archive unreachable: {f.archive_error}", "red"))
            )
    if notes:
        parts.extend([Text(""), *notes])
    return Group(*parts)
