"""The simulated log's records and chunk files: a record framed in exactly its size, a completed chunk
sent whole as a file (a header, the frames, a footer with the checksum of the rest)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from types import SimpleNamespace

from evdb.storage.chunk import FOOTER_SIZE, HEADER_SIZE

#: the simulated log's chunk size (bytes of log positions): a record never straddles two chunks; the
#: writer completes a chunk a record does not fit in, and followers catch up by whole chunk files
SIM_CHUNK = 2048


@dataclass(frozen=True)
class SimRecord:
    position: int
    size: int
    kind: str  # "event", "epoch", or "pad": the rest of a completed chunk, which holds no record
    stream: str = ""
    number: int = -1
    event_id: str = ""
    epoch: tuple = ()  # (epochNumber, epochId, leaderInstanceId, previousEpochPosition)

    @property
    def end(self) -> int:
        return self.position + self.size

    def fingerprint(self) -> int:
        return hash(
            (self.position, self.size, self.kind, self.stream, self.number, self.event_id, self.epoch)
        )

    def to_json(self) -> list:
        return [
            self.position,
            self.size,
            self.kind,
            self.stream,
            self.number,
            self.event_id,
            list(self.epoch),
        ]

    @classmethod
    def from_json(cls, v: list) -> SimRecord:
        return cls(v[0], v[1], v[2], v[3], v[4], v[5], tuple(v[6]))

    def frame(self) -> bytes:
        body = json.dumps(self.to_json(), separators=(",", ":")).encode()
        if len(body) > self.size:
            raise ValueError(f"record {body!r} does not fit its {self.size} bytes")
        return body.ljust(self.size)

    @staticmethod
    def parse_frames(frames: bytes) -> list[SimRecord]:
        out, offset, decoder, text = [], 0, json.JSONDecoder(), frames.decode()
        while offset < len(text):
            value, _end = decoder.raw_decode(text, offset)
            record = SimRecord.from_json(value)
            out.append(record)
            offset += record.size
        return out


@dataclass
class SimChunk:
    """A completed chunk of the simulated log as a file, for a follower with none of it: a header, the
    records' frames, a footer whose last 16 bytes are the checksum of the rest (as the real file's)."""

    start_number: int
    data: bytes
    is_scavenged: bool = False

    def __post_init__(self) -> None:
        body = b"H" * HEADER_SIZE + self.data + b"F" * (FOOTER_SIZE - 16)
        self.footer = SimpleNamespace(checksum=hashlib.blake2b(body, digest_size=16).digest())
        self.buffer = body + self.footer.checksum

    @property
    def end_number(self) -> int:
        return self.start_number

    @property
    def file_name(self) -> str:
        return f"chunk-{self.start_number:06d}.000000"

    @property
    def file_size(self) -> int:
        return len(self.buffer)

    @property
    def start_position(self) -> int:
        return self.start_number * SIM_CHUNK

    @property
    def end_position(self) -> int:
        return self.start_position + SIM_CHUNK

    @staticmethod
    def records(source: bytes, checksum: bytes | None, start_number: int) -> list[SimRecord]:
        """The records of a received file, checked as the real install checks one (or ValueError)."""
        body, footer = source[:-16], source[-16:]
        if (
            len(source) < HEADER_SIZE + FOOTER_SIZE
            or hashlib.blake2b(body, digest_size=16).digest() != footer
        ):
            raise ValueError("the footer checksum does not match the file")
        if checksum is not None and checksum != footer:
            raise ValueError("the file's checksum is not the one the leader announced")
        records = SimRecord.parse_frames(source[HEADER_SIZE : len(source) - FOOTER_SIZE])
        expected = start_number * SIM_CHUNK
        for record in records:
            if record.position != expected or record.end > (start_number + 1) * SIM_CHUNK:
                raise ValueError(f"a record at {record.position} where {expected} was expected")
            expected = record.end
        return records
