"""Deterministic simulation of a cluster: the real ClusterService of every node, in one process, under a seed.

What is real and what is simulated:

- **Real**: evdb/cluster/service.py, all of it (gossip, elections, votes, taking office, the write permit,
  the replication gate, the common point and its record-by-record verification, replication, acks,
  the commit position that bounds reads, resigning), evdb/cluster/election.py and forwarding.py.
- **Simulated**, behind the ports the service already has: time (an asyncio event loop whose clock
  jumps to the next timer instead of waiting), the random source (one ``random.Random(seed)`` for
  everything), the network (:class:`SimTransport`: delay, loss, reordering through random delays,
  partitions, paused processes) and the disk (:class:`SimDatabase`: a log of records that are written,
  then synced after a delay; a crash keeps a random prefix of what was not synced, as a power cut or a
  torn write would; chunks of SIM_CHUNK bytes that a record never straddles, completed on followers by
  the leader's "complete" message, and sent whole as files (:class:`SimChunk`) to a follower with none
  of a completed chunk, through the service's real chunk-file sender and receiver).

After every step the checker asserts: no acknowledged write is ever lost (a majority of voters hold it
durably at its position); the parts of the logs that nodes serve to readers are prefixes of one
history; at most one leader per epoch acknowledges writes; every truncation falls on a record boundary;
every read answered a record of that one history at that position; and once healed, every node's log
is the same. A seed replays exactly: ``python -m evdb.cluster.sim --seed N --verbose``.
"""

from __future__ import annotations

from evdb.cluster.sim.checks import GOSSIP_TIMEOUT, LIVENESS_GRACE, PROBE_EVERY, PROBE_TIMEOUT
from evdb.cluster.sim.disk import ANY, SimDatabase
from evdb.cluster.sim.loop import SimDeadlock, SimLoop
from evdb.cluster.sim.network import SimChannel, SimTransport
from evdb.cluster.sim.nodes import SimNode
from evdb.cluster.sim.records import SIM_CHUNK, SimChunk, SimRecord
from evdb.cluster.sim.runner import SimulationResult, run_seed, run_seeds
from evdb.cluster.sim.simulation import Schedule, Simulation

__all__ = [
    "ANY",
    "GOSSIP_TIMEOUT",
    "LIVENESS_GRACE",
    "PROBE_EVERY",
    "PROBE_TIMEOUT",
    "SIM_CHUNK",
    "Schedule",
    "SimChannel",
    "SimChunk",
    "SimDatabase",
    "SimDeadlock",
    "SimLoop",
    "SimNode",
    "SimRecord",
    "SimTransport",
    "Simulation",
    "SimulationResult",
    "run_seed",
    "run_seeds",
]
