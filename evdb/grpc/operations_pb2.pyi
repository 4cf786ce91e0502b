from kurrentdbclient.protos.v1 import shared_pb2 as _shared_pb2
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StartScavengeReq(_message.Message):
    __slots__ = ("options",)
    class Options(_message.Message):
        __slots__ = ("thread_count", "start_from_chunk")
        THREAD_COUNT_FIELD_NUMBER: _ClassVar[int]
        START_FROM_CHUNK_FIELD_NUMBER: _ClassVar[int]
        thread_count: int
        start_from_chunk: int
        def __init__(self, thread_count: _Optional[int] = ..., start_from_chunk: _Optional[int] = ...) -> None: ...
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    options: StartScavengeReq.Options
    def __init__(self, options: _Optional[_Union[StartScavengeReq.Options, _Mapping]] = ...) -> None: ...

class StopScavengeReq(_message.Message):
    __slots__ = ("options",)
    class Options(_message.Message):
        __slots__ = ("scavenge_id",)
        SCAVENGE_ID_FIELD_NUMBER: _ClassVar[int]
        scavenge_id: str
        def __init__(self, scavenge_id: _Optional[str] = ...) -> None: ...
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    options: StopScavengeReq.Options
    def __init__(self, options: _Optional[_Union[StopScavengeReq.Options, _Mapping]] = ...) -> None: ...

class ScavengeResp(_message.Message):
    __slots__ = ("scavenge_id", "scavenge_result")
    class ScavengeResult(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        Started: _ClassVar[ScavengeResp.ScavengeResult]
        InProgress: _ClassVar[ScavengeResp.ScavengeResult]
        Stopped: _ClassVar[ScavengeResp.ScavengeResult]
    Started: ScavengeResp.ScavengeResult
    InProgress: ScavengeResp.ScavengeResult
    Stopped: ScavengeResp.ScavengeResult
    SCAVENGE_ID_FIELD_NUMBER: _ClassVar[int]
    SCAVENGE_RESULT_FIELD_NUMBER: _ClassVar[int]
    scavenge_id: str
    scavenge_result: ScavengeResp.ScavengeResult
    def __init__(self, scavenge_id: _Optional[str] = ..., scavenge_result: _Optional[_Union[ScavengeResp.ScavengeResult, str]] = ...) -> None: ...

class SetNodePriorityReq(_message.Message):
    __slots__ = ("priority",)
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    priority: int
    def __init__(self, priority: _Optional[int] = ...) -> None: ...
