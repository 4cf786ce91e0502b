"""Auto-scavenge: scheduled cluster scavenges, one node at a time, the leader last (licensed).

See docs/operations/auto-scavenge.md for the behaviour and the log lines; the modules:

- :mod:`~evdb.autoscavenge.enabling`: whether it runs (YAML option, earlier plugin form, licence)
- :mod:`~evdb.autoscavenge.schedule`: CRON expressions and the TimeSpan text of the status
- :mod:`~evdb.autoscavenge.state`: the events of ``$auto-scavenges`` / ``$auto-scavenge-configuration``
- :mod:`~evdb.autoscavenge.machine`: the process on the leader (commands and assessments)
- :mod:`~evdb.autoscavenge.scavenger`: driving a node's scavenge over its HTTP endpoints
- :mod:`~evdb.autoscavenge.nodeauth`: the node token those calls carry
- :mod:`~evdb.autoscavenge.service`: the per-node service (leading, handing over, forwarding)
"""

from __future__ import annotations

from evdb.autoscavenge.enabling import AutoScavengeNotLicensed, Enabling
from evdb.autoscavenge.machine import AutoScavengeMachine, Member
from evdb.autoscavenge.schedule import InvalidSchedule, Schedule, format_timespan, parse_schedule
from evdb.autoscavenge.service import AutoScavengeService, create_auto_scavenge
from evdb.autoscavenge.state import CONFIGURATION_STREAM, EVENTS_STREAM, AutoScavengeState, PublicState

__all__ = [
    "CONFIGURATION_STREAM",
    "EVENTS_STREAM",
    "AutoScavengeMachine",
    "AutoScavengeNotLicensed",
    "AutoScavengeService",
    "AutoScavengeState",
    "Enabling",
    "InvalidSchedule",
    "Member",
    "PublicState",
    "Schedule",
    "create_auto_scavenge",
    "format_timespan",
    "parse_schedule",
]
