"""A client's trust that follows its CA file through a rolling certificate update.

During a rolling update (docs/operations/certificates.md) some nodes already present certificates of
the new CA while the others still present the old one. A client that read the CA file once trusts only
the old CA and loses every node it reloads; one that reads it anew loses the others. A
:class:`FollowedTrust` starts with the CA file's certificates and, each time :meth:`refresh` sees that
the file changed (a link such as ``certs/ca`` repointed, or the file rewritten), adds the new
certificates to the same context: it then trusts the old CA and the new one, for new connections, without
rebuilding the client that uses it.
"""

from __future__ import annotations

import os
import ssl

__all__ = ["FollowedTrust"]


class FollowedTrust:
    def __init__(self, cafile: str | os.PathLike[str]) -> None:
        self.cafile = os.fspath(cafile)
        self.context = ssl.create_default_context(cafile=self.cafile)
        self._loaded = {self._identity()}

    def _identity(self) -> tuple[str, int, int]:
        status = os.stat(self.cafile)
        return os.path.realpath(self.cafile), status.st_mtime_ns, status.st_size

    def refresh(self) -> bool:
        """Add the CA file's certificates when it changed since the last look; True when it did. A file
        that is missing or unreadable for a moment (a link being replaced) is tried again next time."""
        try:
            identity = self._identity()
            if identity in self._loaded:
                return False
            self.context.load_verify_locations(cafile=self.cafile)
        except (OSError, ssl.SSLError):
            return False
        self._loaded.add(identity)
        return True
