"""The keys that send one confirmed call (or a few) to the selected node: start and stop a scavenge, back
up, resign, reload (one node, or all of them the leader last), pause, resume or schedule auto-scavenge,
cycle now. Each builds its exact request (tui/calls.py), asks a dialog where it has fields, and hands
the request to the confirmation of tui/sending.py."""

from __future__ import annotations

import os

from tui.calls import (
    BackupForm,
    PlannedCall,
    ScavengeForm,
    configure_auto_scavenge,
    cycle_now,
    pause_auto_scavenge,
    reload_config,
    resign_leader,
    resume_auto_scavenge,
    stop_scavenge,
)
from tui.dialogs import BackupDialog, CronDialog, ScavengeDialog
from tui.host import Host
from tui.sending import CallSender

__all__ = ["NodeActions"]


class NodeActions:
    """The actions of the keys s, x, b, r, l, R, p, c and C; what their dialogs last held."""

    def __init__(self, host: Host, sender: CallSender) -> None:
        self.host = host
        self.sender = sender
        #: the last start-scavenge dialog's fields (the next dialog and followers-first start from them)
        self.last_form: ScavengeForm | None = None
        #: per node: the backup dialog starts from the last one
        self.last_backup: dict[str, BackupForm] = {}

    def start_scavenge(self) -> None:
        node = self.host.state.node()
        assert node is not None

        def done(call: PlannedCall | None) -> None:
            if call is not None:
                self.last_form = ScavengeForm(
                    dict(call.params)["threads"],
                    dict(call.params)["threshold"],
                    dict(call.params)["throttlePercent"],
                    dict(call.params)["syncOnly"] == "true",
                )
                self.sender.confirm([call])

        self.host.ask(ScavengeDialog(node.url, node.label, self.last_form), done)

    def start_backup(self) -> None:
        node = self.host.state.node()
        assert node is not None
        previous = self.last_backup.get(node.url) or BackupForm(self.default_backup_folder(node.label))

        running = node.scavenge.current_id or node.scavenge.starting_id or None

        def done(call: PlannedCall | None) -> None:
            if call is not None:
                body = call.json_body
                self.last_backup[node.url] = BackupForm(body["to"], True, body["stopScavenge"])
                note = "The node copies its files in the spec's order; progress shows in the Backup tab."
                if running and body["stopScavenge"]:
                    note = (
                        f"The node stops scavenge {running} first and starts it again after the backup "
                        "(it resumes where it stopped). " + note
                    )
                self.sender.confirm([call], note=note)

        self.host.ask(BackupDialog(node.url, node.label, previous, running), done)

    def default_backup_folder(self, label: str) -> str:
        """For a cluster this dashboard launched: a folder beside it; else the operator types one."""
        folder = self.host.local.data_dir if self.host.local is not None else self.host.cluster_dir
        if not folder:
            return ""
        safe = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in label)
        return os.path.join(os.path.abspath(folder), "backups", safe)

    def stop_scavenge(self) -> None:
        node = self.host.state.node()
        assert node is not None
        self.sender.confirm(
            [stop_scavenge(node.url, node.scavenge.current_id or node.scavenge.starting_id)],
            note="The node answers once the scavenge has stopped; the next start resumes it.",
        )

    def resign(self) -> None:
        node = self.host.state.node()
        assert node is not None
        self.sender.confirm(
            [resign_leader(node.url)], note="The leader steps down and the cluster elects a new one."
        )

    def reload(self) -> None:
        node = self.host.state.node()
        assert node is not None
        self.sender.confirm([reload_config(node.url)])

    def reload_all(self) -> None:
        # the leader last: during a rolling certificate update the majority that still trusts each
        # other keeps the leader as long as possible (docs/operations/certificates.md)
        nodes = sorted(
            (n for n in self.host.state.ordered() if n.reachable), key=lambda n: n.role == "Leader"
        )
        calls = [reload_config(n.url) for n in nodes]
        self.sender.confirm(
            calls, note="One node after the other, the leader last; stops at the first failure."
        )

    def pause_resume_auto(self) -> None:
        node = self.host.state.node()
        assert node is not None and node.auto_scavenge is not None
        paused = node.auto_scavenge.state in ("Paused",)
        self.sender.confirm([resume_auto_scavenge(node.url) if paused else pause_auto_scavenge(node.url)])

    def configure_auto(self) -> None:
        node = self.host.state.node()
        assert node is not None and node.auto_scavenge is not None

        def done(schedule: str | None) -> None:
            if schedule:
                self.sender.confirm([configure_auto_scavenge(node.url, schedule, self.host.clock.time())])

        auto = node.auto_scavenge
        self.host.ask(CronDialog(auto.schedule_as_given or auto.schedule, self.host.clock.time), done)

    def cycle_now(self) -> None:
        node = self.host.state.node()
        assert node is not None
        self.sender.confirm(
            [cycle_now(node.url)],
            note="An evdb extension: the leader starts a cluster scavenge now, as if the schedule fired "
            "(followers and replicas first, then the leader resigns and is scavenged last). Progress shows in "
            "the Auto-scavenge tab (3).",
        )
