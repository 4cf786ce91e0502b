"""KurrentDB's ``event_store.client.projections.Projections`` service, for the system projections.

Statistics, Enable, Disable (with ``write_checkpoint``: KurrentDB's Disable; without: its Abort),
Reset, State and Result answer as KurrentDB does for its system projections; RestartSubsystem restarts
them. evdb has no user-defined (JavaScript) projections: Create and Update answer UNIMPLEMENTED with
the reason (kurrentdbclient raises it as a ``GrpcError`` carrying that text), Delete of a system
projection FAILED_PRECONDITION with KurrentDB's "We currently don't allow for the deletion of System
Projections.", and any other name NOT_FOUND. The service is served only when the node runs projections
(``RunProjections`` System or All); without, KurrentDB serves none and clients get "Method not found".

Access as KurrentDB's legacy policy: every call needs an authenticated caller (an insecure node lets
everyone in); Enable, Disable, Reset, Delete and RestartSubsystem of these continuous projections need
``$admins`` or ``$ops``.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from google.protobuf import json_format, struct_pb2
from grpclib import GRPCError
from grpclib.const import Cardinality, Handler, Status
from grpclib.server import Stream
from kurrentdbclient.protos.v1 import projections_pb2, shared_pb2

from evdb.errors import EvdbError, UserProjectionsNotSupported
from evdb.grpc.access import check_leader
from evdb.grpc.context import CallContext, call_context
from evdb.grpc.errors import grpc_error

if TYPE_CHECKING:
    from evdb.projections import SystemProjections
    from evdb.services import GrpcServices

__all__ = ["ProjectionsService"]

_PREFIX = "/event_store.client.projections.Projections/"


def _value(state: str) -> struct_pb2.Value:
    """A state as KurrentDB answers it: an empty state is an empty object, else its JSON."""
    value = struct_pb2.Value()
    if not state:
        value.struct_value.SetInParent()
    else:
        json_format.Parse(state, value)
    return value


class ProjectionsService:
    """The Projections service of one node (a grpclib handler: see ``__mapping__``)."""

    def __init__(self, services: GrpcServices) -> None:
        self.services = services

    def __mapping__(self) -> dict[str, Handler]:
        p = projections_pb2

        def unary(method: Any, request: Any, reply: Any) -> Handler:
            return Handler(method, Cardinality.UNARY_UNARY, request, reply)

        return {
            _PREFIX + "Create": unary(self.create, p.CreateReq, p.CreateResp),
            _PREFIX + "Update": unary(self.update, p.UpdateReq, p.UpdateResp),
            _PREFIX + "Delete": unary(self.delete, p.DeleteReq, p.DeleteResp),
            _PREFIX + "Statistics": Handler(
                self.statistics, Cardinality.UNARY_STREAM, p.StatisticsReq, p.StatisticsResp
            ),
            _PREFIX + "Disable": unary(self.disable, p.DisableReq, p.DisableResp),
            _PREFIX + "Enable": unary(self.enable, p.EnableReq, p.EnableResp),
            _PREFIX + "Reset": unary(self.reset, p.ResetReq, p.ResetResp),
            _PREFIX + "State": unary(self.state, p.StateReq, p.StateResp),
            _PREFIX + "Result": unary(self.result, p.ResultReq, p.ResultResp),
            _PREFIX + "RestartSubsystem": unary(self.restart, shared_pb2.Empty, shared_pb2.Empty),
        }

    # -- the caller ------------------------------------------------------------------------------------
    async def _begin(self, stream: Stream, *, operator: bool) -> tuple[Any, SystemProjections]:
        services = self.services
        ctx: CallContext = await call_context(services, stream)
        request = await stream.recv_message()
        assert request is not None
        if not ctx.principal.is_authenticated:
            raise GRPCError(Status.UNAUTHENTICATED, "Authentication is required.")
        if operator and not (ctx.principal.is_admin or ctx.principal.is_ops):
            raise GRPCError(Status.PERMISSION_DENIED, "Access denied.")
        check_leader(services, ctx)
        projections = services.projections
        if projections is None:  # not served then (see evdb/grpc/dispatch.py): a stale connection
            raise GRPCError(Status.UNIMPLEMENTED, "Method not found")
        return request, projections

    def _error(self, exc: EvdbError) -> GRPCError:
        return grpc_error(self.services, exc)

    # -- calls ---------------------------------------------------------------------------------------------
    async def create(self, stream: Stream) -> None:
        request, _ = await self._begin(stream, operator=False)
        options = request.options
        mode = options.WhichOneof("mode")
        name = getattr(options, mode).name if mode in ("continuous", "transient") else ""
        raise self._error(UserProjectionsNotSupported(name))

    async def update(self, stream: Stream) -> None:
        request, _ = await self._begin(stream, operator=False)
        raise self._error(UserProjectionsNotSupported(request.options.name))

    async def delete(self, stream: Stream) -> None:
        request, projections = await self._begin(stream, operator=True)
        try:
            projections.delete(request.options.name)
        except EvdbError as exc:
            raise self._error(exc) from None

    async def statistics(self, stream: Stream) -> None:
        request, projections = await self._begin(stream, operator=False)
        options = request.options
        mode = options.WhichOneof("mode")
        try:
            if mode == "name":
                found = projections.statistics(options.name)
            elif mode in ("transient", "one_time"):
                found = []  # the system projections are continuous
            else:
                found = projections.statistics()
        except EvdbError as exc:
            raise self._error(exc) from None
        for details in found:
            await stream.send_message(
                projections_pb2.StatisticsResp(details=projections_pb2.StatisticsResp.Details(**details))
            )

    async def enable(self, stream: Stream) -> None:
        request, projections = await self._begin(stream, operator=True)
        await self._run(projections.enable(request.options.name))
        await stream.send_message(projections_pb2.EnableResp())

    async def disable(self, stream: Stream) -> None:
        request, projections = await self._begin(stream, operator=True)
        options = request.options
        await self._run(projections.disable(options.name, write_checkpoint=options.write_checkpoint))
        await stream.send_message(projections_pb2.DisableResp())

    async def reset(self, stream: Stream) -> None:
        request, projections = await self._begin(stream, operator=True)
        await self._run(projections.reset(request.options.name))
        await stream.send_message(projections_pb2.ResetResp())

    async def state(self, stream: Stream) -> None:
        request, projections = await self._begin(stream, operator=False)
        try:
            state = projections.state(request.options.name)
        except EvdbError as exc:
            raise self._error(exc) from None
        await stream.send_message(projections_pb2.StateResp(state=_value(state)))

    async def result(self, stream: Stream) -> None:
        request, projections = await self._begin(stream, operator=False)
        try:
            state = projections.state(request.options.name)
        except EvdbError as exc:
            raise self._error(exc) from None
        await stream.send_message(projections_pb2.ResultResp(result=_value(state)))

    async def restart(self, stream: Stream) -> None:
        _, projections = await self._begin(stream, operator=True)
        await self._run(projections.restart())
        await stream.send_message(shared_pb2.Empty())

    async def _run(self, call: Any) -> None:
        try:
            await call
        except asyncio.CancelledError:
            raise
        except EvdbError as exc:
            raise self._error(exc) from None
