"""Certificates: generation (a CA and node certificates, in the layout KurrentDB's certificate tool makes),
all-or-nothing loading and validation, ssl contexts for the node, and the node-to-node name check.

Errors: every failure raises :class:`CertificateError` (an :class:`evdb.errors.EvdbError`) whose message
names the file at fault.
"""

from __future__ import annotations

from evdb.tls.certs import (
    DEFAULT_NODE_COMMON_NAME,
    ClusterCertificates,
    DevCertificates,
    NodeCertificates,
    NodeCertRequest,
    create_ca,
    create_cluster_certificates,
    create_node_certificate,
    generate_dev_certificates,
    repoint_link,
)
from evdb.tls.loading import (
    CertificateError,
    CertificateInfo,
    NodeTls,
    check_peer_common_name,
    check_peer_node_certificate,
    common_name_matches,
    describe_certificate,
    load_node_tls,
    read_certificates,
)

__all__ = [
    "DEFAULT_NODE_COMMON_NAME",
    "CertificateError",
    "CertificateInfo",
    "ClusterCertificates",
    "DevCertificates",
    "NodeCertRequest",
    "NodeCertificates",
    "NodeTls",
    "check_peer_common_name",
    "check_peer_node_certificate",
    "common_name_matches",
    "create_ca",
    "create_cluster_certificates",
    "create_node_certificate",
    "describe_certificate",
    "generate_dev_certificates",
    "load_node_tls",
    "read_certificates",
    "repoint_link",
]
