"""A free TCP port to give a process that binds it later (the local cluster's nodes; tests' nodes and
servers whose ports must be known before they start, as gossip seeds).

A port the kernel hands out for ``bind(("127.0.0.1", 0))`` comes from the ephemeral range
(``/proc/sys/net/ipv4/ip_local_port_range``, 32768-60999 by default), which is also where every
outgoing connection's source port comes from: between the pick and the real bind, any client on the
machine may take it ("Address already in use", seen in CI under load). So the port is picked at
random below that range, where no outgoing connection lands, and checked by binding it once.
"""

from __future__ import annotations

import random
import socket

__all__ = ["free_port"]

_LOWEST = 10_000  # above the registered services most machines run
_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
_random = random.SystemRandom()  # two processes picking at the same moment do not draw alike


def _ephemeral_start() -> int:
    try:
        with open(_RANGE_FILE) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nothing listens on now, below the ephemeral range when there is room
    (else one the kernel picks)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    top = _ephemeral_start()
    if top - _LOWEST >= 1000:
        for _ in range(200):
            port = _random.randrange(_LOWEST, top)
            with socket.socket(family, socket.SOCK_STREAM) as sock:
                try:
                    sock.bind((host, port))
                except OSError:
                    continue
                return port
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
