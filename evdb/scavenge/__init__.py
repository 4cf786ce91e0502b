"""The node scavenge: removes deleted, truncated and expired events from chunks and the index.

One run is tied to one scavenge point and goes through the spec's phases: Beginning, Accumulation,
Calculation, Execution (chunks, merging, index) and Cleaning. Its state lives in
``<index>/scavenging/scavenging.db`` so a stopped or interrupted run resumes where it stopped.
"""

from evdb.scavenge.point import ScavengePoint
from evdb.scavenge.scavenger import ScavengeOptions, Scavenger, ScavengeResult
from evdb.scavenge.service import ScavengeService

__all__ = ["ScavengeOptions", "ScavengePoint", "ScavengeResult", "ScavengeService", "Scavenger"]
