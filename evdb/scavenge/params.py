"""The parameters of a scavenge start, and the one set of rules every surface applies to them: HTTP
``POST /admin/scavenge`` (also what the web Admin UI and ``evdb scavenge start`` send), gRPC
``StartScavenge``, ``evdb scavenge start`` before it sends anything, and the dashboard's dialog.

The spec's rules (Endpoints › Scavenge, Errors, Limits), in KurrentDB's ranges and with its messages:

- ``threads``: 1 or more (a 32-bit integer; the node runs at most 4);
- ``threshold``: -1 (every chunk), 0 (every chunk with something to remove) or a minimum weight, a
  32-bit integer (beyond one: KurrentDB's ``threshold must be an integer``): below -1 is refused;
- ``throttlePercent``: 1 to 100, and 100 when ``threads`` is above 1;
- ``syncOnly``: a boolean;
- ``startFromChunk``: deprecated and ignored, but still a chunk number: 0 to 2^31-1.

Values arrive as text (a query string, a dialog field), as integers (argparse, protobuf) or not at
all (None: the default). Text is ASCII digits with an optional sign, nothing else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from evdb.errors import InvalidInput

__all__ = [
    "INT32_MAX",
    "INT32_MIN",
    "InvalidScavengeParameter",
    "ScavengeRequest",
    "parse_scavenge_request",
]

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1

_INTEGER = re.compile(r"([+-]?)0*([0-9]+)")
#: what text of more digits than any 64-bit number stands for: beyond every range here
_HUGE = 10**20

THREADS = "threads must be a 1 or above"
THRESHOLD_TYPE = "threshold must be an integer"
THRESHOLD_RANGE = (
    f"threshold must be -1 (all chunks), 0 (chunks with something to remove) or a minimum weight up to "
    f"{INT32_MAX}"
)
THROTTLE = "throttlePercent must be between 1 and 100 inclusive"
THROTTLE_THREADS = "throttlePercent must be 100 for a multi-threaded scavenge"
SYNC_ONLY = "syncOnly must be a boolean"
START_FROM_CHUNK = "startFromChunk must be a positive integer"


class InvalidScavengeParameter(InvalidInput):
    """A scavenge parameter breaks a rule; ``parameter`` is its name in the API (``throttlePercent``)."""

    def __init__(self, parameter: str, message: str) -> None:
        super().__init__(message)
        self.parameter = parameter


@dataclass(frozen=True)
class ScavengeRequest:
    threads: int = 1
    threshold: int = 0
    throttle_percent: int = 100
    sync_only: bool = False

    def validate(self) -> ScavengeRequest:
        """The spec's rules, with KurrentDB's messages (see the module's text)."""
        return parse_scavenge_request(
            threads=self.threads,
            threshold=self.threshold,
            throttle_percent=self.throttle_percent,
            sync_only=self.sync_only,
        )


def _integer(parameter: str, value: object, default: int, wrong: str) -> int:
    """``value`` as an integer (``default`` for None or empty text); ``wrong`` when it is none."""
    if value is None:
        return default
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return default
        match = _INTEGER.fullmatch(text)
        if match is None:
            raise InvalidScavengeParameter(parameter, wrong)
        sign, digits = match.groups()
        magnitude = int(digits) if len(digits) <= 20 else _HUGE  # no int() of a million digits
        return -magnitude if sign == "-" else magnitude
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidScavengeParameter(parameter, wrong)
    return value


def _boolean(parameter: str, value: object, default: bool, wrong: str) -> bool:
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise InvalidScavengeParameter(parameter, wrong)


def parse_scavenge_request(
    *,
    threads: object = None,
    threshold: object = None,
    throttle_percent: object = None,
    sync_only: object = None,
    start_from_chunk: object = None,
) -> ScavengeRequest:
    """Check a scavenge start's parameters (None: the default) and return the request; raises
    :class:`InvalidScavengeParameter` (an InvalidInput: HTTP 400, gRPC INVALID_ARGUMENT) naming the
    first parameter that breaks a rule. ``start_from_chunk`` is checked and then ignored."""
    threads_value = _integer("threads", threads, 1, THREADS)
    if threads_value < 1:
        raise InvalidScavengeParameter("threads", THREADS)
    if threads_value > INT32_MAX:
        raise InvalidScavengeParameter("threads", f"threads must be at most {INT32_MAX}")
    threshold_value = _integer("threshold", threshold, 0, THRESHOLD_TYPE)
    if not INT32_MIN <= threshold_value <= INT32_MAX:  # KurrentDB's int.TryParse fails: its message
        raise InvalidScavengeParameter("threshold", THRESHOLD_TYPE)
    if threshold_value < -1:
        raise InvalidScavengeParameter("threshold", THRESHOLD_RANGE)
    throttle = _integer("throttlePercent", throttle_percent, 100, THROTTLE)
    if not 1 <= throttle <= 100:
        raise InvalidScavengeParameter("throttlePercent", THROTTLE)
    sync = _boolean("syncOnly", sync_only, False, SYNC_ONLY)
    if start_from_chunk is not None:
        chunk = _integer("startFromChunk", start_from_chunk, 0, START_FROM_CHUNK)
        if chunk < 0:
            raise InvalidScavengeParameter("startFromChunk", START_FROM_CHUNK)
        if chunk > INT32_MAX:
            raise InvalidScavengeParameter(
                "startFromChunk", f"startFromChunk must be at most {INT32_MAX} (a chunk number)"
            )
    if throttle != 100 and threads_value > 1:
        raise InvalidScavengeParameter("throttlePercent", THROTTLE_THREADS)
    return ScavengeRequest(threads_value, threshold_value, throttle, sync)
