"""How the dashboard reaches its nodes: which nodes (:class:`NodeSpec`) and with what credentials and
trust (:class:`Connection`, which makes the httpx clients under the node port of tui/client.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx

from evdb.tls.trust import FollowedTrust

__all__ = ["Connection", "NodeSpec"]


@dataclass(frozen=True)
class NodeSpec:
    """A node to watch: its address, and for a launched node its name, pid and log folder."""

    url: str
    name: str = ""
    pid: int | None = None
    log_dir: str | None = None


@dataclass
class Connection:
    """How to talk to the nodes: credentials, trust, and (tests) the httpx transport."""

    user: str | None = None
    password: str | None = None
    ca_file: str | None = None
    insecure_skip_verify: bool = False
    transport: httpx.AsyncBaseTransport | None = None
    timeout: float = 2.0
    extra: dict[str, Any] = field(default_factory=dict)

    trust: FollowedTrust | None = field(default=None, init=False, repr=False)

    def client(self) -> httpx.AsyncClient:
        verify: Any = True
        if self.insecure_skip_verify:
            verify = False
        elif self.ca_file:
            self.trust = FollowedTrust(self.ca_file)
            verify = self.trust.context
        auth = (self.user, self.password or "") if self.user else None
        return httpx.AsyncClient(
            auth=auth, verify=verify, transport=self.transport, timeout=self.timeout, **self.extra
        )

    def sync_client(self, base_url: str, timeout: float = 60.0) -> httpx.Client:
        """A blocking client of one node with the same credentials and trust (for a worker thread)."""
        verify: Any = True
        if self.insecure_skip_verify:
            verify = False
        elif self.ca_file:
            verify = (self.trust or FollowedTrust(self.ca_file)).context
        auth = (self.user, self.password or "") if self.user else None
        transport = self.transport if isinstance(self.transport, httpx.BaseTransport) else None
        return httpx.Client(
            base_url=base_url, auth=auth, verify=verify, transport=transport, timeout=timeout, **self.extra
        )
