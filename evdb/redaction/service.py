"""The node's redaction service: the RPC of protocol.py on ``<Db>/evdb.sock``.

Started by the node when ``EnableUnixSocket`` is true (never on TCP). The socket file is created
with mode 0600 (bound inside a private folder, then renamed into place, so it is never reachable
with looser rights) and a peer that does not run as the node's user (or root) is turned away.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import socket
import struct
import tempfile
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from evdb.licensing.loading import LicenseCheck, check_license, log_license_check
from evdb.licensing.token import LicenseError
from evdb.redaction.archived import redact_archived
from evdb.redaction.positions import event_positions
from evdb.redaction.protocol import MAX_LINE, RedactionError, bind_path, socket_path
from evdb.redaction.rules import check_redaction_target
from evdb.redaction.switch import switch_chunk

if TYPE_CHECKING:
    from evdb.clock import Clock
    from evdb.database import Database

__all__ = ["RedactionService", "start_redaction_service"]

_PRIVATE_PREFIX = ".evdb-sock-"
_UCRED = struct.Struct("3i")  # pid, uid, gid


async def start_redaction_service(
    options: Any,
    *,
    logger: logging.Logger,
    clock: Clock,
    db: Callable[[], Database | None],
    license_check: Callable[[], LicenseCheck] | None = None,
) -> RedactionService:
    """Start serving redaction calls for a node when its options ask for it (EnableUnixSocket).

    Its ports: the node's options, log and clock, a getter of the database open now, and the node's
    licence check (made from the options when not given). Returns the service; ``await
    service.close()`` at node stop, before the database closes. When the socket is off (or the
    database is in memory) the service does nothing and close is a no-op.
    """
    service = RedactionService(options, logger=logger, clock=clock, db=db, license_check=license_check)
    await service.start()
    return service


class _Session:
    """One connection: whether it holds the chunk lock, and on which log."""

    def __init__(self) -> None:
        self.log: Any = None
        self.closing = False


class RedactionService:
    def __init__(
        self,
        options: Any,
        *,
        logger: logging.Logger,
        clock: Clock,
        db: Callable[[], Database | None],
        license_check: Callable[[], LicenseCheck] | None = None,
    ) -> None:
        self.options = options
        self.logger = logger
        self.clock = clock
        self._db = db
        self._license_check = license_check
        self.path: str | None = None
        self._server: asyncio.AbstractServer | None = None
        self._handlers: set[asyncio.Task] = set()
        self._inode: tuple[int, int] | None = None
        self._license: LicenseCheck | None = None

    @property
    def is_serving(self) -> bool:
        return self._server is not None

    # -- lifecycle -------------------------------------------------------------------------------------
    async def start(self) -> None:
        options = self.options
        if not getattr(options, "enable_unix_socket", False):
            return
        if options.mem_db or not options.db:
            self.logger.warning(
                "EnableUnixSocket is on but the database is in memory (MemDb): redaction is not available."
            )
            return
        self._license = self._node_license()
        db_dir = os.path.abspath(options.db)
        self.path = socket_path(db_dir)
        sock = await asyncio.to_thread(self._bind, db_dir)
        self._server = await asyncio.start_unix_server(self._serve, sock=sock, limit=MAX_LINE + 2)
        state = (
            "redaction calls are allowed"
            if self._license.license is not None and "REDACTION" in self._license.license.entitlements
            else "redaction calls will be refused: no valid licence with the REDACTION entitlement"
        )
        self.logger.info("Redaction service listening on unix socket %s (%s)", self.path, state)

    def _node_license(self) -> LicenseCheck:
        """The node's licence check (the node's own when given, else made and logged here)."""
        if self._license_check is not None:
            return self._license_check()
        check = check_license(self.options, self.clock.time())
        log_license_check(check, self.logger)
        return check

    def _bind(self, db_dir: str) -> socket.socket:
        for name in os.listdir(db_dir):
            if name.startswith(_PRIVATE_PREFIX):  # left by a crash during an earlier start
                shutil.rmtree(os.path.join(db_dir, name), ignore_errors=True)
        private = tempfile.mkdtemp(prefix=_PRIVATE_PREFIX, dir=db_dir)  # mode 0700
        dir_fd = os.open(private, os.O_RDONLY)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            inner = os.path.join(private, "s")
            sock.bind(bind_path(inner, dir_fd if os.path.isdir("/proc/self/fd") else None))
            os.chmod(inner, 0o600)
            assert self.path is not None
            os.replace(inner, self.path)  # also replaces a socket file left by a crashed node
            st = os.stat(self.path)
            self._inode = (st.st_dev, st.st_ino)
            sock.listen(16)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        finally:
            os.close(dir_fd)
            shutil.rmtree(private, ignore_errors=True)
        return sock

    async def close(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for task in list(self._handlers):
            task.cancel()
        for task in list(self._handlers):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), 5)
        self._server = None
        if self.path is not None and self._inode is not None:
            with contextlib.suppress(FileNotFoundError):
                st = os.stat(self.path)
                if (st.st_dev, st.st_ino) == self._inode:
                    os.unlink(self.path)
        self.logger.info("Redaction service stopped")

    # -- a connection ----------------------------------------------------------------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        session = _Session()
        try:
            if not self._peer_allowed(writer):
                await self._answer(
                    writer, _error("Forbidden", "Only the node's own user (or root) may use this socket.")
                )
                return
            while True:
                try:
                    line = await reader.readline()
                except (asyncio.LimitOverrunError, ValueError):
                    await self._answer(
                        writer, _error("RequestTooLarge", f"A request line is over {MAX_LINE} bytes.")
                    )
                    return
                if not line:
                    return
                await self._answer(writer, await self._dispatch(session, line))
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            session.closing = True
            self._release(session)
            writer.close()
            self._handlers.discard(task)

    def _peer_allowed(self, writer: asyncio.StreamWriter) -> bool:
        sock = writer.get_extra_info("socket")
        if sock is None or not hasattr(socket, "SO_PEERCRED"):
            return True
        _pid, uid, _gid = _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))
        if uid in (0, os.getuid()):
            return True
        self.logger.warning("Redaction socket: refused a connection from user id %d", uid)
        return False

    async def _answer(self, writer: asyncio.StreamWriter, answer: dict) -> None:
        writer.write(json.dumps(answer).encode() + b"\n")
        await writer.drain()

    async def _dispatch(self, session: _Session, line: bytes) -> dict:
        try:
            request = json.loads(line)
        except (ValueError, UnicodeDecodeError):
            return _error("BadRequest", "A request is one JSON object per line.")
        if not isinstance(request, dict) or not isinstance(request.get("call"), str):
            return _error("BadRequest", 'A request is a JSON object with a "call".')
        call = request["call"]
        handler = {
            "lockChunks": self._lock_chunks,
            "unlockChunks": self._unlock_chunks,
            "getEventPositions": self._get_event_positions,
            "switchChunk": self._switch_chunk,
            "redactArchived": self._redact_archived,
        }.get(call)
        if handler is None:
            return _error(
                "UnknownCall",
                f"Unknown call {call!r}; the calls are lockChunks, getEventPositions, switchChunk, "
                "redactArchived, unlockChunks.",
            )
        try:
            self._check_license()
            return await handler(session, request)
        except RedactionError as exc:
            self.logger.warning("Redaction call %s on %s refused (%s): %s", call, self.path, exc.code, exc)
            return _error(exc.code, str(exc))
        except Exception as exc:  # the connection must get an answer; the node must not fall over
            self.logger.exception("Redaction call %s failed", call)
            return _error("Unexpected", f"{type(exc).__name__}: {exc}")

    def _check_license(self) -> None:
        assert self._license is not None
        try:
            self._license.require("REDACTION", self.clock.time())
        except LicenseError as exc:
            raise RedactionError(
                "NotLicensed", f"Redaction requires a valid licence with the REDACTION entitlement: {exc}"
            ) from None

    def _open_db(self) -> Database:
        db = self._db()
        if db is None:
            raise RedactionError("Unavailable", "The node's database is not open.")
        return db

    def _current_log(self) -> Any:
        return self._open_db().log

    # -- the chunk lock ----------------------------------------------------------------------------------
    async def _acquire(self, session: _Session) -> None:
        log = self._current_log()
        lock = log.chunk_lock
        # a bounded wait per try, so a node stopping meanwhile never leaves a thread blocked for good
        while True:
            attempt = asyncio.ensure_future(asyncio.to_thread(lock.acquire, True, 0.25))
            try:
                got = await asyncio.shield(attempt)
            except asyncio.CancelledError:
                # the try may still succeed in its thread: give the lock back then
                attempt.add_done_callback(
                    lambda f: (
                        lock.release() if not f.cancelled() and f.exception() is None and f.result() else None
                    )
                )
                raise
            if got:
                break
            if session.closing:
                raise RedactionError("Unavailable", "The session ended while it waited for the chunk lock.")
        session.log = log

    def _release(self, session: _Session) -> None:
        if session.log is not None:
            session.log.chunk_lock.release()
            session.log = None

    async def _lock_chunks(self, session: _Session, request: dict) -> dict:
        if session.log is None:
            await self._acquire(session)
        return {"ok": True}

    async def _unlock_chunks(self, session: _Session, request: dict) -> dict:
        self._release(session)
        return {"ok": True}

    async def _locked(self, session: _Session, fn: Any, *args: Any) -> Any:
        """Run ``fn(log, *args)`` in a thread with the chunk lock held (the session's, or for this call)."""
        held = session.log is not None
        if not held:
            await self._acquire(session)
        try:
            log = session.log
            if log is not self._current_log():
                raise RedactionError("Unavailable", "The database was reopened; lock the chunks again.")
            work = asyncio.ensure_future(asyncio.to_thread(fn, log, *args))
            try:
                return await asyncio.shield(work)
            except asyncio.CancelledError:
                # once started, a switch finishes (with the lock held) even when the caller goes away
                while not work.done():
                    with contextlib.suppress(asyncio.CancelledError):
                        await asyncio.shield(work)
                raise
        finally:
            if not held:
                self._release(session)

    async def _get_event_positions(self, session: _Session, request: dict) -> dict:
        stream, number = check_redaction_target(request.get("stream"), request.get("eventNumber"))
        db = self._open_db()
        positions = await self._locked(session, lambda _log: event_positions(db, stream, number))
        if not positions:
            raise RedactionError("EventNotFound", f"Event {number}@{stream} is not in the log.")
        return {"ok": True, "positions": positions}

    async def _switch_chunk(self, session: _Session, request: dict) -> dict:
        target, new = request.get("targetChunkFile"), request.get("newChunkFile")
        final = await self._locked(session, switch_chunk, target, new)
        self.logger.info("Redaction: switched %s in place of %s (as %s)", new, target, final)
        return {"ok": True, "chunkFile": final}

    async def _redact_archived(self, session: _Session, request: dict) -> dict:
        """The archive's copy of a chunk redacted (evdb/redaction/archived.py), with the chunk lock held."""
        answer = await self._locked(
            session,
            lambda log: redact_archived(
                log,
                request.get("chunkNumber"),
                request.get("events"),
                node=f"the redaction of {os.path.dirname(self.path or '')}",
                now=self.clock.time,
                logger=self.logger,
            ),
        )
        return {"ok": True, **answer}


def _error(code: str, message: str) -> dict:
    return {"ok": False, "error": code, "message": message}
