"""Backups run by the node itself (an evdb extension): ``POST /admin/backup`` and
``GET /admin/backup/current``.

The node runs the same procedures as ``evdb backup`` (evdb.backup.procedures) on a thread, with
its own scavenge service as the scavenge guard, and keeps the latest progress report so the
dashboard and the web page can show it. One backup at a time per node. Admins only: the request
names a folder on the node's host that the node will write into.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from evdb.backup.errors import BackupError, ScavengeRunning
from evdb.backup.layout import backup_target
from evdb.backup.procedures import run_backup
from evdb.backup.progress import Progress
from evdb.backup.scavenge_guard import NodeScavengeGuard
from evdb.errors import InvalidInput
from evdb.http.common import get_principal, get_services, json_response, read_json, require_admin
from evdb.http.openapi import EXTRA_PATHS, TEXT_CONTENT, json_object

__all__ = ["BackupJob", "setup"]

BACKUP_JOB: web.AppKey[dict] = web.AppKey("backup-job", dict)


@dataclass
class BackupJob:
    backup_id: str
    destination: str
    kind: str
    started_at: float
    progress: Progress
    task: asyncio.Task | None = None
    result: dict[str, Any] = field(default_factory=dict)

    @property
    def running(self) -> bool:
        return self.task is not None and not self.task.done()

    def describe(self) -> dict[str, Any]:
        body = {
            "backupId": self.backup_id,
            "destination": self.destination,
            "startedAt": self.started_at,
            **self.progress.snapshot(),
            **self.result,
        }
        body["kind"] = self.kind
        return body


def _parse(body: Any) -> tuple[str, bool, bool]:
    if not isinstance(body, dict):
        raise InvalidInput('The body must be a JSON object: {"to": "/backup/folder", "differential": false}')
    unknown = set(body) - {"to", "differential", "stopScavenge"}
    if unknown:
        raise InvalidInput(f"Unknown field(s): {', '.join(sorted(unknown))}")
    dest = backup_target(body.get("to"))  # the one rule (evdb/backup/layout.py)
    flags = []
    for name in ("differential", "stopScavenge"):
        value = body.get(name, False)
        if not isinstance(value, bool):
            raise InvalidInput(f'"{name}" must be true or false')
        flags.append(value)
    return dest, flags[0], flags[1]


def _inside(path: str, folder: str) -> bool:
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


async def start(request: web.Request) -> web.Response:
    require_admin(request, legacy=False)
    services = get_services(request)
    o = services.options
    dest, differential, stop_scavenge = _parse(await read_json(request))
    index_dir = services.index_dir
    if o.mem_db or not o.db or not index_dir:
        raise InvalidInput("This node keeps its database in memory (MemDb): there are no files to back up")
    for folder in (o.db, index_dir):
        if _inside(dest, folder) or _inside(folder, dest):
            raise InvalidInput(f"The backup folder {dest} must be outside the node's folder {folder}")
    jobs = request.app[BACKUP_JOB]
    job: BackupJob | None = jobs.get("current")
    if job is not None and job.running:
        raise InvalidInput(f"A backup is already running on this node ({job.backup_id})")
    running = NodeScavengeGuard(services.database.scavenge).current()
    if running and not stop_scavenge:  # the spec forbids the overlap: refused now, not failed later
        raise ScavengeRunning(
            f"A scavenge ({running}) is running on this node and a file-copy backup must not overlap it. "
            'Send the request again with "stopScavenge": true (the backup stops the scavenge and starts it '
            "again afterwards, where it stopped), or wait until GET /admin/scavenge/current names no "
            "scavenge."
        )
    kind = "differential" if differential else "full"
    job = BackupJob(
        str(uuid.uuid4()),
        dest,
        kind,
        services.clock.time(),
        Progress(kind, services.logger, clock=services.clock),
    )
    jobs["current"] = job
    services.logger.info(
        "BACKUP %s into %s requested through /admin/backup by %s (backup %s)",
        kind,
        dest,
        get_principal(request).name,
        job.backup_id,
    )

    def run() -> None:
        try:
            result = run_backup(
                o.db,
                index_dir,
                dest,
                differential=differential,
                guard=NodeScavengeGuard(services.database.scavenge),
                stop_scavenge=stop_scavenge,
                progress=job.progress,
                node_url=services.addresses.http_url,
            )
        except BackupError as exc:
            job.result = {"error": str(exc), "exitCode": exc.exit_code}
        except OSError as exc:  # run_backup has logged it and marked the progress failed
            job.result = {"error": str(exc)}
        else:
            job.result = {"chaser": result.chaser, "seconds": round(result.seconds, 3)}

    job.task = asyncio.create_task(asyncio.to_thread(run), name=f"{services.name}-backup")
    return json_response(
        {"backupId": job.backup_id, "backupLink": "/admin/backup/current"},
        status=202,
    )


async def current(request: web.Request) -> web.Response:
    require_admin(request, legacy=False)
    job: BackupJob | None = request.app[BACKUP_JOB].get("current")
    if job is None:
        return web.Response(status=204)  # no backup has run on this node since it started
    return json_response(job.describe())


async def _wait_for_backups(app: web.Application) -> None:
    """At shutdown a running backup is left to finish its current file: it is never cut mid-write."""
    job: BackupJob | None = app[BACKUP_JOB].get("current")
    if job is not None and job.task is not None:
        await asyncio.gather(job.task, return_exceptions=True)


def setup(app: web.Application) -> None:
    app[BACKUP_JOB] = {}
    app.router.add_post("/admin/backup", start)
    app.router.add_get("/admin/backup/current", current)
    app.on_shutdown.append(_wait_for_backups)


EXTRA_PATHS.append(
    {
        "/admin/backup": {
            "post": {
                "summary": "Back this node's database up into a folder on its host (evdb extension)",
                "requestBody": {
                    "required": True,
                    "content": json_object(
                        {
                            "to": {"type": "string"},
                            "differential": {"type": "boolean"},
                            "stopScavenge": {"type": "boolean"},
                        },
                        ["to"],
                        additionalProperties=False,
                    ),
                },
                "responses": {
                    "202": {
                        "description": "Started",
                        "content": json_object(
                            {"backupId": {"type": "string"}, "backupLink": {"type": "string"}},
                            ["backupId", "backupLink"],
                        ),
                    },
                    "400": {
                        "description": "Invalid body, MemDb, or a backup already runs",
                        "content": TEXT_CONTENT,
                    },
                    "401": {"description": "Not authenticated"},
                    "403": {"description": "Not an admin"},
                    "409": {
                        "description": 'A scavenge runs on the node (send again with "stopScavenge": true)',
                        "content": TEXT_CONTENT,
                    },
                },
            }
        },
        "/admin/backup/current": {
            "get": {
                "summary": "Progress of the node's latest backup (evdb extension)",
                "responses": {
                    "200": {
                        "description": "The latest backup's progress",
                        "content": json_object(),
                    },
                    "401": {"description": "Not authenticated"},
                    "403": {"description": "Not an admin"},
                    "204": {"description": "No backup has run since the node started"},
                },
            }
        },
    }
)
