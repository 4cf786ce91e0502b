"""The option table: every node option, once.

To add an option, add one ``OptionSpec`` here (in its group); the command line, the environment
variable, the YAML key, the ``Options`` attribute, ``evdb node --help`` and docs/options.md all follow.
Regenerate the docs with ``python -m evdb.options --markdown > docs/options.md``.
"""

from __future__ import annotations

from evdb.options.spec import OptionSpec

__all__ = ["LOG_LEVELS", "OPTIONS", "GiB", "KiB", "MiB"]

KiB = 1024
MiB = 1024**2
GiB = 1024**3

LOG_LEVELS = ("Verbose", "Debug", "Information", "Warning", "Error", "Fatal")

OPTIONS: tuple[OptionSpec, ...] = (
    # -- Application ---------------------------------------------------------------------------------
    OptionSpec(
        "Config",
        "path",
        None,
        "YAML file to read options from.",
        "Application",
        default_note="no file",
        details=(
            "Keys are the PascalCase option names; a nested mapping joins its keys, so "
            "`AutoScavenge: {Enabled: false}` sets `AutoScavengeEnabled`. Keys are matched without regard "
            "to case. `Config` itself cannot be set inside the file."
        ),
    ),
    OptionSpec(
        "Dev",
        "bool",
        False,
        "Developer mode: throw-away certificates are generated when none are given.",
        "Application",
        details="Not for production. Auto-scavenge never runs in developer mode.",
    ),
    OptionSpec(
        "MemDb",
        "bool",
        False,
        "Keep the whole database in memory; nothing is written to disk and everything is lost at exit.",
        "Application",
        details="Auto-scavenge never runs on an in-memory database.",
    ),
    OptionSpec(
        "StatsPeriodSec",
        "int",
        30,
        "Seconds between statistics events (which expire after 24 hours); 0 turns them off.",
        "Application",
        minimum=0,
        maximum=86400,
        unit="seconds",
    ),
    OptionSpec(
        "EnableUnixSocket",
        "bool",
        False,
        "Serve the redaction RPC on a unix domain socket in the database folder.",
        "Application",
        details="Required by the redaction tool `evdb-redact`.",
    ),
    OptionSpec(
        "PasswordHashCost",
        "int",
        14,
        "The cost of the password hashes this node writes: scrypt's n = 2^PasswordHashCost (r = 8, p = 1).",
        "Application",
        minimum=10,
        maximum=17,
        details=(
            "Each user record keeps the cost its hash was made with, so records written at another cost "
            "still verify; a sign-in of an unknown login costs one hash at this cost. The default, 14, "
            "takes about 40 ms and 16 MiB a hash; each step up doubles both. The test suite runs its nodes "
            "at 10 (`SERVICE_PASSWORD_HASH_COST=10`, tests/conftest.py) where a test is not about hashing: "
            "never lower it in production."
        ),
    ),
    # -- Database ------------------------------------------------------------------------------------
    OptionSpec(
        "Db",
        "path",
        "./data/db",
        "Folder of the transaction log: chunk files and checkpoints.",
        "Database",
        details="Relative paths are relative to the working folder of the node process; `~` is expanded.",
    ),
    OptionSpec(
        "Index",
        "path",
        None,
        "Folder of the index files (indexmap, PTables, stream-existence filter, scavenge database).",
        "Database",
        default_note="<Db>/index",
        details=(
            "When not given, the folder `index` inside the `Db` folder (`./data/db/index` with the default "
            "`Db`), as in KurrentDB. Give it explicitly to put the index on another volume; the backup "
            "procedures take `--db` and `--index` separately either way."
        ),
    ),
    OptionSpec(
        "ChunkSize",
        "size",
        256 * MiB,
        "Logical size of one chunk file.",
        "Database",
        minimum=64 * KiB,
        maximum=1 * GiB,
        details=(
            "Fixed when the database is created: a database must be opened with the chunk size it was "
            "created with. The 64 KiB minimum keeps room for a useful number of records per chunk (tests "
            "use it); the 1 GiB maximum keeps a chunk copy during a scavenge bounded."
        ),
    ),
    OptionSpec(
        "MaxMemTableSize",
        "int",
        1_000_000,
        "Index entries kept in memory before they are written to a PTable file.",
        "Database",
        minimum=1,
        maximum=100_000_000,
        unit="entries",
    ),
    OptionSpec(
        "MaxAppendSize",
        "size",
        16 * MiB,
        "Largest batch, in bytes of data and metadata, that one append accepts.",
        "Database",
        minimum=1,
        maximum=1 * GiB,
    ),
    OptionSpec(
        "SkipDbVerify",
        "bool",
        False,
        "Skip the checksum verification of completed chunks at start (their sizes are still checked).",
        "Database",
    ),
    # -- Interface -----------------------------------------------------------------------------------
    OptionSpec(
        "HttpIp",
        "ip",
        "127.0.0.1",
        "Address the HTTP API listens on; 0.0.0.0 (or ::) listens on every interface.",
        "Interface",
        aliases=("NodeIp",),
        details=(
            "The default is the loopback address, unlike KurrentDB's 0.0.0.0: a node started with "
            "defaults (or in developer mode, with its well-known default passwords) is not reachable from "
            "the network until an operator says so. KurrentDB 25's name `NodeIp` is accepted too."
        ),
    ),
    OptionSpec(
        "HttpPort",
        "int",
        2113,
        "Port of the HTTP API; 0 picks a free port (the node logs the one it got).",
        "Interface",
        aliases=("NodePort",),
        minimum=0,
        maximum=65535,
        details="KurrentDB 25's name `NodePort` is accepted too.",
    ),
    OptionSpec(
        "Insecure",
        "bool",
        False,
        "Serve plain HTTP without TLS and without certificates (logged as a warning).",
        "Interface",
    ),
    OptionSpec(
        "HttpMaxRequestBodySize",
        "size",
        64 * MiB,
        "Largest HTTP request body the node reads; a larger one is refused with 413.",
        "Interface",
        minimum=1 * KiB,
        maximum=1 * GiB,
        details=(
            "A bound on the memory one request can make the node hold. Appends are also bounded by "
            "`MaxAppendSize` (checked after the body is read)."
        ),
    ),
    OptionSpec(
        "HttpMaxConcurrentRequestsPerClient",
        "int",
        512,
        "Requests one client address may have in progress at once; more are refused with 429.",
        "Interface",
        minimum=1,
        maximum=1_000_000,
        unit="requests",
        details=(
            "Counted per remote IP address over every connection of that address (HTTP/1.1 carries one "
            "request at a time on a connection, so this also bounds its busy connections). A refused "
            "request gets `429 Too Many Requests` with `Retry-After: 1` and an empty body, before "
            "authentication. Long polls and subscriptions count while they wait."
        ),
    ),
    OptionSpec(
        "HttpMaxConnections",
        "int",
        0,
        "Connections the HTTP port keeps open at once (HTTP/1.1 and gRPC); 0: half the open-file limit.",
        "Interface",
        minimum=0,
        maximum=1_000_000,
        unit="connections",
        details=(
            "0 (the default) takes half of the process's open-file limit (`RLIMIT_NOFILE`, its soft "
            "limit at the node's start), at least 16, so connections can never take the descriptors "
            "the database needs. A connection past the limit is closed at once; on HTTP/1.1 it is "
            "first answered `503 Service Unavailable` with `Retry-After: 1`. Every accepted connection "
            "counts (plain or TLS, HTTP/1.1 or gRPC, silent or busy) until it is closed."
        ),
    ),
    OptionSpec(
        "HttpRequestHeadTimeout",
        "int",
        30,
        "Seconds a connection has to send its first bytes, and a request head once begun; a silent "
        "connection is then closed.",
        "Interface",
        minimum=1,
        maximum=86_400,
        unit="seconds",
        details=(
            "Bounds what connections that say nothing hold (Kestrel's RequestHeadersTimeout, 30 s). "
            "A connection that has sent no byte is closed after it, as is an HTTP/1.1 connection "
            "whose request head is not complete by then."
        ),
    ),
    OptionSpec(
        "HttpKeepAliveTimeout",
        "int",
        130,
        "Seconds an HTTP/1.1 connection with no request in progress stays open.",
        "Interface",
        minimum=1,
        maximum=86_400,
        unit="seconds",
        details="Kestrel's KeepAliveTimeout (130 s); a client's next request on it resets the wait.",
    ),
    OptionSpec(
        "NodeHostAdvertiseAs",
        "host",
        None,
        "Host name or address other nodes (and clients, unless AdvertiseHostToClientAs is set) are told "
        "to reach this node's HTTP port at.",
        "Interface",
        aliases=("ExtHostAdvertiseAs",),
        default_note="the HttpIp address (127.0.0.1 when it is 0.0.0.0 or ::)",
        details=(
            "KurrentDB's option (formerly `ExtHostAdvertiseAs`, also accepted). Set it when the node listens "
            "on `0.0.0.0` or behind address translation, or to gossip a DNS name that the node certificates "
            "carry instead of an IP address."
        ),
    ),
    OptionSpec(
        "NodePortAdvertiseAs",
        "int",
        0,
        "HTTP port other nodes (and clients, unless AdvertiseNodePortToClientAs is set) are told; 0: HttpPort.",
        "Interface",
        minimum=0,
        maximum=65535,
        aliases=("HttpPortAdvertiseAs",),
        details="KurrentDB's option (formerly `HttpPortAdvertiseAs`, also accepted).",
    ),
    OptionSpec(
        "AdvertiseHostToClientAs",
        "host",
        None,
        "Host name or address clients are told to reach this node at: gossip (HTTP /gossip and gRPC "
        "Gossip) and not-leader redirects.",
        "Interface",
        default_note="NodeHostAdvertiseAs",
        details=(
            "For clients that reach the cluster through other addresses than the nodes use among "
            "themselves (Docker, Kubernetes, NAT). `GET /gossip` then shows it as each member's "
            "`httpEndPointIp` and as `serverIp`; the address other nodes use stays in "
            "`internalHttpEndPointIp`, as in KurrentDB."
        ),
    ),
    OptionSpec(
        "AdvertiseNodePortToClientAs",
        "int",
        0,
        "HTTP port clients are told (gossip, not-leader redirects); 0: NodePortAdvertiseAs, else HttpPort.",
        "Interface",
        minimum=0,
        maximum=65535,
        aliases=("AdvertiseHttpPortToClientAs",),
        details="KurrentDB's option (formerly `AdvertiseHttpPortToClientAs`, also accepted).",
    ),
    OptionSpec(
        "ReplicationHostAdvertiseAs",
        "host",
        None,
        "Host name or address other nodes are told to reach this node's node-to-node listener at.",
        "Interface",
        aliases=("IntHostAdvertiseAs",),
        default_note="ReplicationIp",
        details="KurrentDB's option (formerly `IntHostAdvertiseAs`, also accepted); gossiped as `internalTcpIp`.",
    ),
    OptionSpec(
        "ReplicationTcpPortAdvertiseAs",
        "int",
        0,
        "Node-to-node port other nodes are told; 0: the port the listener has.",
        "Interface",
        minimum=0,
        maximum=65535,
        aliases=("IntTcpPortAdvertiseAs",),
        details="KurrentDB's option (formerly `IntTcpPortAdvertiseAs`, also accepted).",
    ),
    # -- Cluster -------------------------------------------------------------------------------------
    OptionSpec(
        "ClusterSize",
        "int",
        1,
        "Number of voting nodes (leader and followers) in the cluster; a write is acknowledged once a "
        "majority of them has it on disk.",
        "Cluster",
        minimum=1,
        maximum=9,
        details="Read-only replicas are not counted. 1 runs a single node that elects itself.",
    ),
    OptionSpec(
        "GossipSeed",
        "str",
        "",
        "HTTP endpoints (host:port, comma separated) of the other nodes, to gossip with.",
        "Cluster",
        details="Every member, replicas included, should list the cluster's other members.",
    ),
    OptionSpec(
        "NodePriority",
        "int",
        0,
        "Preference of this node in elections: between equally up-to-date nodes the higher priority wins.",
        "Cluster",
        minimum=-1000,
        maximum=1000,
    ),
    OptionSpec(
        "ReadOnlyReplica",
        "bool",
        False,
        "Run as a read-only replica: it copies the leader's log, never votes and is never elected.",
        "Cluster",
    ),
    OptionSpec(
        "ReplicationIp",
        "ip",
        None,
        "Address of the node-to-node listener (elections, replication, forwarded writes).",
        "Cluster",
        default_note="HttpIp",
        details="With TLS it requires a client certificate of another node (trusted chain and reserved common name).",
    ),
    OptionSpec(
        "ReplicationPort",
        "int",
        0,
        "Port of the node-to-node listener; 0 picks a free port (advertised in gossip).",
        "Cluster",
        minimum=0,
        maximum=65535,
    ),
    OptionSpec(
        "GossipIntervalMs",
        "int",
        1000,
        "How often a node asks the other members for their state.",
        "Cluster",
        minimum=50,
        maximum=60_000,
    ),
    OptionSpec(
        "GossipTimeoutMs",
        "int",
        2500,
        "A member not heard from for this long is considered dead (isAlive false).",
        "Cluster",
        minimum=100,
        maximum=600_000,
    ),
    OptionSpec(
        "LeaderElectionTimeoutMs",
        "int",
        1000,
        "How long an election round waits for votes before a new round starts.",
        "Cluster",
        minimum=50,
        maximum=60_000,
    ),
    OptionSpec(
        "ConnectionResetInterval",
        "int",
        600,
        "Seconds after which node-to-node connections are closed and made again (with the "
        "certificates loaded then).",
        "Cluster",
        minimum=1,
        maximum=86_400,
        reloadable=True,
    ),
    # -- Certificates --------------------------------------------------------------------------------
    OptionSpec(
        "CertificateFile",
        "path",
        None,
        "The node's certificate (PEM).",
        "Certificates",
        reloadable=True,
    ),
    OptionSpec(
        "CertificatePrivateKeyFile",
        "path",
        None,
        "The private key of the node's certificate (PEM).",
        "Certificates",
        reloadable=True,
    ),
    OptionSpec(
        "TrustedRootCertificatesPath",
        "path",
        None,
        "A CA certificate file, or a folder of them, that node certificates must chain to.",
        "Certificates",
        reloadable=True,
    ),
    OptionSpec(
        "CertificateReservedNodeCommonName",
        "str",
        "eventstoredb-node",
        "Common name that the certificates of other nodes must carry.",
        "Certificates",
        reloadable=True,
        details="A changed value is applied on configuration reload, so a rolling update may change it.",
    ),
    # -- Scavenging (the spec's table) ---------------------------------------------------------------
    OptionSpec(
        "DisableScavengeMerging",
        "bool",
        False,
        "When true, small scavenged chunks are not merged.",
        "Scavenging",
    ),
    OptionSpec(
        "DisableScavengeAutoPacing",
        "bool",
        False,
        "When true, a scavenge at throttlePercent 100 does not slow its disk writes while clients write.",
        "Scavenging",
        details=(
            "An evdb option, not KurrentDB's. By default a scavenge at throttlePercent 100 watches the "
            "time of the group commits' flushes and slows its copies while clients wait behind them, "
            "running flat out when nobody writes: docs/operations/scavenge.md, Automatic pacing."
        ),
    ),
    OptionSpec(
        "ScavengeHistoryMaxAge",
        "int",
        30,
        "How long scavenge streams are kept.",
        "Scavenging",
        minimum=0,
        maximum=36500,
        unit="days",
    ),
    OptionSpec(
        "AlwaysKeepScavenged",
        "bool",
        False,
        "Always keep the newer chunk of a scavenge, even when it is not smaller.",
        "Scavenging",
        deprecated="it has no effect: a scavenged chunk always replaces the old one",
    ),
    OptionSpec(
        "ScavengeBackendPageSize",
        "size",
        16 * KiB,
        "Page size of the scavenge database, in bytes.",
        "Scavenging",
        choices=tuple(KiB << n for n in range(7)),
        details=(
            "In bytes, as KurrentDB takes it (`ScavengeBackendPageSize: 16384`; `16KiB` is accepted too). "
            "SQLite page sizes are powers of two; evdb takes 1 KiB to 64 KiB. The page size of an existing "
            "scavenge database is fixed when it is created."
        ),
    ),
    OptionSpec(
        "ScavengeBackendCacheSize",
        "size",
        64 * MiB,
        "Memory for scavenge-database caching.",
        "Scavenging",
        minimum=0,
        maximum=64 * GiB,
    ),
    OptionSpec(
        "ScavengeHashUsersCacheCapacity",
        "int",
        100_000,
        "Stream hashes remembered when checking collisions; raise it if accumulation reports many cache misses.",
        "Scavenging",
        minimum=1,
        maximum=100_000_000,
        unit="entries",
    ),
    OptionSpec(
        "UnsafeIgnoreHardDelete",
        "bool",
        False,
        "UNSAFE: a scavenge also removes hard-delete tombstones, so hard-deleted streams accept appends again.",
        "Scavenging",
        details=(
            "Unsafe: streams that were hard-deleted can be written again (except where the tombstone is "
            "still in the active chunk), and the deletion cannot be undone. The node logs a warning at "
            "start while it is on."
        ),
    ),
    # -- AutoScavenge --------------------------------------------------------------------------------
    OptionSpec(
        "AutoScavengeEnabled",
        "bool",
        None,
        "Turns auto-scavenge on or off; when not set it is on exactly when a valid licence key is present.",
        "AutoScavenge",
        yaml_section="AutoScavenge",
        default_note="on with a valid licence",
        details=(
            "Written `AutoScavenge: Enabled: false` in YAML, as the spec shows (the flat key "
            "`AutoScavengeEnabled` is accepted too). Not set means: follow the licence. Even when on, "
            "auto-scavenge does not run in developer mode or on an in-memory database, and does nothing "
            "until a schedule is configured."
        ),
    ),
    OptionSpec(
        "AutoScavengeNodeTimeoutSec",
        "int",
        300,
        "How long auto-scavenge waits for a node that is down or not answering before cancelling its node scavenge.",
        "AutoScavenge",
        yaml_section="AutoScavenge",
        minimum=1,
        maximum=7 * 86400,
        unit="seconds",
        details=(
            "A node that returns within this time has its scavenge restarted (it resumes where it stopped); "
            "after it, the node scavenge is recorded as Cancelled and the cluster scavenge goes on with the "
            "next node. See docs/operations/auto-scavenge.md."
        ),
    ),
    OptionSpec(
        "AutoScavengeAssessIntervalMs",
        "int",
        5000,
        "How often the leader checks the auto-scavenge schedule and the running node scavenge.",
        "AutoScavenge",
        yaml_section="AutoScavenge",
        minimum=50,
        maximum=600_000,
        unit="milliseconds",
    ),
    OptionSpec(
        "AutoScavengeScheduleSeconds",
        "bool",
        False,
        "Also accept six-field schedules whose first field is seconds (evdb extension, for demos and tests).",
        "AutoScavenge",
        yaml_section="AutoScavenge",
        details=(
            "KurrentDB takes five-field CRON expressions only; keep this off in production so schedules "
            "stay portable."
        ),
    ),
    OptionSpec(
        "InstallationDirectory",
        "path",
        None,
        "Folder holding config/ and plugins/ for the earlier auto-scavenge plugin form.",
        "AutoScavenge",
        default_note="the folder of the Config file, else the current directory",
        details=(
            "The earlier plugin form is used when a subdirectory of <InstallationDirectory>/plugins holds "
            "the AutoScavenge plugin (a plugin.json naming AutoScavenge); it is enabled by a JSON file in "
            "<InstallationDirectory>/config. See docs/operations/auto-scavenge.md."
        ),
    ),
    # -- Projections ---------------------------------------------------------------------------------
    OptionSpec(
        "RunProjections",
        "enum",
        "None",
        "Which projections run: None, System (the system projections) or All.",
        "Projections",
        choices=("None", "System", "All"),
        details=(
            "As KurrentDB's option. `System` runs `$streams`, `$stream_by_category`, `$by_category`, "
            "`$by_event_type` and `$by_correlation_id` on the leader (they write the `$streams`, "
            "`$category-*`, `$ce-*`, `$et-*` and `$bc-*` streams) and serves the projections management "
            "API over gRPC and HTTP. evdb has no user-defined (JavaScript) projections: `All` runs what "
            "`System` runs, and creating one is refused. Dev mode (`Dev`) turns `None` into `System`, as "
            "KurrentDB's does."
        ),
    ),
    OptionSpec(
        "StartStandardProjections",
        "bool",
        False,
        "Enable the system projections when the node starts (they are created disabled).",
        "Projections",
        details="Dev mode (`Dev`) turns it on, as KurrentDB's does. Needs `RunProjections` System or All.",
    ),
    # -- Archive -------------------------------------------------------------------------------------
    OptionSpec(
        "ArchiveEnabled",
        "bool",
        False,
        "Archive completed chunks to object storage and read removed ones back from it (licensed).",
        "Archive",
        yaml_section="Archive",
        details=(
            "Written `Archive: Enabled: true` in YAML, as KurrentDB's. Set on every node of the cluster, the "
            "archiver included, with the same StorageType, bucket (or folder) and retention policy. Needs a "
            "licence with the ARCHIVE entitlement; a node with the archive on and no such licence does not "
            "start. See docs/operations/archive.md."
        ),
    ),
    OptionSpec(
        "ArchiveStorageType",
        "enum",
        None,
        "Where the archive lives: S3 (any S3-compatible object store) or FileSystem (a folder, for development).",
        "Archive",
        choices=("S3", "FileSystem"),
        yaml_section="Archive",
        default_note="required when the archive is enabled",
        details=(
            "`S3` reads `Archive: S3: Region, Bucket`; the endpoint and the credentials come from the "
            "standard AWS providers (environment variables such as AWS_ACCESS_KEY_ID, AWS_ENDPOINT_URL; the "
            "shared credentials and config files of AWS_PROFILE; web identity, container and instance "
            "credentials). `FileSystem` reads `Archive: FileSystem: Path`."
        ),
    ),
    OptionSpec(
        "ArchiveS3Region",
        "str",
        None,
        "Region of the archive's S3 bucket.",
        "Archive",
        yaml_section="Archive",
        default_note="required with StorageType S3",
    ),
    OptionSpec(
        "ArchiveS3Bucket",
        "str",
        None,
        "Name of the archive's S3 bucket; one bucket per cluster.",
        "Archive",
        yaml_section="Archive",
        default_note="required with StorageType S3",
        details=(
            "The bucket must exist. The archiver claims it for its cluster on first use, and a node of "
            "another cluster refuses it."
        ),
    ),
    OptionSpec(
        "ArchiveFileSystemPath",
        "path",
        None,
        "Folder of a file-system archive (development and tests); one folder per cluster.",
        "Archive",
        yaml_section="Archive",
        default_note="required with StorageType FileSystem",
    ),
    OptionSpec(
        "ArchiveRetainAtLeastDays",
        "int",
        None,
        "A chunk holding any record younger than this many days stays on the node's disk.",
        "Archive",
        yaml_section="Archive",
        minimum=0,
        maximum=1_000_000,
        unit="days",
        default_note="required when the archive is enabled",
        details="Written `Archive: RetainAtLeast: Days` in YAML. Both retention values must be set.",
    ),
    OptionSpec(
        "ArchiveRetainAtLeastLogicalBytes",
        "size",
        None,
        "A chunk holding any record within this many bytes of the scavenge point stays on the node's disk.",
        "Archive",
        yaml_section="Archive",
        minimum=0,
        default_note="required when the archive is enabled",
        details=(
            "Written `Archive: RetainAtLeast: LogicalBytes` in YAML: bytes of the logical log, counted back "
            "from the scavenge point. Local chunks are removed, during a scavenge, only once they are "
            "archived (checksum verified) and outside both retention values."
        ),
    ),
    OptionSpec(
        "Archiver",
        "bool",
        False,
        "This node is the cluster's archiver: it uploads completed chunks to the archive (a read-only replica).",
        "Archive",
        details=(
            "Written `Archiver: true` at the top level of the YAML file, beside `ReadOnlyReplica: true`, "
            "which it requires, and with `Archive: Enabled: true`. One archiver per cluster."
        ),
    ),
    # -- Logging -------------------------------------------------------------------------------------
    OptionSpec(
        "Log",
        "path",
        "./data/log",
        "Folder of the log files; each node writes JSON lines to <Log>/<node name>/log-YYYYMMDD.json.",
        "Logging",
    ),
    OptionSpec(
        "LogLevel",
        "enum",
        "Information",
        "Lowest level that is logged.",
        "Logging",
        choices=LOG_LEVELS,
        reloadable=True,
    ),
    OptionSpec(
        "LogConsoleFormat",
        "enum",
        "Plain",
        "Format of the console log: readable text (Plain) or the JSON lines of the log file (Json).",
        "Logging",
        choices=("Plain", "Json"),
    ),
    OptionSpec(
        "UserCertificatesEnabled",
        "bool",
        False,
        "Authenticate clients by their X.509 certificate: its subject's common name is the user (licensed).",
        "Certificates",
        details=(
            "KurrentDB's user-certificates plugin (`UserCertificates: Enabled: true` in YAML is accepted "
            "too), which needs a licence with the USER_CERTIFICATES entitlement. A client certificate "
            "authenticates a TLS connection's HTTP and gRPC requests that carry no Authorization header "
            "when it chains to a trusted root, is valid now, has the Digital Signature and Key "
            "Encipherment or Key Agreement key usages and the Client Authentication extended key usage, "
            "is not a node certificate (no Server Authentication), and its common name is an enabled "
            "user. See docs/certificates.md."
        ),
    ),
    # -- Licensing -----------------------------------------------------------------------------------
    OptionSpec(
        "LicenseKey",
        "str",
        "",
        "Licence key that enables the licensed features (auto-scavenge, redaction, archive).",
        "Licensing",
        sensitive=True,
        aliases=("LicensingLicenseKey",),
        details=(
            "KurrentDB's nested spelling is accepted too: `Licensing: LicenseKey:` in YAML and "
            "`SERVICE_LICENSING__LICENSE_KEY` in the environment. The key is masked when the "
            "configuration is logged."
        ),
    ),
    OptionSpec(
        "LicenseTrustedIssuers",
        "str",
        "",
        "Comma-separated issuer public keys (base64 Ed25519) whose licence keys this node accepts.",
        "Licensing",
        details=(
            "Empty by default: the node trusts no issuer until its vendor's key(s) are listed. The word "
            "`demo` stands for evdb's built-in demo issuer, whose licences `evdb license issue --demo` and "
            "`evdb cluster up` make; its private key ships with evdb, so anyone can sign one. Only the local "
            "cluster (`evdb cluster up` writes `LicenseTrustedIssuers: demo`) and dev mode (`Dev`, which adds "
            "`demo`) trust it, and the node then logs a warning at start. `evdb license keygen` makes a new "
            "issuer key pair and prints its public key. See docs/operations/licensing.md."
        ),
    ),
)
