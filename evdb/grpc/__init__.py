"""KurrentDB's gRPC API on the node's HTTP port, for kurrentdbclient and the other official clients.

    dispatch.py     one port, two protocols (ALPN / HTTP/2 preface); GrpcServer; DispatchSite
    common.py       callers, access rules, not-leader answers, error shapes, conversions
    streams.py      Streams: Read (and subscriptions), Append, BatchAppend, Delete, Tombstone
    cluster.py      Gossip, PersistentSubscriptions.List, Operations
    operations.proto / operations_pb2.py   the Operations service (build_protos.py regenerates it)

The message classes are kurrentdbclient's own (``kurrentdbclient.protos``); see docs/grpc.md.
"""
