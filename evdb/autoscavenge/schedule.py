"""Auto-scavenge schedules: standard five-field CRON expressions (croniter), in UTC; and the .NET
TimeSpan text of ``timeUntilNextCycle``.

KurrentDB parses schedules with NCrontab: five fields (minute, hour, day of month, month, day of week),
numbers, ``*``, lists, ranges, steps and three-letter month and day names. croniter accepts more
(``@daily``, ``L``, ``#``, ``H``, a seconds field at the end); those are refused here so a schedule that
works on evdb also works on KurrentDB. With the ``AutoScavengeScheduleSeconds`` option a sixth, leading
field for seconds is accepted (NCrontab's "including seconds" form) for demos and tests.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass

from croniter import CroniterBadCronError, CroniterBadDateError, croniter

from evdb.errors import InvalidInput

__all__ = ["InvalidSchedule", "Schedule", "format_timespan", "parse_schedule"]

_FIELD = re.compile(r"^[0-9A-Za-z*,/\-]+$")
_NAMES = {
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    "sun", "mon", "tue", "wed", "thu", "fri", "sat",
}  # fmt: skip
_WORD = re.compile(r"[A-Za-z]+")


class InvalidSchedule(InvalidInput):
    """The text is not a CRON expression evdb accepts (KurrentDB's answer: ``Invalid CRON expression``)."""


@dataclass(frozen=True)
class Schedule:
    expression: str
    with_seconds: bool = False

    def next_after(self, when: float) -> float:
        """The first due time strictly after ``when`` (Unix seconds, UTC)."""
        start = datetime.datetime.fromtimestamp(when, datetime.UTC)
        try:
            return float(
                croniter(self.expression, start, second_at_beginning=self.with_seconds).get_next(float)
            )
        except CroniterBadDateError:  # e.g. "0 0 30 2 *": never due
            return float("inf")

    def __str__(self) -> str:
        return self.expression


def parse_schedule(text: object, *, allow_seconds: bool = False, must_fire: bool = True) -> Schedule:
    """Check a schedule the way the configure endpoint does; raise InvalidSchedule with the reason.

    ``must_fire`` refuses an expression no date matches (``0 0 31 2 *``); reading a schedule an older
    version stored passes False: such a schedule is kept and is never due."""
    if not isinstance(text, str):
        raise InvalidSchedule("CRON expression can only be a string")
    expression = " ".join(text.split())
    fields = expression.split(" ") if expression else []
    counts = (5, 6) if allow_seconds else (5,)
    if len(fields) not in counts:
        raise InvalidSchedule("Invalid CRON expression")
    for field in fields:
        if not _FIELD.match(field):
            raise InvalidSchedule("Invalid CRON expression")
        for word in _WORD.findall(field):
            if word.lower() not in _NAMES:
                raise InvalidSchedule("Invalid CRON expression")
    with_seconds = len(fields) == 6
    try:
        if not croniter.is_valid(expression, second_at_beginning=with_seconds):
            raise InvalidSchedule("Invalid CRON expression")
        cron = croniter(expression, 0.0, second_at_beginning=with_seconds)
    except (CroniterBadCronError, ValueError, KeyError):
        raise InvalidSchedule("Invalid CRON expression") from None
    if must_fire:
        try:
            cron.get_next(float)
        except CroniterBadDateError:
            raise InvalidSchedule(
                f"Invalid CRON expression: '{expression}' never fires (no date matches it)"
            ) from None
    return Schedule(expression, with_seconds)


def format_timespan(seconds: float) -> str:
    """.NET TimeSpan "c" text: ``[d.]hh:mm:ss[.fffffff]`` (days and fraction only when not zero)."""
    ticks = max(0, round(seconds * 10_000_000))
    total_seconds, fraction = divmod(ticks, 10_000_000)
    days, rest = divmod(total_seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    if days:
        text = f"{days}.{text}"
    if fraction:
        text += f".{fraction:07d}"
    return text
