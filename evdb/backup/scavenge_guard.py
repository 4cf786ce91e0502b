"""Whether a scavenge runs on the backup's source node, and stopping and restarting it.

A file-copy backup must not overlap a scavenge (spec rules 4 and Scavenge operating rules). The
backup asks before it starts and again when it ends: the running scavenge, the last scavenge's id
(a scavenge that started and finished while files were copied changes it) and, without a node to
ask, the scavenge's temporary chunk files in the database folder.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Protocol

from evdb.backup.errors import BackupError

if TYPE_CHECKING:
    import httpx

__all__ = ["FolderScavengeGuard", "HttpScavengeGuard", "NodeScavengeGuard", "ScavengeGuard"]


class ScavengeGuard(Protocol):
    def current(self) -> str | None:
        """Id of the running scavenge, or None."""

    def last(self) -> str | None:
        """Id of the most recent scavenge (running or finished), or None when unknown."""

    def settings(self, scavenge_id: str) -> dict[str, Any]:
        """Parameters of the running scavenge, to start it again with the same ones."""

    def stop(self, scavenge_id: str) -> None:
        """Stop the scavenge and return once it has stopped."""

    def start(self, settings: dict[str, Any]) -> str:
        """Start a scavenge (it resumes from its saved state); returns its id."""


class FolderScavengeGuard:
    """No node to ask: a scavenge that is executing leaves ``*.scavenge.tmp`` files in the folder."""

    can_stop = False

    def __init__(self, db_dir: str) -> None:
        self.db_dir = db_dir

    def current(self) -> str | None:
        try:
            names = os.listdir(self.db_dir)
        except FileNotFoundError:
            return None
        return (
            "unknown (temporary scavenge files are present)"
            if any(n.endswith(".scavenge.tmp") for n in names)
            else None
        )

    def last(self) -> str | None:
        return None

    def settings(self, scavenge_id: str) -> dict[str, Any]:
        return {}

    def stop(self, scavenge_id: str) -> None:
        raise BackupError("Stopping a scavenge needs --node URL (the node's HTTP address).")

    def start(self, settings: dict[str, Any]) -> str:
        raise BackupError("Starting a scavenge needs --node URL (the node's HTTP address).")


class HttpScavengeGuard:
    """The node's scavenge endpoints: GET current/last/progress, DELETE {id}, POST /admin/scavenge."""

    can_stop = True

    def __init__(
        self,
        url: str,
        *,
        auth: tuple[str, str] | None = None,
        ca: str | None = None,
        timeout: float = 60.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        import httpx  # here: a backup without --node does not pay for the HTTP client at start-up

        verify: Any = ca if ca else True
        self.url = url.rstrip("/")
        self._http_error = httpx.HTTPError
        self._client = httpx.Client(
            base_url=self.url,
            auth=auth,
            verify=verify,
            timeout=timeout,
            transport=transport,
            headers={"Accept": "application/json"},
        )

    def close(self) -> None:
        self._client.close()

    def _get(self, path: str) -> dict[str, Any]:
        try:
            response = self._client.get(path)
        except self._http_error as exc:
            raise BackupError(f"Cannot reach the node at {self.url}: {exc}") from None
        if response.status_code in (401, 403):
            raise BackupError(
                f"The node at {self.url} refused GET {path} ({response.status_code}): give --user and "
                "--password of an admin or ops user."
            )
        if response.status_code != 200:
            raise BackupError(f"GET {self.url}{path} answered {response.status_code}: {response.text}")
        return response.json()

    def current(self) -> str | None:
        return self._get("/admin/scavenge/current").get("scavengeId") or None

    def last(self) -> str | None:
        return self._get("/admin/scavenge/last").get("scavengeId") or None

    def settings(self, scavenge_id: str) -> dict[str, Any]:
        body = self._get("/admin/scavenge/progress")
        if not body.get("running"):
            return {}
        return {k: body[k] for k in ("threads", "threshold", "throttlePercent") if k in body}

    def stop(self, scavenge_id: str) -> None:
        try:
            response = self._client.delete(f"/admin/scavenge/{scavenge_id}")
        except self._http_error as exc:
            raise BackupError(f"Cannot reach the node at {self.url}: {exc}") from None
        if response.status_code == 404:
            return  # it finished meanwhile
        if response.status_code != 200:
            raise BackupError(
                f"Stopping scavenge {scavenge_id} failed ({response.status_code}): {response.text}"
            )

    def start(self, settings: dict[str, Any]) -> str:
        params = {k: str(v) for k, v in settings.items()}
        try:
            response = self._client.post("/admin/scavenge", params=params)
        except self._http_error as exc:
            raise BackupError(f"Cannot reach the node at {self.url}: {exc}") from None
        if response.status_code != 200:
            raise BackupError(f"Restarting the scavenge failed ({response.status_code}): {response.text}")
        return response.json()["scavengeId"]


class NodeScavengeGuard:
    """In the node's own process (the backup the node runs for ``POST /admin/backup``)."""

    can_stop = True

    def __init__(self, service) -> None:
        self.service = service

    def current(self) -> str | None:
        return self.service.current_id()

    def last(self) -> str | None:
        found = self.service.last()
        return found[0] if found else None

    def settings(self, scavenge_id: str) -> dict[str, Any]:
        figures = self.service.progress() or {}
        return {k: figures[k] for k in ("threads", "threshold", "throttlePercent") if k in figures}

    def stop(self, scavenge_id: str) -> None:
        from evdb.errors import ScavengeNotFound

        try:
            self.service.stop(scavenge_id)
        except ScavengeNotFound:
            pass

    def start(self, settings: dict[str, Any]) -> str:
        from evdb.scavenge.service import ScavengeRequest

        request = ScavengeRequest(
            int(settings.get("threads", 1)),
            int(settings.get("threshold", 0)),
            int(settings.get("throttlePercent", 100)),
            False,
        )
        return self.service.start(request)
