"""One database node: the database, its HTTP server, users, metrics, statistics and logs.

``evdb node`` runs one in the foreground; tests start several inside their own event loop::

    async with Node(options) as node:
        ...  # node.http_url
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import os
import re
import socket
import ssl
import uuid
from dataclasses import replace
from typing import Any, TypedDict

from aiohttp import web

from evdb.archive.archiver import ArchiverService, start_archiver
from evdb.archive.reads import ArchiveReads
from evdb.archive.retention import Retention
from evdb.archive.settings import starting_archive
from evdb.auth import HashCost, UserStore
from evdb.autoscavenge.service import AutoScavengeService, MembershipView, create_auto_scavenge
from evdb.clock import Clock, SystemClock
from evdb.cluster import ClusterService
from evdb.cluster.peers import PeerClient, peer_name
from evdb.cluster.replica import ChunkLogReplication
from evdb.cluster.transport import HttpTransport, ListenerLimits
from evdb.database import Database, DatabaseConfig
from evdb.grpc.dispatch import ALPN, DispatchSite, GrpcServer
from evdb.http.app import build_app
from evdb.http.heads import ServerLog
from evdb.licensing import License, load_license
from evdb.licensing.loading import check_license
from evdb.logs import close_node_logging, configure_node_logging
from evdb.metrics import NodeMetrics, NodeSources
from evdb.metrics_config import load_metrics_config
from evdb.node.cluster_host import NodeClusterHost
from evdb.options import Options, deprecation_warnings, effective_configuration
from evdb.persistent import DatabaseStore, PersistentSubscriptionService
from evdb.projections import SystemProjections
from evdb.redaction import start_redaction_service
from evdb.redaction.service import RedactionService
from evdb.scavenge.service import ScavengeService
from evdb.services import ApiServices, NodeAddresses, OpenDatabase
from evdb.streams import NewEvent
from evdb.subscriptions import CommitNotifier
from evdb.tls.loading import NodeTls
from evdb.tls.reload import ConfigReloader, NodeSettings, ReloadRecord, SwappableServerContext
from evdb.version import DB_VERSION, VERSION

__all__ = ["DB_VERSION", "VERSION", "Node"]


_startup_heap_frozen = False


def freeze_startup_heap() -> None:
    """(once per process) Collect, then move every object alive now into the collector's permanent
    generation: a node's start-up heap (modules, options, TLS, logging; about 63,000 objects) is never
    scanned again. Every full collection scanned it: 40-85 ms pauses, one about every 5 s under load on
    each node, the followers' at the same moments (they do the same work), which held a cluster's
    answers until one follower came back (issue 24, docs/performance-lab-notes.md "Replication: the tail").
    Called before the database opens, so that nothing a node drops later (a database reopened, chunks
    switched out) is frozen: objects made after this are collected as before."""
    global _startup_heap_frozen
    if _startup_heap_frozen:
        return
    _startup_heap_frozen = True
    gc.collect()
    gc.freeze()


class NodeFacts(TypedDict):
    """The keywords every set of services the node builds shares (ApiServices, NodeClusterHost)."""

    name: str
    instance_id: uuid.UUID
    logger: logging.Logger
    clock: Clock
    settings: NodeSettings
    addresses: NodeAddresses
    database: OpenDatabase


def default_node_name(options: Options, instance_id: uuid.UUID) -> str:
    """A node's name when none is given: its log folder's (evdb.logs). Its address, as KurrentDB's
    ``<ip>-<port>-cluster-node`` with the address's dots and colons as dashes (the name is a logger's
    too: evdb.logs allows letters, digits, '-' and '_'), the same at every start, so one node's logs
    stay in one folder and ``/admin/logs`` lists them across restarts; a node on a port picked at start
    (HttpPort 0) has no such address yet and gets a name of its own."""
    if options.http_port:
        host = re.sub(r"[^A-Za-z0-9]+", "-", options.http_ip).strip("-") or "any"
        return f"{host}-{options.http_port}-cluster-node"
    return f"node-{instance_id.hex[:8]}"


class Node:
    """A single evdb node. Start with ``await node.start()`` or ``async with``."""

    def __init__(self, options: Options, *, clock: Clock | None = None, name: str | None = None) -> None:
        #: the options and certificates in effect; a reload replaces them (evdb/tls/reload.py)
        self.settings = NodeSettings(options)
        self.clock = clock or SystemClock()
        self.instance_id = uuid.uuid4()
        self.name = name or default_node_name(options, self.instance_id)
        self.logger: logging.Logger = logging.getLogger(f"evdb.node.{self.name}")
        #: the database open now, its scavenge service, users and commit notifier (reopened after a truncation)
        self.opened = OpenDatabase()
        self.cluster: ClusterService | None = None
        self.peer_client: PeerClient | None = None
        self._replica: ChunkLogReplication | None = None
        self.license: License | None = None
        self.redaction: RedactionService | None = None  # the unix-socket redaction service (EnableUnixSocket)
        self.archiver: ArchiverService | None = (
            None  # the archiver node's uploads (Archiver: true; evdb/archive)
        )
        #: the reads of chunks this node keeps in the archive only (Archive: Enabled; evdb/archive/reads.py)
        self.archive_reads: ArchiveReads | None = None
        self.auto_scavenge: AutoScavengeService | None = None
        #: the database of the node (on disk or in memory), decided at start
        self.db_config: DatabaseConfig | None = None
        #: the system projections (evdb/projections; RunProjections System or All), run by the leader
        self.projections: SystemProjections | None = None
        #: persistent subscriptions (evdb/persistent), served while this node is the leader
        self.persistent = PersistentSubscriptionService(
            store=DatabaseStore(self.open_db, self.clock.ticks),
            clock=self.clock,
            is_leader=lambda: self.cluster is not None and self.cluster.is_leader,
            follow_commits=lambda position: self.notifier.wait_beyond(position),
            logger=self.logger,
        )
        self.statuses: dict[str, tuple[str, float]] = {}
        self.metrics = NodeMetrics(
            NodeSources(
                lambda: self.db,
                lambda: self.scavenge,
                lambda: self.statuses,
                cluster=lambda: self.cluster,
                persistent=lambda: self.persistent,
                projections=lambda: self.projections,
            ),
            load_metrics_config(options.config),
            clock=self.clock,
        )
        self.server_tls: SwappableServerContext | None = None  # the HTTP port's (evdb/tls/reload.py)
        # POST /admin/reloadconfig and SIGHUP
        self.reloader = ConfigReloader(
            self.settings, clock=self.clock, logger=lambda: self.logger, listeners=self._tls_listeners
        )
        self.grpc: GrpcServer | None = None  # the gRPC server sharing the HTTP port (evdb/grpc/dispatch.py)
        self._runner: web.AppRunner | None = None
        self._sites: list[web.BaseSite] = []
        self._tasks: list[asyncio.Task] = []
        self.addresses = NodeAddresses(self.settings, options.http_ip, options.http_port)
        self.shutdown_requested = asyncio.Event()
        self.started_at = self.clock.time()

    # -- settings --------------------------------------------------------------------------------------
    @property
    def options(self) -> Options:
        return self.settings.options

    @property
    def tls(self) -> NodeTls | None:
        """The node's certificates in use, None without TLS."""
        return self.settings.tls

    # -- the database open now (evdb/services.py OpenDatabase) ---------------------------------------
    @property
    def db(self) -> Database | None:
        return self.opened.db

    @db.setter
    def db(self, db: Database | None) -> None:
        self.opened.db = db

    @property
    def users(self) -> UserStore:
        return self.opened.users

    @property
    def notifier(self) -> CommitNotifier:
        return self.opened.notifier

    @property
    def scavenge(self) -> ScavengeService | None:
        return self.opened.scavenge

    def _tls_listeners(self) -> list[SwappableServerContext]:
        """The swappable ssl contexts a certificate reload swaps: the HTTP port, the node-to-node port."""
        listeners = [self.server_tls]
        if self.cluster is not None:
            listeners.append(self.cluster.listener_tls)
        return [listener for listener in listeners if listener is not None]

    def _peer_transport(self) -> HttpTransport:
        """The node-to-node listener and calls; the certificates, trusted roots and the common name peers
        must carry are read from the node's settings at each use, so a reload reaches them."""
        assert self.peer_client is not None
        o = self.options
        return HttpTransport(
            host=o.replication_ip or self.host,
            port=o.replication_port,
            settings=self.settings,
            clock=self.clock,
            logger=self.logger,
            client=self.peer_client,
            # the HTTP port's connection options hold on the node-to-node listener too
            limits=ListenerLimits(
                o.http_max_connections,
                float(o.http_request_head_timeout),
                float(o.http_keep_alive_timeout),
            ),
        )

    def _facts(self) -> NodeFacts:
        """What every set of services is given of this node: who it is, its log and clock, its settings
        and addresses (read at use), the database open now."""
        return NodeFacts(
            name=self.name,
            instance_id=self.instance_id,
            logger=self.logger,
            clock=self.clock,
            settings=self.settings,
            addresses=self.addresses,
            database=self.opened,
        )

    def _cluster_host(self) -> NodeClusterHost:
        """What the cluster service is given of this node (once the HTTP port is bound)."""
        return NodeClusterHost(
            **self._facts(),
            replication_log=self.replication_log,
            on_became_leader=self.on_became_leader,
            truncate_and_reopen=self.truncate_and_reopen,
        )

    # -- addresses -------------------------------------------------------------------------------------
    @property
    def host(self) -> str:
        return self.addresses.host

    @property
    def port(self) -> int:
        return self.addresses.port

    @property
    def http_url(self) -> str:
        return self.addresses.http_url

    def set_status(self, name: str, status: str) -> None:
        self.statuses[name] = (status, self.clock.time())

    # -- lifecycle -------------------------------------------------------------------------------------
    async def __aenter__(self) -> Node:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def _configure_logging(self) -> None:
        o = self.options
        self.logger = configure_node_logging(
            node_name=self.name,
            log_dir=o.log,
            level=o.log_level,
            console_format=o.log_console_format,
        )

    def _load_tls(self) -> ssl.SSLContext | None:
        o = self.options
        if o.insecure:
            self.logger.warning("INSECURE MODE: TLS is off and the HTTP API is served in plain text.")
            return None
        from evdb.tls.loading import load_node_tls

        cert, key, roots = (
            o.certificate_file,
            o.certificate_private_key_file,
            o.trusted_root_certificates_path,
        )
        if o.dev and not cert:
            from evdb.tls.certs import generate_dev_certificates

            folder = os.path.join(os.path.dirname(os.path.abspath(o.db)) if o.db else ".", "dev-certs")
            dev = generate_dev_certificates(
                folder,
                ip_addresses=["127.0.0.1", "::1"],
                dns_names=["localhost"],
                common_name=o.certificate_reserved_node_common_name,
            )
            cert, key, roots = str(dev.cert_path), str(dev.key_path), str(dev.ca_path)
            self.logger.warning("DEV MODE: using throw-away certificates generated in %s", folder)
        tls = self.settings.tls = load_node_tls(cert, key, roots)
        self.logger.info(
            "Loaded the node certificate %s (issuer %s, expires %s)", tls.subject, tls.issuer, tls.not_after
        )
        self.reloader.certificate_loaded_at = self.clock.time()
        # new connections take the certificate in use at their handshake (reloads swap it)
        self.server_tls = SwappableServerContext(tls, require_client_cert=False, alpn_protocols=ALPN)
        return self.server_tls.context

    def _admit_sign_ins(self) -> None:
        """A cluster member judges credentials only under a sign-in lease (evdb/cluster/lease.py)."""
        o = self.options
        if self.cluster is not None and (o.cluster_size > 1 or o.read_only_replica):
            self.users.admit_with(self.cluster)

    async def _open_database(self) -> None:
        """Open the database and the parts built on it (also after a truncation, see below)."""
        o = self.options
        assert self.db_config is not None
        db = await asyncio.to_thread(Database.open, self.db_config, clock=self.clock, logger=self.logger)
        if self.cluster is not None:  # reopened: hooked into the cluster before any request sees it
            self.cluster.attach_database(db)
        db.observer = self.metrics.observer
        opened = self.opened
        opened.db = db
        opened.notifier = CommitNotifier(db)
        opened.users = UserStore(db, hash_cost=HashCost(self.options.password_hash_cost))
        if self.cluster is not None:
            self._admit_sign_ins()
        scavenge = opened.scavenge = ScavengeService(
            db,
            state_path=ScavengeService.state_path_for(self.db_config.resolved_index_dir),
            logger=self.logger,
            node_endpoint=self.addresses.endpoint,
            merging=not o.disable_scavenge_merging,
            auto_pacing=not o.disable_scavenge_auto_pacing,
            unsafe_ignore_hard_delete=o.unsafe_ignore_hard_delete,
            hash_users_cache_capacity=o.scavenge_hash_users_cache_capacity,
            history_max_age_days=o.scavenge_history_max_age,
            page_size_kib=o.scavenge_backend_page_size // 1024,  # the option is in bytes, as KurrentDB
            cache_size_bytes=o.scavenge_backend_cache_size,
            set_status=lambda status: self.set_status("Scavenge", status),
            clock=self.clock,
            retention=self._retention(),
        )
        await asyncio.to_thread(scavenge.mark_interrupted)

    def _retention(self) -> Retention | None:
        """The archive's retention policy, which scavenges apply (Archive: Enabled)."""
        settings = self.archive_settings
        if self.archive_reads is None or settings is None:
            return None
        assert settings.retain_days is not None and settings.retain_logical_bytes is not None
        return Retention(
            self.archive_reads,
            days=settings.retain_days,
            logical_bytes=settings.retain_logical_bytes,
            clock=self.clock,
            logger=self.logger,
        )

    async def _close_database(self) -> None:
        opened = self.opened
        if opened.scavenge is not None:
            await asyncio.to_thread(opened.scavenge.close)
            opened.scavenge = None
        if opened.db is not None:
            opened.notifier.close()
            await asyncio.to_thread(opened.db.close)
            opened.db = None

    async def truncate_and_reopen(self, position: int) -> None:
        """A follower whose log went further than the new leader's: cut it at ``position`` (through
        ``truncate.chk``, as at a restart), re-index, and carry on following."""
        self.logger.warning(
            "Truncating the log to position %d (it diverged from the leader's) and reopening the database",
            position,
        )
        db = self.open_db()
        if self.cluster is not None:
            await self.cluster.detach_database()
        self.opened.generation += 1  # requests that began before see their failure as a 503, not a 500
        await asyncio.to_thread(db.truncate_on_next_open, position)
        await self._close_database()
        await self._open_database()

    def open_db(self) -> Database:
        """The database open now; DatabaseReopening while a follower reopens it (HTTP 503, gRPC
        UNAVAILABLE: every surface asks here)."""
        return self.opened.open_db()

    def open_scavenge(self) -> ScavengeService:
        """The scavenge service of the database open now (it lives as long as the database)."""
        return self.opened.open_scavenge()

    def replication_log(self) -> ChunkLogReplication:
        """The replication side of the database open now: what the cluster reads for followers and
        writes for the leader (evdb/cluster/replica.py)."""
        db = self.open_db()
        if self._replica is None or self._replica.db is not db:
            self._replica = ChunkLogReplication(db)
        return self._replica

    async def on_became_leader(self) -> None:
        """Called by the cluster when this node takes office: create the default users if missing."""
        await asyncio.to_thread(self.users.ensure_defaults)
        await self.persistent.leadership_changed()
        if self.projections is not None:
            self.projections.wake()

    async def start(self) -> None:
        o = self.options
        self._configure_logging()
        self.logger.info("evdb %s starting (instance %s, pid %d)", VERSION, self.instance_id, os.getpid())
        for name, value, source in effective_configuration(o):
            if source != "default":
                self.logger.info("Option %s = %s (from %s)", name, value, source)
        for warning in [*deprecation_warnings(o), *o.environment_warnings]:
            self.logger.warning(warning)
        if o.unsafe_ignore_hard_delete:
            self.logger.warning(
                "UnsafeIgnoreHardDelete is on: a scavenge will remove tombstones. This is unsafe."
            )
        ssl_context = self._load_tls()
        self.db_config = DatabaseConfig(
            db_dir=None if o.mem_db else o.db,
            index_dir=None if o.mem_db else o.index,
            chunk_size=o.chunk_size,
            max_memtable_entries=o.max_mem_table_size,
            max_append_size=o.max_append_size,
            verify=not o.skip_db_verify,
        )
        self.logger.info(
            "Opening the database %s", "in memory" if o.mem_db else f"in {o.db} (index {o.index})"
        )
        # the node's one client for calls to other nodes (cluster, auto-scavenge): a reload reaches it
        self.peer_client = PeerClient(self.settings, logger=self.logger, clock=self.clock)
        self.license = load_license(o, self.logger, self.clock.time())
        # the archive's options and licence, before anything opens (evdb/archive/settings.py)
        self.archive_settings = starting_archive(
            o, check_license(o, self.clock.time()), self.clock.time(), self.logger
        )
        if self.archive_settings.enabled and not o.mem_db:
            self.archive_reads = ArchiveReads.for_database(
                self.archive_settings.open_store(), o.db, chunk_size=o.chunk_size, logger=self.logger
            )
            self.db_config = replace(self.db_config, archive=self.archive_reads)
        # may refuse to start (earlier plugin form)
        auto_scavenge = self.auto_scavenge = create_auto_scavenge(
            o,
            license=lambda: self.license,
            clock=self.clock,
            logger=self.logger,
            name=self.name,
            db=lambda: self.db,
            cluster=MembershipView(
                lambda: self.cluster,
                lambda: peer_name((self.addresses.advertised_host, self.addresses.advertised_port)),
            ),
            peers=self.peer_client,
        )
        freeze_startup_heap()
        await self._open_database()
        sockets = self._bind_sockets()
        self.persistent.logger = self.logger
        # the node-to-node side gets its own port, not the node (evdb/node/cluster_host.py)
        self.cluster = ClusterService(self._cluster_host(), transport=self._peer_transport())
        self._admit_sign_ins()
        await self.cluster.start()
        self.persistent.run()
        await self._start_projections()
        await auto_scavenge.start()
        self.redaction = await start_redaction_service(
            o,
            logger=self.logger,
            clock=self.clock,
            db=lambda: self.db,
            # the node logged its licence check at start (load_license): the service checks quietly
            license_check=lambda: check_license(self.options, self.clock.time()),
        )
        # the archiver node's uploads, on their own thread (evdb/archive/archiver.py)
        self.archiver = start_archiver(
            self.archive_settings,
            lambda: self.db,
            o.chunk_size,
            name=self.name,
            logger=self.logger,
            db_dir=o.db,
        )
        await self._start_http(ssl_context, sockets)
        self.metrics.set_live(True)
        if o.stats_period_sec > 0:
            self._tasks.append(asyncio.create_task(self._write_statistics(), name=f"{self.name}-stats"))
        self.logger.info("Node is ready: %s", self.http_url)

    async def _start_projections(self) -> None:
        """KurrentDB's RunProjections / StartStandardProjections (dev mode turns both on, as there)."""
        o = self.options
        mode = "System" if o.dev and o.run_projections == "None" else o.run_projections
        if mode == "None":
            return
        if mode == "All":
            self.logger.warning(
                "RunProjections is All: evdb runs the system projections only (no user-defined projections)"
            )
        self.projections = SystemProjections(
            database=self.open_db,
            notifier=lambda: self.notifier,
            is_leader=lambda: self.cluster is not None and self.cluster.is_leader,
            clock=self.clock,
            logger=self.logger,
            start_standard=o.start_standard_projections or o.dev,
        )
        await self.projections.start()

    def _bind_sockets(self) -> list[socket.socket]:
        """Bind the HTTP port now (port 0 picks a free one), so the node knows its endpoint."""
        sock = _bind(self.host, self.port)
        self.addresses.port = sock.getsockname()[1]
        sockets = [sock]
        if self.host in ("127.0.0.1", "localhost"):
            # clients resolve "localhost" to either family: serve IPv6 loopback on the same port too
            with contextlib.suppress(OSError):
                sockets.append(_bind("::1", self.port, socket.AF_INET6))
        return sockets

    async def _start_http(self, ssl_context: ssl.SSLContext | None, sockets: list[socket.socket]) -> None:
        services = self.api_services()
        app = build_app(services)
        self.grpc = GrpcServer(services)  # KurrentDB's gRPC API, on the same sockets (evdb/grpc/dispatch.py)
        # handler_cancellation: a client that goes away (an abandoned subscription) ends its handler;
        # auto_decompress off: a compressed body is inflated, with a bound, by evdb/http/bodies.py
        self._runner = web.AppRunner(
            app,
            access_log=None,
            handle_signals=False,
            shutdown_timeout=2.0,
            handler_cancellation=True,
            auto_decompress=False,
            keepalive_timeout=float(self.options.http_keep_alive_timeout),  # the lean path's too
            logger=ServerLog(
                self.logger, self.clock
            ),  # aiohttp's lines name the node; refusals counted (heads.py)
        )
        await self._runner.setup()
        for sock in sockets:
            site = DispatchSite(self._runner, sock, ssl_context=ssl_context, grpc=self.grpc)
            await site.start()
            self._sites.append(site)

    def api_services(self) -> ApiServices:
        """What the HTTP API, the gRPC API and the web UI answer from (once the services run)."""
        return ApiServices(
            **self._facts(),
            cluster=self.cluster,
            peers=self.peer_client,
            persistent=self.persistent,
            projections=self.projections,
            auto_scavenge=self.auto_scavenge,
            metrics=self.metrics,
            reloader=self.reloader,
            license=self.license,
            index_dir=self.db_config.resolved_index_dir if self.db_config is not None else None,
            shutdown_requested=self.shutdown_requested,
            collect_stats=self.collect_stats,
        )

    async def stop(self) -> None:
        self.metrics.set_live(False)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self.redaction is not None:
            await self.redaction.close()
            self.redaction = None
        if self.archiver is not None:
            await asyncio.to_thread(self.archiver.close)
            self.archiver = None
        await self.persistent.close()
        if self.projections is not None:
            await self.projections.stop()
        if self.auto_scavenge is not None:
            await self.auto_scavenge.stop()
        if self.cluster is not None:
            await self.cluster.stop()
        if self.peer_client is not None:
            await self.peer_client.close()
        await self._close_database()
        if self.archive_reads is not None:
            await asyncio.to_thread(self.archive_reads.close)
            self.archive_reads = None
        self.logger.info("Node stopped")
        close_node_logging(self.logger)

    async def reload_configuration(self, trigger: str = "http") -> ReloadRecord:
        """Reload the configuration file, the environment and the certificates, all or nothing
        (``POST /admin/reloadconfig``, SIGHUP); see evdb/tls/reload.py."""
        return await self.reloader.reload(trigger)

    def request_reload(self, trigger: str = "SIGHUP") -> None:
        """Start a reload from a signal handler (the outcome is logged)."""
        task = asyncio.create_task(self.reload_configuration(trigger), name=f"{self.name}-reload")
        self._tasks.append(task)
        task.add_done_callback(self._forget_task)

    def _forget_task(self, task: asyncio.Task) -> None:
        if task in self._tasks:
            self._tasks.remove(task)

    async def run_until_shutdown(self) -> None:
        await self.shutdown_requested.wait()

    # -- statistics ------------------------------------------------------------------------------------
    @property
    def stats_stream(self) -> str:
        return f"$stats-{self.addresses.endpoint}"

    def collect_stats(self) -> dict[str, Any]:
        """KurrentDB's /stats shape, grouped by name (proc, sys, es)."""
        import psutil

        proc = psutil.Process()
        with proc.oneshot():
            cpu = proc.cpu_percent(None)
            mem = proc.memory_info().rss
            io = proc.io_counters() if hasattr(proc, "io_counters") else None
            threads = proc.num_threads()
        vm = psutil.virtual_memory()
        db = self.db
        disk = psutil.disk_usage(self.options.db if not self.options.mem_db and self.options.db else "/")
        return {
            "proc": {
                "startTime": self.started_at,
                "id": os.getpid(),
                "mem": mem,
                "cpu": cpu,
                "threadsCount": threads,
                "diskIo": {
                    "readBytes": io.read_bytes if io else 0,
                    "writtenBytes": io.write_bytes if io else 0,
                },
            },
            "sys": {
                "cpu": psutil.cpu_percent(None),
                "freeMem": vm.available,
                "totalMem": vm.total,
                "drive": {"totalBytes": disk.total, "availableBytes": disk.free, "usedBytes": disk.used},
            },
            "es": {
                "writer": {
                    "writerCheckpoint": db.committed_position if db else -1,
                    "chaserCheckpoint": db.log.checkpoints.chaser.value if db else -1,
                },
                "readIndex": {"indexEntries": db.index.entry_count() if db else 0},
                "queue": {},
                **self._archive_stats(),
            },
        }

    def _archive_stats(self) -> dict[str, Any]:
        """``archive``: the archive panel's figures (evdb/archive/retention.py), when the archive is on."""
        scavenge = self.opened.scavenge
        retention = scavenge.retention if scavenge is not None else None
        db = self.db
        if not isinstance(retention, Retention) or db is None:
            return {}
        archiver = self.archiver.archiver if self.archiver is not None else None
        return {"archive": retention.panel(db.log, archiver)}

    async def _write_statistics(self) -> None:
        """Write a ``$statsCollected`` event every StatsPeriodSec; the stream keeps them for 24 hours."""
        assert self.db is not None
        stream = self.stats_stream
        await asyncio.to_thread(self.db.set_stream_metadata, stream, {"$maxAge": 24 * 3600})
        while True:
            await self.clock.sleep(self.options.stats_period_sec)
            stats = await asyncio.to_thread(self.collect_stats)
            event = NewEvent("$statsCollected", json.dumps(stats).encode(), is_json=True)
            try:
                await asyncio.wrap_future(self.db.append_async(stream, [event]))
            except Exception as exc:  # statistics must never take the node down
                self.logger.warning("Could not write statistics: %s", exc)


def _bind(host: str, port: int, family: int | None = None) -> socket.socket:
    if family is None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named: asyncio then sets TCP_NODELAY on accepted connections (no delayed-ACK stalls)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    sock.bind((host, port))
    sock.listen(1024)
    sock.setblocking(False)
    return sock
