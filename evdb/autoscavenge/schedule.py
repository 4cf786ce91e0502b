"""Auto-scavenge schedules: five-field CRON expressions read as KurrentDB reads them, in UTC; and the
.NET TimeSpan text of ``timeUntilNextCycle``.

KurrentDB parses schedules with NCrontab (``CrontabSchedule.Parse``) and shows and stores them in
NCrontab's normal form (``CrontabSchedule.ToString``). :func:`parse_schedule` applies NCrontab's rules:

- five fields split on spaces (minute 0-59, hour 0-23, day of month 1-31, month 1-12, day of week 0-6
  with Sunday 0: ``7`` is refused);
- an element is ``*``, a number, a name or a range ``a-b`` (a reversed range is turned round), with an
  optional step ``/n`` (a number with a step runs to the field's maximum: ``5/15`` is ``5,20,35,50``);
  elements are separated by commas;
- names are any leading part of the English month or day name, in any case (``MON``, ``Tues``,
  ``january``);
- a date matches when its day of month *and* its day of week match.

The normal form lists the values each field holds, consecutive values as a range, a full field as ``*``:
``*/15 * * * *`` → ``0,15,30,45 * * * *``, ``0 6 * * MON-FRI`` → ``0 6 * * 1-5``. That is what
``GET /auto-scavenge/status`` shows (KurrentDB's shape: its ``schedule`` is an NCrontab schedule) and
what ``$configuration-updated`` keeps as ``schedule``. The operator's own text is kept beside it
(``Schedule.given``, the event's ``given``) and shown by evdb's ``GET /auto-scavenge/progress`` as
``scheduleAsGiven``: ``*/2 * * * * *`` reads better than thirty listed seconds. Times are then computed by
croniter from the normal form. With the ``AutoScavengeScheduleSeconds`` option a sixth, leading field
for seconds (0-59) is accepted (NCrontab's "including seconds" form) for demos and tests.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass, field

from croniter import CroniterBadCronError, CroniterBadDateError, croniter

from evdb.errors import InvalidInput

__all__ = ["InvalidSchedule", "Schedule", "format_timespan", "normal_form", "parse_schedule"]

INVALID = "Invalid CRON expression"


class InvalidSchedule(InvalidInput):
    """The text is not a CRON expression evdb accepts (KurrentDB's answer: ``Invalid CRON expression``)."""


@dataclass(frozen=True)
class _Field:
    low: int
    high: int
    names: tuple[str, ...] = ()  # the full names of low, low+1, ...: any leading part of one names it


_MONTHS = "january february march april may june july august september october november december"
_DAYS = "sunday monday tuesday wednesday thursday friday saturday"
_SECOND = _Field(0, 59)
_FIVE_FIELDS = (
    _Field(0, 59),
    _Field(0, 23),
    _Field(1, 31),
    _Field(1, 12, tuple(_MONTHS.split())),
    _Field(0, 6, tuple(_DAYS.split())),
)
#: .NET's int.Parse: optional white space around, a sign only in front (a step may be signed)
_NUMBER = re.compile(r"[\t\n\v\f\r ]*([0-9]+)[\t\n\v\f\r ]*")
_SIGNED = re.compile(r"[\t\n\v\f\r ]*([+-]?[0-9]+)[\t\n\v\f\r ]*")
_INT32_MAX = 2**31 - 1


class _Bad(ValueError):
    """An element breaks NCrontab's rules (reported as KurrentDB's ``Invalid CRON expression``)."""


def _int32(text: str, pattern: re.Pattern[str]) -> int:
    match = pattern.fullmatch(text)
    if match is None or len(match.group(1)) > 12 or abs(int(match.group(1))) > _INT32_MAX:
        raise _Bad(text)
    return int(match.group(1))


def _value(text: str, field: _Field) -> int:
    if "0" <= text[:1] <= "9":
        return _int32(text, _NUMBER)
    word = text.lower()
    if text and text.isascii():
        for offset, name in enumerate(field.names):
            if name.startswith(word):
                return field.low + offset
    raise _Bad(text)


def _element(text: str, field: _Field, values: set[int]) -> None:
    """Add the values of one element (``*``, ``n``, ``a-b``, each with an optional ``/step``)."""
    if not text:
        raise _Bad("an empty element")
    step: int | None = None
    slash = text.find("/")
    if slash > 0:
        step = _int32(text[slash + 1 :], _SIGNED)
        text = text[:slash]
    if text == "*":
        start, end = field.low, field.high
    elif text.find("-") > 0:
        dash = text.find("-")
        start, end = _value(text[:dash], field), _value(text[dash + 1 :], field)
    else:
        start = _value(text, field)
        end = start if step is None else field.high
    start, end = min(start, end), max(start, end)
    if start < field.low or end > field.high:
        raise _Bad(text)
    values.update(range(start, end + 1, max(step or 1, 1)))


def _field_values(text: str, field: _Field) -> set[int]:
    values: set[int] = set()
    for element in text.split(",") if text.find(",") > 0 else [text]:
        _element(element, field, values)
    return values


def _format(values: set[int], field: _Field) -> str:
    """NCrontab's form of a field: ``*`` when full, else runs of consecutive values as ranges."""
    ordered = sorted(values)
    if ordered == list(range(field.low, field.high + 1)):
        return "*"
    runs: list[str] = []
    first = last = ordered[0]
    for value in [*ordered[1:], None]:
        if value is not None and value == last + 1:
            last = value
            continue
        runs.append(str(first) if first == last else f"{first}-{last}")
        if value is not None:
            first = last = value
    return ",".join(runs)


def normal_form(text: str, *, allow_seconds: bool = False) -> str:
    """The expression as KurrentDB shows it (NCrontab's ``ToString``); InvalidSchedule when NCrontab would
    refuse it (or, with ``allow_seconds``, when it is neither five fields nor six with seconds first)."""
    tokens = [t for t in text.split(" ") if t]
    fields: tuple[_Field, ...]
    if len(tokens) == 5:
        fields = _FIVE_FIELDS
    elif len(tokens) == 6 and allow_seconds:
        fields = (_SECOND, *_FIVE_FIELDS)
    else:
        raise InvalidSchedule(INVALID)
    try:
        return " ".join(_format(_field_values(t, f), f) for t, f in zip(tokens, fields, strict=True))
    except _Bad:
        raise InvalidSchedule(INVALID) from None


@dataclass(frozen=True)
class Schedule:
    expression: str
    with_seconds: bool = False
    #: a date matches when its day of month or (True) and (False, NCrontab's rule) its day of week does
    day_or: bool = False
    #: the expression as the operator typed it (white space collapsed): ``*/2 * * * * *`` where the
    #: normal form lists thirty seconds; "" when not known (a schedule stored by an older version)
    given: str = field(default="", compare=False)

    @property
    def as_given(self) -> str:
        """The operator's own text, else the normal form."""
        return self.given or self.expression

    def next_after(self, when: float) -> float:
        """The first due time strictly after ``when`` (Unix seconds, UTC)."""
        start = datetime.datetime.fromtimestamp(when, datetime.UTC)
        try:
            cron = croniter(self.expression, start, second_at_beginning=self.with_seconds, day_or=self.day_or)
            return float(cron.get_next(float))
        except CroniterBadDateError:  # e.g. "0 0 30 2 *": never due
            return float("inf")

    def __str__(self) -> str:
        return self.expression


def parse_schedule(text: object, *, allow_seconds: bool = False, must_fire: bool = True) -> Schedule:
    """Check a schedule the way the configure endpoint does and return it in KurrentDB's normal form;
    raise InvalidSchedule with the reason.

    ``must_fire`` refuses an expression no date matches (``0 0 31 2 *``); reading a schedule stored
    earlier passes False: such a schedule is kept and is never due, and one an older evdb accepted that
    NCrontab refuses (a day of week 7) keeps the meaning that version gave it."""
    if not isinstance(text, str):
        raise InvalidSchedule("CRON expression can only be a string")
    try:
        expression = normal_form(text, allow_seconds=allow_seconds)
    except InvalidSchedule:
        if must_fire:
            raise
        return _stored_by_an_older_version(text)
    given = " ".join(t for t in text.split(" ") if t)
    schedule = Schedule(expression, with_seconds=len(expression.split(" ")) == 6, given=given)
    if must_fire and schedule.next_after(0.0) == float("inf"):
        raise InvalidSchedule(f"{INVALID}: '{expression}' never fires (no date matches it)")
    return schedule


def _stored_by_an_older_version(text: str) -> Schedule:
    """Earlier versions checked schedules with croniter (day of week 7 was Sunday, and a date matched on
    its day of month or its day of week): a configuration event they wrote still loads, as it meant."""
    expression = " ".join(text.split())
    with_seconds = len(expression.split(" ")) == 6
    try:
        croniter(expression, 0.0, second_at_beginning=with_seconds)
    except (CroniterBadCronError, ValueError, KeyError):
        raise InvalidSchedule(INVALID) from None
    return Schedule(expression, with_seconds=with_seconds, day_or=True)


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
