"""What readers see and who hears of it: the read limit (a cluster member serves only what its cluster
committed), the commit listeners (subscriptions, the cluster), and the visibility watches (the users'
credential caches)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Protocol

__all__ = ["Visibility", "VisibilityWatch"]

_log = logging.getLogger("evdb.database")


class VisibilityWatch(Protocol):
    """Told of the records of the streams it concerns as they become visible to readers (see
    :meth:`Database.add_visibility_watch`): the users' credential caches watch the user streams."""

    #: the streams whose names start with one of these concern it
    prefixes: tuple[str, ...]

    def changing(self, streams: frozenset[str]) -> None:
        """Records of ``streams`` are committed here and readers may see them from now on."""

    def changed(self, streams: frozenset[str]) -> None:
        """Readers see the records :meth:`changing` announced (or never will: they were rolled back,
        or the database closed first)."""


Told = list[tuple[VisibilityWatch, frozenset[str]]]


def _tell_changed(told: Told) -> None:
    for watch, streams in told:
        try:
            watch.changed(streams)
        except Exception:
            _log.exception("A visibility watch failed")


class Visibility:
    """The read limit, the listeners and the watches of one database. ``committed`` reads the log's
    committed end (all that is durable here)."""

    def __init__(self, committed: Callable[[], int], logger: logging.Logger) -> None:
        self._committed = committed
        self._logger = logger
        #: the end of what readers see: None = all that is durable here (a single node); in a cluster,
        #: what the cluster committed (set by evdb.cluster), so a read never returns a record that a
        #: new leader could cut from this log
        self.read_limit: int | None = None
        self._listeners: list[Callable[[int], None]] = []
        self._listeners_lock = threading.Lock()
        self._watches: list[VisibilityWatch] = []
        #: (end, watches told) of watched records committed here that readers do not see yet (a
        #: cluster member's read limit is behind them); with the read limit's moves, under _watch_lock
        self._unseen: list[tuple[int, Told]] = []
        self._watch_lock = threading.Lock()
        self.closed = False

    @property
    def readable_position(self) -> int:
        limit = self.read_limit
        committed = self._committed()
        return committed if limit is None or limit > committed else limit

    def visible_limit(self) -> int | None:
        """The log position reads stop at, or None when they see all that is committed here."""
        return None if self.read_limit is None else self.readable_position

    def set_read_limit(self, position: int) -> bool:
        """Serve reads up to ``position``; True when readers see more than before. The watches of the
        records the limit passes are told now."""
        previous = self.readable_position
        with self._watch_lock:
            self.read_limit = max(position, 0)
            now = self.readable_position
            seen = [told for end, told in self._unseen if end <= now]
            if seen:
                self._unseen = [(end, told) for end, told in self._unseen if end > now]
        for told in seen:
            _tell_changed(told)
        return now > previous

    def close(self) -> None:
        """Closed: readers of this database will never see what the watches wait for."""
        with self._watch_lock:
            self.closed = True
            unseen, self._unseen = self._unseen, []
        for _, told in unseen:
            _tell_changed(told)

    # -- listeners ---------------------------------------------------------------------------------------
    def add_listener(self, callback: Callable[[int], None]) -> None:
        with self._listeners_lock:
            self._listeners.append(callback)

    def remove_listener(self, callback: Callable[[int], None]) -> None:
        with self._listeners_lock:
            if callback in self._listeners:
                self._listeners.remove(callback)

    def notify_listeners(self) -> None:
        readable = self.readable_position
        with self._listeners_lock:
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(readable)
            except Exception:
                self._logger.exception("A commit listener failed")

    # -- watches -----------------------------------------------------------------------------------------
    def add_watch(self, watch: VisibilityWatch) -> None:
        with self._listeners_lock:
            self._watches = [*self._watches, watch]

    def tell_changing(self, names: set[str]) -> Told:
        """Tell the watches of ``names`` their records are committed here (before a reader can see
        them); returns who was told, for :meth:`settle_watched`."""
        told: Told = []
        for watch in self._watches:
            prefixes = watch.prefixes
            streams = [name for name in names if name.startswith(prefixes)]
            if streams:
                concerned = frozenset(streams)
                watch.changing(concerned)
                told.append((watch, concerned))
        return told

    def settle_watched(self, end: int, told: Told) -> None:
        """Records announced by :meth:`tell_changing`, ending at ``end``, are committed and indexed
        (or rolled back: ``end`` -1): tell their watches now, or when the read limit passes ``end``."""
        if not told:
            return
        with self._watch_lock:
            if self.read_limit is not None and self.readable_position < end and not self.closed:
                self._unseen.append((end, told))
                return
        _tell_changed(told)
