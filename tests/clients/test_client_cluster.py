"""kurrentdbclient against a 3-node evdb cluster (real processes, TLS): gossip discovery finds the
leader; a follower answers "not leader" with the leader's address when the client requires the
leader, and forwards the write otherwise."""

from __future__ import annotations

import base64
import time
import uuid
from urllib.parse import urlsplit

import grpc
import pytest
from kurrentdbclient import KurrentDBClient, NewEvent, StreamState
from kurrentdbclient.exceptions import NodeIsNotLeaderError
from kurrentdbclient.protos.v1 import (
    persistent_pb2,
    persistent_pb2_grpc,
    shared_pb2,
    streams_pb2,
    streams_pb2_grpc,
)

from evdb.cluster.launcher import LocalCluster

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    local = LocalCluster(tmp_path_factory.mktemp("grpc-cluster"))
    local.up(nodes=3, chunk_size="256KiB", timeout=60, log=lambda *_: None)
    try:
        yield local
    finally:
        local.down(timeout=10, log=lambda *_: None)


def addresses(local: LocalCluster) -> tuple[str, list[str]]:
    """(leader host:port, follower host:ports), once the followers have caught up."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        rows = local.status()
        leaders = [r for r in rows if r["state"] == "Leader"]
        followers = [r for r in rows if r["state"] == "Follower"]
        if len(leaders) == 1 and len(followers) == 2:
            return urlsplit(leaders[0]["url"]).netloc, [urlsplit(r["url"]).netloc for r in followers]
        time.sleep(0.1)
    raise AssertionError(f"no leader with two followers: {local.status()}")


def uri(local: LocalCluster, hosts: str, query: str = "") -> str:
    info = local.info()
    return f"kurrentdb://{info['user']}:{info['password']}@{hosts}?tlsCaFile={info['ca']}{query}"


def ev(kind: str = "Ev") -> NewEvent:
    return NewEvent(type=kind, data=b"{}")


def test_discovery_not_leader_and_forwarding(cluster):
    leader, followers = addresses(cluster)
    stream = f"c-{uuid.uuid4().hex[:12]}"

    # several hosts: gossip discovery connects to the one leader
    with KurrentDBClient(uri(cluster, ",".join([*followers, leader]))) as client:
        assert client.connection_target == leader
        client.append_to_stream(stream, events=[ev("A")], current_version=StreamState.NO_STREAM)
        members = client.read_gossip()
        assert sorted(m.state for m in members).count("NODE_STATE_LEADER") == 1

    # one follower, leader required (the default): not leader, with the leader's address
    with KurrentDBClient(uri(cluster, followers[0])) as client, pytest.raises(NodeIsNotLeaderError) as info:
        client.append_to_stream(stream, events=[ev("B")], current_version=0)
    assert f"{info.value.host}:{info.value.port}" == leader

    # a write that does not require the leader is forwarded by the follower (kurrentdbclient always
    # requires the leader for writes; other clients may not), then read back there
    info_ = cluster.info()
    token = base64.b64encode(f"{info_['user']}:{info_['password']}".encode()).decode()
    with open(info_["ca"], "rb") as f:
        channel = grpc.secure_channel(followers[0], grpc.ssl_channel_credentials(f.read()))
    try:
        options = streams_pb2.AppendReq.Options(
            stream_identifier=shared_pb2.StreamIdentifier(stream_name=stream.encode()), revision=0
        )
        message = streams_pb2.AppendReq.ProposedMessage(
            id=shared_pb2.UUID(string=str(uuid.uuid4())),
            metadata={"type": "C", "content-type": "application/json"},
            data=b"{}",
        )
        reply = streams_pb2_grpc.StreamsStub(channel).Append(
            iter([streams_pb2.AppendReq(options=options), streams_pb2.AppendReq(proposed_message=message)]),
            metadata=[("authorization", f"Basic {token}"), ("requires-leader", "false")],
            timeout=20,
        )
        assert reply.WhichOneof("result") == "success" and reply.success.current_revision == 1

        # leader required: KurrentDB's not-leader trailers, which the Node.js client reads (NotLeaderError)
        with pytest.raises(grpc.RpcError) as refused:
            streams_pb2_grpc.StreamsStub(channel).Append(
                iter(
                    [streams_pb2.AppendReq(options=options), streams_pb2.AppendReq(proposed_message=message)]
                ),
                metadata=[("authorization", f"Basic {token}"), ("requires-leader", "true")],
                timeout=20,
            )
        assert refused.value.code() == grpc.StatusCode.NOT_FOUND  # KurrentDB's RpcExceptions.LeaderInfo
        assert refused.value.details() == "Leader info available"
        trailers = dict(refused.value.trailing_metadata() or ())
        assert trailers["exception"] == "not-leader"
        assert f"{trailers['leader-endpoint-host']}:{trailers['leader-endpoint-port']}" == leader
    finally:
        channel.close()
    with KurrentDBClient(uri(cluster, followers[0], "&nodePreference=follower")) as client:
        assert [e.type for e in client.get_stream(stream)] == ["A", "C"]  # served by the follower


def test_persistent_subscription_calls_on_a_follower_name_the_leader(cluster):
    """KurrentDB's node controller denies persistent-subscription Create and Read (Connect) on any
    node but the leader with the leader's endpoint, whether or not the client requires the leader
    (the Node.js client reconnects there); GetInfo is not one of them: "Server Is Not Ready"."""
    leader, followers = addresses(cluster)
    info_ = cluster.info()
    token = base64.b64encode(f"{info_['user']}:{info_['password']}".encode()).decode()
    with open(info_["ca"], "rb") as f:
        channel = grpc.secure_channel(followers[0], grpc.ssl_channel_credentials(f.read()))
    stub = persistent_pb2_grpc.PersistentSubscriptionsStub(channel)
    options = persistent_pb2.CreateReq.Options(group_name="g")
    options.stream.stream_identifier.stream_name = b"ps-on-follower"
    options.stream.start.CopyFrom(shared_pb2.Empty())
    options.settings.consumer_strategy = "RoundRobin"
    read = persistent_pb2.ReadReq.Options(group_name="g", buffer_size=10)
    read.stream_identifier.stream_name = b"ps-on-follower"
    read.uuid_option.string.CopyFrom(shared_pb2.Empty())
    try:
        for requires in ("false", "true"):
            metadata = [("authorization", f"Basic {token}"), ("requires-leader", requires)]
            calls = {
                "Create": lambda md=metadata: stub.Create(
                    persistent_pb2.CreateReq(options=options), metadata=md, timeout=20
                ),
                "Read": lambda md=metadata: list(
                    stub.Read(iter([persistent_pb2.ReadReq(options=read)]), metadata=md, timeout=20)
                ),
            }
            for call, run in calls.items():
                with pytest.raises(grpc.RpcError) as refused:
                    run()
                assert refused.value.code() == grpc.StatusCode.NOT_FOUND, (call, requires)
                assert refused.value.details() == "Leader info available", (call, requires)
                trailers = dict(refused.value.trailing_metadata() or ())
                assert trailers["exception"] == "not-leader"
                assert f"{trailers['leader-endpoint-host']}:{trailers['leader-endpoint-port']}" == leader
    finally:
        channel.close()
