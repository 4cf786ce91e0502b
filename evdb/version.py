"""evdb's version strings, in one place (the node, gossip, the CLI and the dashboard read them here)."""

#: what ``/info`` and gossip report as the server version (KurrentDB's shape, with evdb's own suffix)
VERSION = "24.10.0-evdb.0.1.0"
#: the database format generation written by this version
DB_VERSION = "evdb-0.1.0"
