"""KurrentDB's ``event_store.client.server_features.ServerFeatures`` service: GetSupportedMethods.

KurrentDB's clients ask it first, to learn the server's version and which calls it serves; the
Node.js client chooses BatchAppend over the old unary Append, persistent subscriptions to ``$all``,
the gRPC persistent-subscription calls over HTTP ones, ... from the answer. As KurrentDB builds it
from its endpoints, evdb builds it from the methods its gRPC server really maps (every service whose
name contains ``client``), names lower-cased, with KurrentDB's features: ``stream`` and ``all`` for
each PersistentSubscriptions method, ``position`` and ``events`` for Streams reads,
``deadline_duration`` for BatchAppend, ``track_emitted_streams`` for Projections.Create. The version
is evdb's KurrentDB version (evdb/version.py) in KurrentDB's form: its first three numbers.

kurrentdbclient (Python) ships no module for this service and KurrentDB's ``serverfeatures.proto``
has two small messages, so they are built here from their descriptor (in a pool of their own: no
symbol can clash with a client's module loaded in the same process)::

    package event_store.client.server_features;
    service ServerFeatures { rpc GetSupportedMethods (event_store.client.Empty) returns (SupportedMethods); }
    message SupportedMethods { repeated SupportedMethod methods = 1; string event_store_server_version = 2; }
    message SupportedMethod { string method_name = 1; string service_name = 2; repeated string features = 3; }
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from grpclib.const import Cardinality, Handler
from grpclib.server import Stream
from kurrentdbclient.protos.v1 import shared_pb2

from evdb.version import VERSION

__all__ = ["SERVICE", "ServerFeaturesService", "SupportedMethods", "server_version", "supported_methods"]

SERVICE = "event_store.client.server_features.ServerFeatures"
_FILE = "evdb/grpc/serverfeatures.proto"


def _message_classes() -> tuple[Any, Any]:
    package = "event_store.client.server_features"
    proto = descriptor_pb2.FileDescriptorProto(name=_FILE, package=package, syntax="proto3")
    field = descriptor_pb2.FieldDescriptorProto
    one, many, text, message = (
        field.LABEL_OPTIONAL,
        field.LABEL_REPEATED,
        field.TYPE_STRING,
        field.TYPE_MESSAGE,
    )
    shapes = {
        "SupportedMethods": [
            ("methods", 1, many, message, f".{package}.SupportedMethod", "methods"),
            ("event_store_server_version", 2, one, text, "", "eventStoreServerVersion"),
        ],
        "SupportedMethod": [
            ("method_name", 1, one, text, "", "methodName"),
            ("service_name", 2, one, text, "", "serviceName"),
            ("features", 3, many, text, "", "features"),
        ],
    }
    for name, fields in shapes.items():
        described = proto.message_type.add(name=name)
        for field_name, number, label, kind, type_name, json_name in fields:
            added = described.field.add(
                name=field_name, number=number, label=label, type=kind, json_name=json_name
            )
            if type_name:
                added.type_name = type_name
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return (
        message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.SupportedMethods")),
        message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.SupportedMethod")),
    )


#: the message classes (protobuf's generated kind, made at import)
SupportedMethods, SupportedMethod = _message_classes()


def server_version(version: str = VERSION) -> str:
    """The version KurrentDB reports: its first three numbers (``24.10.0`` of ``24.10.0-evdb.0.1.0``)."""
    match = re.match(r"(\d+)\.(\d+)\.(\d+)", version)
    if match is None:
        raise ValueError(f"evdb/version.py VERSION {version!r} does not start with MAJOR.MINOR.PATCH")
    return ".".join(match.groups())


def _features(service: str, method: str) -> list[str]:
    """KurrentDB's features of one method (its ServerFeatures.cs rules)."""
    if "PersistentSubscriptions" in service:
        return ["stream", "all"]
    if "Streams" in service and "Read" in method:
        return ["position", "events"]
    if "Streams" in service and "BatchAppend" in method:
        return ["deadline_duration"]
    if "Projections" in service and "Create" in method:
        return ["track_emitted_streams"]
    return []


def supported_methods(paths: Iterable[str], version: str = VERSION) -> Any:
    """The answer for gRPC method paths (``/package.Service/Method``): those of client services, each
    once, in order, with KurrentDB's features."""
    answer = SupportedMethods(event_store_server_version=server_version(version))
    seen: set[tuple[str, str]] = set()
    for path in paths:
        _, service, method = path.split("/")
        if "client" not in service:  # KurrentDB lists its client services only (not cluster ones)
            continue
        key = (service.lower(), method.lower())
        if key in seen:
            continue
        seen.add(key)
        answer.methods.append(
            SupportedMethod(method_name=key[1], service_name=key[0], features=_features(service, method))
        )
    return answer


class ServerFeaturesService:
    """Answers GetSupportedMethods with the methods of ``services`` (the gRPC server's other services,
    grpclib handlers) and of this one."""

    def __init__(self, services: Iterable[Any], version: str = VERSION) -> None:
        paths = [path for service in services for path in service.__mapping__()]
        paths.extend(self.__mapping__())
        self._answer = supported_methods(paths, version)

    def __mapping__(self) -> dict[str, Handler]:
        return {
            f"/{SERVICE}/GetSupportedMethods": Handler(
                self.get_supported_methods, Cardinality.UNARY_UNARY, shared_pb2.Empty, SupportedMethods
            )
        }

    async def get_supported_methods(self, stream: Stream) -> None:
        await stream.recv_message()
        await stream.send_message(self._answer)
