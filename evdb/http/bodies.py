"""Request bodies: read once, inflated here with a bound when the client compressed them.

The node's aiohttp server does not inflate bodies itself (``auto_decompress=False`` in
evdb/node/__init__.py): aiohttp inflated a ``Content-Encoding: gzip`` body whole before a handler saw
it, so a 300 KB body that inflates to 300 MiB cost 300 MiB of memory before its 413, and one that did
not decode escaped as a 500. Every handler that reads a body calls :func:`read_body` (or
``read_json`` on top of it); the lean path (evdb/http/lean.py) hands any request with a
``Content-Encoding`` to aiohttp, so this is the one place a body is inflated.

The rules:

- codings: ``gzip`` (``x-gzip``, several members allowed), ``deflate`` (the zlib format, or raw
  deflate as some clients send it, told apart by the first byte as aiohttp does) and ``identity``,
  in a comma-separated list applied in order; any other coding is a 415 naming the ones accepted;
- a body that does not decode, or ends inside its compressed stream, is a 400 saying so;
- inflation stops as soon as the body passes the largest body the node reads
  (``HttpMaxRequestBodySize``, the app's ``client_max_size``) or, past :data:`RATIO_FLOOR` bytes, as
  soon as it is more than :data:`MAX_RATIO` times the compressed bytes read so far: a 413 then, with
  at most one :data:`STEP` inflated past the point of refusal. Real JSON compresses 5 to 20 times;
  a body of repeated bytes up to a thousand times (that is what a bomb is).
- inflation goes :data:`STEP` bytes at a time, letting the event loop run between steps.
"""

from __future__ import annotations

import asyncio
import zlib

from aiohttp import web

from evdb.errors import BodyTooLarge, InvalidInput, UnsupportedContentEncoding

__all__ = ["CODINGS", "MAX_RATIO", "RATIO_FLOOR", "STEP", "Inflater", "codings_of", "read_body"]

#: the content codings the node inflates (``identity`` is no coding)
CODINGS = ("gzip", "x-gzip", "deflate")
#: the most an inflated body may be, as a multiple of the compressed bytes it came from ...
MAX_RATIO = 100
#: ... once it is larger than this many bytes (a small body may compress better than 1:100)
RATIO_FLOOR = 1 << 20
#: bytes inflated at a time, the event loop running between steps
STEP = 1 << 20


def codings_of(header: str | None) -> list[str]:
    """The codings of a ``Content-Encoding`` value, in the order they were applied (``identity``
    dropped); UnsupportedContentEncoding for one the node does not inflate."""
    if not header:
        return []
    codings = [part.strip().lower() for part in header.split(",")]
    codings = [c for c in codings if c and c != "identity"]
    unknown = [c for c in codings if c not in CODINGS]
    if unknown:
        raise UnsupportedContentEncoding(
            f"The request body's Content-Encoding {unknown[0]!r:.60} is not supported; "
            f"send it uncompressed or as {', '.join(CODINGS[::2])}."
        )
    return codings


class Inflater:
    """One coding undone over a whole compressed body, :data:`STEP` bytes at a time (see the module
    docstring for the bounds)."""

    def __init__(self, coding: str, data: bytes, limit: int) -> None:
        self.coding = "gzip" if coding == "x-gzip" else coding
        self.data = data
        self.limit = limit
        self.out = bytearray()
        self._pending = data
        self._consumed_before = 0  # compressed bytes of the gzip members already finished
        self._decompressor = self._new(data)
        self.done = False

    def _new(self, data: bytes) -> zlib._Decompress:
        if self.coding == "gzip":
            return zlib.decompressobj(16 + zlib.MAX_WBITS)
        # RFC 1950's zlib format says deflate (CM = 8 in the first byte's low bits); else raw deflate
        raw = bool(data) and data[0] & 0x0F != 8
        return zlib.decompressobj(-zlib.MAX_WBITS if raw else zlib.MAX_WBITS)

    def step(self) -> None:
        """Inflate up to :data:`STEP` more bytes; ``done`` once the body is whole. InvalidInput for
        a body that does not decode, BodyTooLarge past a bound."""
        decompressor = self._decompressor
        try:
            chunk = decompressor.decompress(self._pending, STEP)
        except zlib.error as exc:
            raise InvalidInput(
                f"The request body is labelled Content-Encoding: {self.coding} but does not decode ({exc})."
            ) from None
        self._pending = decompressor.unconsumed_tail
        self.out += chunk
        consumed = self._consumed_before + len(self.data) - len(self._pending) - len(decompressor.unused_data)
        self._check_bounds(consumed)
        if not decompressor.eof:
            if not self._pending and not chunk:
                raise InvalidInput(
                    f"The request body is labelled Content-Encoding: {self.coding} but ends inside "
                    "its compressed data."
                )
            return
        rest = decompressor.unused_data
        if not rest:
            self.done = True
        elif self.coding == "gzip":  # another gzip member follows
            self._consumed_before = consumed
            self.data = rest
            self._pending = rest
            self._decompressor = self._new(rest)
        else:
            raise InvalidInput(
                f"The request body is labelled Content-Encoding: {self.coding} but has "
                f"{len(rest)} bytes after the end of its compressed data."
            )

    def _check_bounds(self, consumed: int) -> None:
        size = len(self.out)
        if size > self.limit:
            raise BodyTooLarge(
                f"The request body inflates (Content-Encoding: {self.coding}) past {self.limit} bytes, "
                "the largest body the node reads (HttpMaxRequestBodySize)."
            )
        if size > RATIO_FLOOR and size > MAX_RATIO * max(consumed, 1):
            raise BodyTooLarge(
                f"The request body inflates (Content-Encoding: {self.coding}) to more than {MAX_RATIO} "
                f"times its compressed size ({size} bytes from {consumed}); the node refuses it."
            )


async def inflate(body: bytes, codings: list[str], limit: int) -> bytes:
    """``body`` with ``codings`` (in the order applied) undone, within the bounds."""
    for coding in reversed(codings):
        inflater = Inflater(coding, body, limit)
        while True:
            inflater.step()
            if inflater.done:
                break
            await asyncio.sleep(0)  # a step's worth of CPU at a time: other requests are served between
        body = bytes(inflater.out)
    return body


async def read_body(request: web.Request) -> bytes:
    """The request's body, inflated when it has a ``Content-Encoding`` (see the module docstring)."""
    codings = codings_of(request.headers.get("Content-Encoding"))
    raw = await request.read()  # aiohttp's 413 past client_max_size
    if not codings:
        return raw
    return await inflate(raw, codings, request.client_max_size)
