"""The dashboard's changing calls: confirmed first (the dialog shows the exact request), then sent
through the node port, each one logged in the activity and told in a notice (a reload by its outcome,
never the bare 200), and the polls of the node woken so that its next figures show what changed."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import httpx
from textual.notifications import SeverityLevel

from tui.answers import json_or_text
from tui.calls import PlannedCall, answer_text
from tui.certificates import reload_outcome
from tui.dialogs import Confirmable, ConfirmCall
from tui.host import Host
from tui.state import Activity, NodeState

__all__ = ["CallSender"]


class CallSender:
    """Confirms and sends the calls of the dashboard's keys."""

    def __init__(self, host: Host) -> None:
        self.host = host

    def labelled(self, calls: list[PlannedCall]) -> list[PlannedCall]:
        return [
            replace(call, node_label=self.host.state.nodes[call.node_url].label)
            if call.node_url in self.host.state.nodes and not call.node_label
            else call
            for call in calls
        ]

    def confirm(self, calls: list[PlannedCall], note: str = "") -> None:
        calls = self.labelled(calls)
        self.confirm_items(
            calls,
            note=note,
            on_send=lambda: self.host.spawn(self.send_all(calls), "calls"),
        )

    def confirm_items(
        self,
        items: Sequence[Confirmable],
        *,
        on_send: Callable[[], Any],
        note: str = "",
        title: str | None = None,
    ) -> None:
        """The confirmation (focus on Cancel); ``on_send`` runs when the operator sends."""

        def done(send: bool | None) -> None:
            if send:
                on_send()

        self.host.ask(ConfirmCall(items, self.host.connection.user, note, title), done)

    async def send_all(self, calls: list[PlannedCall]) -> None:
        for call in calls:
            ok = await self.send(call)
            if not ok:
                break

    async def send(self, call: PlannedCall) -> bool:
        response = await self.request(call)
        if response is None or response.status_code >= 300:
            return False
        if call.path == "/admin/reloadconfig":  # 200 whatever the outcome, as KurrentDB answers
            return await self._reload_succeeded(call)
        return True

    async def _reload_succeeded(self, call: PlannedCall) -> bool:
        """A reload answered 200 may still have failed: the node's lastReload says (tui/certificates.py).
        Its notice tells that outcome, never the bare 200."""
        assert self.host.client is not None
        outcome, reason = await reload_outcome(self.host.client, call.node_url)
        node = self.host.state.nodes.get(call.node_url)
        label = node.label if node else call.node_url
        if outcome != "Failed":
            said = (
                "→ reloaded (its lastReload: Success)"
                if outcome == "Success"
                else f"→ sent; outcome not known here: {reason}"
            )
            self.host.tell_call(label, call.request_line(), said, timeout=8)
            return True
        self.host.state.add_activity(
            Activity(
                self.host.clock.time(),
                label,
                call.request_line(),
                200,
                f"reload failed: {reason}",
                outcome="failed",
            )
        )
        self.host.tell_call(
            label,
            call.request_line(),
            "→ the reload failed; the node keeps its configuration",
            reason[:300],
            severity="error",
            timeout=8,
        )
        self.host.render_panels()
        return False

    async def request(self, call: PlannedCall) -> httpx.Response | None:
        """Make a call: logged in the activity, told in a notice; the answer (None: no answer)."""
        assert self.host.client is not None
        node = self.host.state.nodes.get(call.node_url)
        label = node.label if node else call.node_url
        try:
            response = await self.host.client.send(call)
        except httpx.HTTPError as exc:
            self.host.state.add_activity(
                Activity(
                    self.host.clock.time(), label, call.request_line(), None, str(exc) or type(exc).__name__
                )
            )
            self.host.tell_call(label, call.request_line(), f"no answer: {exc}", severity="error", timeout=8)
            self.host.render_panels()
            return None
        body = response.text.strip()
        self.host.state.add_activity(
            Activity(self.host.clock.time(), label, call.request_line(), response.status_code, body)
        )
        severity: SeverityLevel = "information" if response.status_code < 300 else "error"
        if call.path == "/auto-scavenge/cycle-now":
            self.host.state.cycle_now = (
                self.host.clock.time(),
                label,
                response.status_code,
                answer_text(body),
            )
        # a reload answers 200 whatever its outcome (as KurrentDB's): send() tells the outcome instead
        if not (call.path == "/admin/reloadconfig" and response.status_code < 300):
            self.host.tell_call(
                label,
                call.request_line(),
                f"→ {response.status_code} {response.reason_phrase}",
                answer_text(body)[:300],
                severity=severity,
                timeout=8,
            )
        if response.status_code < 300 and node is not None:
            self._after_start(call, node, response)
        collector = self.host.collectors.get(call.node_url)
        if collector is not None:
            collector.full_poll_next = True
            collector.wake.set()
        self.host.render_panels()
        return response

    def _after_start(self, call: PlannedCall, node: NodeState, response: httpx.Response) -> None:
        """What the node's answer to a start says is shown at once (until a poll confirms it): the
        started scavenge; a started backup is watched so that its end is told."""
        if call.method != "POST":
            return
        answer = json_or_text(response)
        if call.path == "/admin/scavenge" and answer.get("scavengeId"):
            node.scavenge.starting_id = str(answer["scavengeId"])
            node.scavenge.starting_after_poll = node.polls
            node.version += 1
        elif call.path == "/admin/backup":
            self.host.backups.watch(node.url, str(answer["backupId"]) if answer.get("backupId") else None)
