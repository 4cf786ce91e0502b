"""Gossip (cluster members, for ``+discover`` connection strings) and Operations (scavenge, merge
indexes, resign, priority, shutdown, restart persistent subscriptions).

Operations map onto the machinery the HTTP endpoints use: ``node.scavenge`` (as
``evdb/http/scavenge.py``), ``node.cluster`` (as ``evdb/http/cluster.py``) and the node's shutdown
event (as ``evdb/http/admin.py``); they need an admin or ops caller.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING

from grpclib import GRPCError
from grpclib.const import Cardinality, Handler, Status
from grpclib.server import Stream
from kurrentdbclient.protos.v1 import gossip_pb2, shared_pb2

from evdb.cluster.advertising import client_member
from evdb.errors import (
    EvdbError,
    InvalidInput,
    PersistentSubscriptionsNotReady,
    ScavengeAlreadyRunning,
    ScavengeNotFound,
)
from evdb.grpc import operations_pb2
from evdb.grpc.access import require_ops
from evdb.grpc.context import call_context, database, scavenge_service
from evdb.grpc.errors import grpc_error
from evdb.scavenge.params import parse_scavenge_request

if TYPE_CHECKING:
    from evdb.services import GrpcServices

__all__ = ["GossipService", "OperationsService", "cluster_info"]

MemberInfo = gossip_pb2.MemberInfo
_STATES = MemberInfo.VNodeState
_STATE_NAMES = frozenset(_STATES.keys())
ScavengeResp = operations_pb2.ScavengeResp


def cluster_info(services: GrpcServices) -> gossip_pb2.ClusterInfo:
    """The node's view of the cluster (evdb's gossip members) in the gRPC gossip shape, with the
    addresses clients are told (AdvertiseHostToClientAs, evdb/cluster/advertising.py)."""
    if services.cluster is not None:
        members = [client_member(m) for m in services.cluster.members()]
    else:
        members = [
            {
                "instanceId": str(services.instance_id),
                "state": "Leader",
                "isAlive": True,
                "httpEndPointIp": services.addresses.client_endpoint[0],
                "httpEndPointPort": services.addresses.client_endpoint[1],
            }
        ]
    info = gossip_pb2.ClusterInfo()
    for member in members:
        state = member.get("state", "Unknown")
        try:
            instance_id = str(uuid.UUID(str(member.get("instanceId"))))
        except ValueError:
            instance_id = str(uuid.UUID(int=0))
        info.members.append(
            MemberInfo(
                instance_id=shared_pb2.UUID(string=instance_id),
                time_stamp=int(float(member.get("timeStamp", 0)) * 10_000_000),
                state=_STATES.Value(state) if state in _STATE_NAMES else _STATES.Unknown,
                is_alive=bool(member.get("isAlive")),
                http_end_point=gossip_pb2.EndPoint(
                    address=str(member.get("httpEndPointIp", "")),
                    port=int(member.get("httpEndPointPort", 0)),
                ),
            )
        )
    return info


class GossipService:
    def __init__(self, services: GrpcServices) -> None:
        self.services = services

    def __mapping__(self) -> dict[str, Handler]:
        return {
            "/event_store.client.gossip.Gossip/Read": Handler(
                self.read, Cardinality.UNARY_UNARY, shared_pb2.Empty, gossip_pb2.ClusterInfo
            )
        }

    async def read(self, stream: Stream) -> None:
        # anyone may ask; bad credentials are refused while this node may judge them (a sign-in lease)
        await call_context(self.services, stream, public=True)
        await stream.recv_message()
        await stream.send_message(cluster_info(self.services))


class OperationsService:
    def __init__(self, services: GrpcServices) -> None:
        self.services = services

    def __mapping__(self) -> dict[str, Handler]:
        prefix = "/event_store.client.operations.Operations/"
        empty = shared_pb2.Empty
        unary = Cardinality.UNARY_UNARY
        return {
            prefix + "StartScavenge": Handler(
                self.start_scavenge, unary, operations_pb2.StartScavengeReq, ScavengeResp
            ),
            prefix + "StopScavenge": Handler(
                self.stop_scavenge, unary, operations_pb2.StopScavengeReq, ScavengeResp
            ),
            prefix + "Shutdown": Handler(self.shutdown, unary, empty, empty),
            prefix + "MergeIndexes": Handler(self.merge_indexes, unary, empty, empty),
            prefix + "ResignNode": Handler(self.resign_node, unary, empty, empty),
            prefix + "SetNodePriority": Handler(
                self.set_node_priority, unary, operations_pb2.SetNodePriorityReq, empty
            ),
            prefix + "RestartPersistentSubscriptions": Handler(
                self.restart_persistent_subscriptions, unary, empty, empty
            ),
        }

    async def _begin(self, stream: Stream):
        ctx = await call_context(self.services, stream)
        require_ops(ctx.principal)
        request = await stream.recv_message()
        return request

    async def start_scavenge(self, stream: Stream) -> None:
        services = self.services
        request = await self._begin(stream)
        options = request.options
        services.logger.info(
            "Request scavenging because StartScavenge gRPC request has been received (threads %d).",
            options.thread_count,
        )
        try:
            # proto3 cannot tell an unset thread_count from 0: 0 is the default, 1 thread
            scavenge_request = parse_scavenge_request(
                threads=options.thread_count or None, start_from_chunk=options.start_from_chunk
            )
        except InvalidInput as exc:
            raise GRPCError(Status.INVALID_ARGUMENT, str(exc)) from None
        if options.start_from_chunk:
            services.logger.warning("startFromChunk is deprecated and ignored (it will be removed).")
        try:
            scavenge_id = await asyncio.to_thread(scavenge_service(services).start, scavenge_request)
            result = ScavengeResp.Started
        except ScavengeAlreadyRunning:
            scavenge_id = scavenge_service(services).current_id() or ""
            result = ScavengeResp.InProgress
        except EvdbError as exc:
            raise grpc_error(services, exc) from None
        await stream.send_message(ScavengeResp(scavenge_id=scavenge_id, scavenge_result=result))

    async def stop_scavenge(self, stream: Stream) -> None:
        services = self.services
        request = await self._begin(stream)
        scavenge_id = request.options.scavenge_id or "current"
        services.logger.info(
            "Stopping scavenge because StopScavenge gRPC request has been received for %s.", scavenge_id
        )
        try:
            stopped = await scavenge_service(services).stop_async(scavenge_id)
        except ScavengeNotFound:
            raise GRPCError(Status.NOT_FOUND, "Scavenge Id does not exist") from None
        await stream.send_message(ScavengeResp(scavenge_id=stopped, scavenge_result=ScavengeResp.Stopped))

    async def shutdown(self, stream: Stream) -> None:
        services = self.services
        await self._begin(stream)
        services.logger.info("Shutting down because Shutdown gRPC request has been received.")
        await stream.send_message(shared_pb2.Empty())
        asyncio.get_running_loop().call_soon(services.shutdown_requested.set)

    async def merge_indexes(self, stream: Stream) -> None:
        services = self.services
        await self._begin(stream)
        services.logger.info("Merging indexes because MergeIndexes gRPC request has been received.")
        await asyncio.to_thread(database(services).index.merge_indexes)
        await stream.send_message(shared_pb2.Empty())

    async def resign_node(self, stream: Stream) -> None:
        services = self.services
        await self._begin(stream)
        if services.cluster is None or not await services.cluster.resign():
            state = services.cluster.state if services.cluster is not None else "Unknown"
            services.logger.info("Resign request ignored: this node is not the leader (%s)", state)
        await stream.send_message(shared_pb2.Empty())

    async def set_node_priority(self, stream: Stream) -> None:
        services = self.services
        request = await self._begin(stream)
        priority = request.priority
        if not -1000 <= priority <= 1000:
            raise GRPCError(Status.INVALID_ARGUMENT, "The priority must be between -1000 and 1000.")
        if services.cluster is not None:
            services.cluster.priority = priority
        services.logger.info("Node priority set to %d", priority)
        await stream.send_message(shared_pb2.Empty())

    async def restart_persistent_subscriptions(self, stream: Stream) -> None:
        services = self.services
        await self._begin(stream)
        services.logger.info(
            "Restarting persistent subscriptions: RestartPersistentSubscriptions gRPC request."
        )
        try:
            await services.persistent.restart()
        except PersistentSubscriptionsNotReady:  # KurrentDB answers Empty either way
            services.logger.info("Persistent subscriptions cannot be restarted: they are not started here.")
        await stream.send_message(shared_pb2.Empty())
