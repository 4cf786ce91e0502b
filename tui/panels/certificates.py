"""The Certificates tab: each node's certificate, the CA, peer failures, reloads."""

from __future__ import annotations

from datetime import UTC, datetime

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from tui.panels.common import NOT_AVAILABLE, WIDE, ago, stale_note
from tui.panels.logs import log_text
from tui.state import (
    DashboardState,
    LogLine,
)


def render_certificates(
    state: DashboardState, now: float, log_lines: list[LogLine] | None = None, width: int | None = None
) -> RenderableType:
    """Each node's certificate (from its TLS handshake); then what goes wrong now (calls between nodes
    refused, certificate errors in the logs), so errors are seen first; then the CA and the last reload."""
    width = width or WIDE
    rows: list[tuple[Text, Text, Text, Text, Text]] = []
    for node in state.ordered():
        c = node.certificate
        if c is None:
            plain = node.url.startswith("http://")
            note = Text("plain HTTP: no certificate" if plain else "reading…", style="dim")
            rows.append((Text(node.label), note, Text(""), Text(""), Text("")))
            continue
        expires = Text("–")
        if c.not_after is not None:
            left = c.not_after - now
            style = "bold red" if left < 7 * 86400 else "yellow" if left < 30 * 86400 else "green"
            when = datetime.fromtimestamp(c.not_after, UTC).strftime("%Y-%m-%d %H:%M")
            expires = Text(f"{when} ({'expired' if left < 0 else 'in ' + ago(left)})", style=style)
        chain = Text("valid", style="green") if c.verified else Text(f"INVALID: {c.error}", style="bold red")
        rows.append((Text(node.label), Text(c.subject), Text(c.issuer), expires, chain))

    def natural(i: int, title: str) -> int:
        return max([len(title), *(r[i].cell_len for r in rows)])

    node_w, subject_w, issuer_w, expires_w = (
        natural(0, "node"), natural(1, "subject"), natural(2, "issuer"), natural(3, "expires"),
    )  # fmt: skip
    table: Table
    if node_w + subject_w + expires_w + len("valid") + 4 * 2 <= width:
        # one line a node: the issuer gives way first (the CA is shown below); the verdict wraps
        with_issuer = node_w + subject_w + issuer_w + expires_w + 16 + 5 * 2 <= width
        table = Table(expand=True, box=None, header_style="bold", pad_edge=False)
        table.add_column("node", no_wrap=True, width=node_w)
        table.add_column("subject", no_wrap=True, width=subject_w)
        if with_issuer:
            table.add_column("issuer", no_wrap=True, width=issuer_w)
        table.add_column("expires", no_wrap=True, width=expires_w)
        table.add_column("chain", ratio=1, overflow="fold")
        for row in rows:
            table.add_row(*(row if with_issuer else (row[0], row[1], row[3], row[4])))
    else:  # narrow: each node on two lines, its subject whole
        table = Table.grid(padding=(0, 2))
        table.add_column(no_wrap=True, width=node_w)
        table.add_column(ratio=1, overflow="fold")
        table.add_row(Text("node", style="bold"), Text("subject / expires, chain, issuer", style="bold"))
        for label, subject, issuer, expires, chain in rows:
            second = Text.assemble(expires, "  ", chain)
            if issuer.plain:
                second.append(f"  issuer {issuer.plain}", style="dim")
            table.add_row(label, Text.assemble(subject, "\n", second) if expires.plain else subject)
    parts: list[RenderableType] = [table, Text(""), *_peer_failures(state, now)]
    if log_lines is not None:
        errors = [line for line in log_lines if line.is_certificate_error][-10:]
        parts.append(Text("Certificate errors (logs)", style="bold"))
        parts.extend([log_text(line) for line in errors] or [Text("none seen", style="dim")])
        parts.append(Text(""))
    fingerprints = {
        n.certificates.ca_fingerprint
        for n in state.ordered()
        if n.certificates is not None and n.certificates.ca_fingerprint
    }
    if len(fingerprints) > 1:
        parts.append(
            Text(
                f"The nodes chain to {len(fingerprints)} different CAs: a rolling certificate update is "
                "under way, or a node was missed.",
                style="bold yellow",
            )
        )
    parts.append(_reload_table(state, now))
    for node in state.ordered():
        stale = stale_note(node, "certificates", now)
        if stale is not None:
            parts.append(Text.assemble((f"{node.label}: ", "bold"), stale))
    if log_lines is not None:
        reloads = [line for line in log_lines if "reload" in line.message.lower()][-5:]
        parts.append(Text("\nLast configuration reloads (logs)", style="bold"))
        parts.extend([log_text(line) for line in reloads] or [Text("none seen", style="dim")])
    return Group(*parts)


def _peer_failures(state: DashboardState, now: float) -> list[RenderableType]:
    """What each node reports of its calls to other nodes failing now (``peerErrors``): the peer and
    the reason, certificate refusals in red. Nothing when every call succeeds."""
    lines: list[RenderableType] = []
    for node in state.ordered():
        info = node.certificates
        if info is None or not info.peer_failures:
            continue
        for failure in info.peer_failures:
            line = Text()
            line.append(node.label, style="bold")
            line.append(f" → {failure.peer}: ")
            line.append(failure.reason, style="bold red" if failure.certificate else "yellow")
            if failure.since is not None:
                line.append(f"  (for {ago(now - failure.since)}, {failure.failures}×)", style="dim")
            lines.append(line)
    if not lines:
        return []
    return [Text("Calls to other nodes failing now (peerErrors)", style="bold"), *lines, Text("")]


def _reload_table(state: DashboardState, now: float) -> Table:
    """evdb's ``/admin/certificates``: the CA each node chains to and its last configuration reload,
    two lines per node (the result and its error wrap at any terminal width instead of being cut)."""
    table = Table.grid(padding=(0, 2))
    table.title = "CA in use and last reload (/admin/certificates)"
    table.title_justify = "left"
    table.title_style = "bold"
    table.add_column(no_wrap=True, min_width=_label_width(state))
    table.add_column(ratio=1)
    for node in state.ordered():
        info = node.certificates
        if info is None:
            table.add_row(node.label, Text("reading…", style="dim"))
            continue
        if not info.available:
            table.add_row(node.label, Text(NOT_AVAILABLE, style="dim"))
            continue
        if info.error:
            table.add_row(node.label, Text(info.error, style="yellow"))
            continue
        details = Text()
        if info.secure:
            details.append("CA ")
            if info.ca_subject:
                details.append(info.ca_subject)
            else:
                details.append("no trusted root found for the certificate", style="yellow")
            if info.ca_fingerprint:
                details.append(f"  sha256 {_short_fingerprint(info.ca_fingerprint)}", style="dim")
        else:
            details.append("insecure node: no certificate", style="dim")
        details.append("\nlast reload ")
        if info.reload_at is None:
            loaded = (
                f" (certificate loaded {_when(info.loaded_at, now)})" if info.loaded_at is not None else ""
            )
            details.append("none since the start" + loaded, style="dim")
            table.add_row(node.label, details)
            continue
        trigger = info.reload_trigger  # "/admin/reloadconfig" or "SIGHUP"
        if trigger in ("http", "/admin/reloadconfig"):
            trigger = "POST /admin/reloadconfig"
        details.append(f"{_when(info.reload_at, now)} via {trigger or '?'}: ")
        if info.reload_result == "Success":
            details.append("Success", style="green")
            if info.certificate_changed:
                details.append(", new certificate", style="green")
        else:
            details.append(info.reload_result or "Unknown", style="bold red")
            if info.reload_error:
                details.append(f": {info.reload_error}", style="red")
        table.add_row(node.label, details)
    return table


def _label_width(state: DashboardState) -> int:
    return max((len(n.label) for n in state.ordered()), default=4)


def _when(epoch: float, now: float) -> str:
    stamp = datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%S")
    return f"{stamp} ({ago(now - epoch)} ago)"


def _short_fingerprint(hex_digest: str) -> str:
    """The first 8 bytes, as ``openssl x509 -fingerprint -sha256`` prints them."""
    pairs = [hex_digest[i : i + 2].upper() for i in range(0, min(len(hex_digest), 16), 2)]
    return ":".join(pairs) + ("…" if len(hex_digest) > 16 else "")
