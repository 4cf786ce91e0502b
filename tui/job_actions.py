"""The dashboard's jobs that are more than one call: a local node's stop, start and restore, the demo
load (each run in a worker thread, shown as its equivalent command line), and the followers-first
cluster scavenge (tui/routine.py). Each is confirmed first; its progress goes to the activity log and
the node's "doing" column, its end to a notice."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime

from tui.actions import NodeActions
from tui.calls import BackupForm, FormError, PlannedCall, ScavengeForm, stop_scavenge
from tui.dialogs import RestoreDialog
from tui.host import Host
from tui.jobs import (
    DEMO_EVENTS,
    LocalNode,
    PlannedJob,
    RestoreForm,
    demo_job,
    node_job,
    restore_job,
    restore_summary,
    run_demo_load,
)
from tui.panels import endpoint_labels
from tui.routine import FollowersFirst, RoutineItem, plan_followers_first
from tui.sending import CallSender
from tui.state import Activity, NodeState

__all__ = ["JobActions", "JobReport"]


class JobReport:
    """What a job running in a worker thread tells the dashboard: lines for its activity entry, its
    progress (the entry and the node's "doing" column), and what to do on the event loop once it is done."""

    def __init__(self, host: Host, node: NodeState, index: int, loop: asyncio.AbstractEventLoop) -> None:
        self.host = host
        self.node = node
        self.index = index
        self.loop = loop
        self.lines: list[str] = []
        self.on_finish: list[Callable[[], None]] = []

    def log(self, text: str) -> None:
        self.loop.call_soon_threadsafe(self._add, text)

    def progress(self, text: str, doing: str) -> None:
        self.loop.call_soon_threadsafe(self._progress, text, doing)

    def finish(self, callback: Callable[[], None]) -> None:
        self.on_finish.append(callback)

    def _add(self, text: str) -> None:
        self.lines.append(text)
        self.host.state.update_activity(self.index, body="; ".join(self.lines))
        self.host.render_panels()

    def _progress(self, text: str, doing: str) -> None:
        self.host.state.update_activity(self.index, body="; ".join([*self.lines, text]))
        if self.node.job:
            self.node.job = doing
            self.node.version += 1
        self.host.render_panels()


class JobActions:
    """The actions of the keys o, u, B, d and F, and the jobs they run."""

    def __init__(self, host: Host, sender: CallSender, actions: NodeActions) -> None:
        self.host = host
        self.sender = sender
        self.actions = actions
        #: per node: the restore dialog starts from the last folder
        self._last_restore: dict[str, str] = {}
        #: the followers-first routine, running or the last one
        self.routine: FollowersFirst | None = None

    def _local_target(self) -> tuple[NodeState, LocalNode]:
        node = self.host.state.node()
        assert node is not None and self.host.local is not None
        local = self.host.local.node(node.url)
        assert local is not None
        return node, local

    def stop_node(self) -> None:
        node, local = self._local_target()
        assert self.host.local is not None
        job = node_job("stop", self.host.local, local, node.label)
        note = (
            f"{local.name} is asked to shut down (POST /admin/shutdown; SIGTERM if it does not answer) and "
            "killed if it has not stopped after 15 s; the other nodes keep running."
        )
        if node.role == "Leader":
            note += " It leads: the others elect a new leader."
        cluster = self.host.local.cluster

        def work(report: JobReport) -> str:
            stopped = cluster.stop_node(local.name, timeout=15.0, log=report.log)
            return f"{local.name} stopped" if stopped else f"{local.name} was not running"

        self.sender.confirm_items(
            [job], note=note, on_send=lambda: self._start_job(node, "stopping", job, work)
        )

    def start_node(self) -> None:
        node, local = self._local_target()
        assert self.host.local is not None
        job = node_job("start", self.host.local, local, node.label)
        cluster = self.host.local.cluster

        def work(report: JobReport) -> str:
            pid = cluster.start_node(local.name)
            report.log(f"Started {local.name} (pid {pid}); waiting until it joins the cluster")
            row = cluster.wait_for_node(local.name, timeout=60.0)
            return f"{local.name} is {row['state']}"

        self.sender.confirm_items(
            [job],
            note=f"{local.name} starts with its node.yaml (the cluster's node options) and catches up from the "
            "leader; the job ends once it is a follower, leader or read-only replica (at most 60 s).",
            on_send=lambda: self._start_job(node, "starting", job, work),
        )

    def restore_node(self) -> None:
        node, local = self._local_target()
        assert self.host.local is not None
        nodes = self.host.local
        folder = (
            self._last_restore.get(node.url)
            or (
                self.actions.last_backup[node.url].destination if node.url in self.actions.last_backup else ""
            )
            or self.actions.default_backup_folder(node.label)
        )

        def check(text: str, start: bool) -> str:
            return RestoreForm(text, start).check(nodes, local)

        def done(answer: tuple[str, bool] | None) -> None:
            if answer is None:
                return
            chosen, start = answer
            self._last_restore[node.url] = chosen
            job = restore_job(nodes, local, node.label, chosen, start)
            cluster = nodes.cluster

            def work(report: JobReport) -> str:
                result = cluster.restore_node(local.name, chosen, start=start, log=report.log)
                # its next backup is a full one into a new folder (the restore's reminder): the backup
                # dialog no longer offers a differential one into the old folder
                report.finish(lambda: self._restored(node))
                summary = restore_summary(result)
                if not start:
                    return f"{summary}; {local.name} stays stopped (u starts it)"
                report.log(f"waiting until {local.name} follows again")
                row = cluster.wait_for_node(local.name, timeout=60.0)
                return f"{summary}; {local.name} is {row['state']}"

            note = (
                f"{local.name}'s database files are replaced by those of {chosen} (evdb restore's procedure: "
                "the backup is verified first)."
            )
            if start:
                note += (
                    " Then it starts, cuts its log at the backup's position and catches up from the leader."
                )
            self.sender.confirm_items(
                [job], note=note, on_send=lambda: self._start_job(node, "restoring", job, work)
            )

        self.host.ask(RestoreDialog(node.label, folder, check), done)

    def _restored(self, node: NodeState) -> None:
        """After a restore the node's next backup is a full one into a new folder of its own (the
        restore's reminder): the dialog offers one, named after the node and the time."""
        folder = self.actions.default_backup_folder(node.label)
        when = datetime.fromtimestamp(self.host.clock.time(), UTC).strftime("%Y%m%d-%H%M%S")
        self.actions.last_backup[node.url] = BackupForm(f"{folder}-after-restore-{when}" if folder else "")

    def demo_load(self) -> None:
        node = self.host.state.node()
        assert node is not None
        local = self.host.local if self.host.local is not None and self.host.local.node(node.url) else None
        job = demo_job(
            node.url,
            node.label,
            events=DEMO_EVENTS,
            local=local,
            ca_file=self.host.connection.ca_file,
            user=self.host.connection.user,
        )
        connection = self.host.connection

        def work(report: JobReport) -> str:
            with connection.sync_client(node.url) as client:
                demo = run_demo_load(
                    client,
                    DEMO_EVENTS,
                    lambda done, total: report.progress(
                        f"wrote {done:,} of {total:,} events", f"writing demo data {100 * done // total}%"
                    ),
                )
            lines = demo.summary()
            report.finish(lambda: self._demo_written(node, lines))
            return " ".join(line.strip() for line in lines)

        note = (
            f"Writes {DEMO_EVENTS:,} events over ten new streams demo-<run>-* through {node.label} (a follower "
            "forwards them to the leader), then sets $maxCount 10 on three, soft-deletes two and hard-deletes "
            "two: a scavenge then has something to reclaim on every node."
        )
        self.sender.confirm_items(
            [job], note=note, on_send=lambda: self._start_job(node, "writing demo data", job, work)
        )

    def _demo_written(self, node: NodeState, lines: list[str]) -> None:
        self.host.state.demo = (node.label, lines)
        self.host.state.jobs_version += 1
        self.host.notify("\n".join(lines), title=f"Demo data through {node.label}", timeout=20)

    def _start_job(
        self, node: NodeState, doing: str, job: PlannedJob, work: Callable[[JobReport], str]
    ) -> None:
        """Run a confirmed job in a worker thread: its progress and result go to the activity log (and
        the node's "doing" column), its end to a notice."""
        index = self.host.state.add_activity(
            Activity(
                self.host.clock.time(), node.label, job.command_line(), None, f"{doing}…", outcome="running"
            )
        )
        node.job = doing
        node.version += 1
        self.host.render_panels()
        self.host.spawn(self._job_worker(node, job, index, work), "jobs")

    async def _job_worker(
        self, node: NodeState, job: PlannedJob, index: int, work: Callable[[JobReport], str]
    ) -> None:
        report = JobReport(self.host, node, index, asyncio.get_running_loop())
        try:
            result = await asyncio.to_thread(work, report)
        except Exception as exc:  # every failure of a job is told (the launcher's, the restore's, HTTP)
            reason = str(exc) or type(exc).__name__
            body = "; ".join([*report.lines, f"failed: {reason}"])
            self.host.state.update_activity(index, body=body, outcome="failed")
            self.host.notify(
                f"{job.command_line()}\nfailed: {reason}", title=node.label, severity="error", timeout=20
            )
        else:
            self.host.state.update_activity(index, body="; ".join([*report.lines, result]), outcome="done")
            self.host.notify(f"{job.title}: {result}", title=node.label, timeout=8)
            for callback in report.on_finish:
                callback()
        finally:
            node.job = ""
            node.version += 1
            self.host.refresh_local(force=True)
            local = self.host.local.node(node.url) if self.host.local is not None else None
            if local is not None:
                node.pid = local.pid
            for (
                collector
            ) in self.host.collectors.values():  # the node's new state, and its peers' views of it
                collector.full_poll_next = True
                collector.wake.set()
            self.host.render_panels()

    def followers_first(self) -> None:
        routine = self.routine
        if routine is not None and routine.state.running:
            self._confirm_stop_routine(routine)
            return
        form = self.actions.last_form or ScavengeForm()
        try:
            items = plan_followers_first(self.host.state.ordered(), form)
        except FormError as exc:
            self.host.notify(f"Followers-first scavenge: {exc}", severity="error", timeout=8)
            return
        threads, threshold, throttle, sync_only = form.validate()
        whence = (
            "your last start-scavenge dialog (s)"
            if self.actions.last_form
            else "the defaults (s sets others)"
        )
        note = (
            f"Scavenge parameters from {whence}: threads {threads}, threshold {threshold}, throttlePercent "
            f"{throttle}, syncOnly {str(sync_only).lower()}. One node at a time, each scavenge awaited; the "
            "first failure ends the routine; F again stops it. Every request is sent with "
            + (
                f"Authorization: Basic <{self.host.connection.user}:•••••> and "
                if self.host.connection.user
                else ""
            )
            + "Accept: application/json."
        )
        title = f"Followers-first cluster scavenge: {len(items)} steps, in this order"
        self.sender.confirm_items(items, note=note, title=title, on_send=lambda: self._start_routine(items))

    def _confirm_stop_routine(self, routine: FollowersFirst) -> None:
        calls: list[PlannedCall] = []
        if routine.current_scavenge is not None:
            url, scavenge_id = routine.current_scavenge
            calls.append(stop_scavenge(url, scavenge_id))
        note = "No further step starts."
        if calls:
            note += " The scavenge it waits for is stopped now (the next start on that node resumes it)."
        labelled = self.sender.labelled(calls)

        def stop() -> None:
            routine.stop()
            if labelled:
                self.host.spawn(self.sender.send_all(labelled), "calls")

        self.sender.confirm_items(
            labelled, note=note, title="Stop the followers-first cluster scavenge", on_send=stop
        )

    def _start_routine(self, items: list[RoutineItem]) -> None:
        assert self.host.client is not None
        routine = FollowersFirst(
            items,
            send=self.sender.request,
            client=self.host.client,
            clock=self.host.clock,
            interval=min(self.host.interval, 1.0),
            on_change=self._routine_changed,
            label_of=self._label_of,
            leader_wait=self.host.routine_leader_wait,
        )
        self.routine = routine
        self.host.state.routine = routine.state
        steps = " → ".join(item.title for item in items)
        index = self.host.state.add_activity(
            Activity(
                self.host.clock.time(),
                "cluster",
                "followers-first cluster scavenge",
                None,
                steps,
                outcome="running",
            )
        )
        self.host.spawn(self._run_routine(routine, index), "routine")

    async def _run_routine(self, routine: FollowersFirst, index: int) -> None:
        state = await routine.run()
        ok = state.outcome == "completed"
        outcome = "done" if ok else "stopped" if routine.stop_reason else "failed"
        self.host.state.update_activity(index, outcome=outcome, body=state.outcome)
        self.host.notify(
            f"Followers-first cluster scavenge {state.outcome}",
            severity="information" if ok else "warning" if routine.stop_reason else "error",
            timeout=10 if ok else 20,
        )
        self.host.render_panels()

    def _routine_changed(self) -> None:
        self.host.state.jobs_version += 1
        self.host.render_panels()

    def _label_of(self, endpoint: str) -> str:
        return endpoint_labels(self.host.state).get(endpoint, (endpoint, ""))[0]
