"""Certificates: generation (CA and node certificates, in the layout a certificate tool makes),
loading and validation (all or nothing), and TLS contexts for the node."""

from evdb.tls.certs import (
    DevCertificates,
    NodeCertRequest,
    create_ca,
    create_cluster_certificates,
    create_node_certificate,
    generate_dev_certificates,
)
from evdb.tls.loading import CertificateError, NodeTls, check_peer_common_name, load_node_tls

__all__ = [
    "CertificateError",
    "DevCertificates",
    "NodeCertRequest",
    "NodeTls",
    "check_peer_common_name",
    "create_ca",
    "create_cluster_certificates",
    "create_node_certificate",
    "generate_dev_certificates",
    "load_node_tls",
]
