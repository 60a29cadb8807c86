"""TLS from the config's PEM files: mTLS between neighbours, and server-authenticated TLS on the management port.

Nodes dial each other by address, so the dialler checks the neighbour's certificate against the neighbour's
NAME through `grpc.ssl_target_name_override`; the acceptor requires a client certificate of the run's CA
(`require_client_auth`) and compares the DNS names in it with the node name the OPEN claims, before the session
may replace a live one. The management port (Submit, Control, PubSub) presents the same certificate but asks
clients for none: tokens identify them (tokens.py), and a client checks the node's name the way the dialler
does (node/client.py). Only PEM bytes are read here (no `cryptography`): grpc does all the X.509 work.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import grpc

from node.config import ConfigError, NodeConfig

# What a TLS channel adds to the Link channel options: the name the neighbour's certificate must carry.
TARGET_NAME_OPTION = "grpc.ssl_target_name_override"


@dataclass(frozen=True)
class TlsFiles:
    cert: bytes
    key: bytes
    ca: bytes


def load(cfg: NodeConfig) -> TlsFiles | None:
    """The node's PEM files, or None without TLS; a file that cannot be read is one ConfigError."""
    tls = cfg.security.tls
    if not tls.enabled:
        return None
    out: dict[str, bytes] = {}
    for key in ("cert", "key", "ca"):
        path = cfg.security_path(getattr(tls, key))
        try:
            out[key] = path.read_bytes()
        except OSError as exc:
            raise ConfigError(f"cannot read security.tls.{key} {path}: {exc.strerror}.") from None
        if b"-----BEGIN" not in out[key]:
            raise ConfigError(f"security.tls.{key} {path} is not a PEM file.")
    return TlsFiles(**out)


def server_credentials(files: TlsFiles) -> grpc.ServerCredentials:
    """The Link server's: only clients with a certificate of the run's CA get past the handshake."""
    return grpc.ssl_server_credentials([(files.key, files.cert)], root_certificates=files.ca,
                                       require_client_auth=True)


def management_credentials(files: TlsFiles) -> grpc.ServerCredentials:
    """The management server's: the node proves its name to clients; clients prove nothing here (tokens do)."""
    return grpc.ssl_server_credentials([(files.key, files.cert)], require_client_auth=False)


def channel_credentials(files: TlsFiles) -> grpc.ChannelCredentials:
    """A dialler's: trusts only the run's CA and presents this node's certificate."""
    return grpc.ssl_channel_credentials(root_certificates=files.ca, private_key=files.key,
                                        certificate_chain=files.cert)


def peer_names(context: Any) -> set[str]:
    """The DNS names (subject alternative names, else the common name) of the caller's verified certificate;
    empty when the call came without TLS or without a client certificate."""
    auth = context.auth_context() or {}
    raw = auth.get("x509_subject_alternative_name") or auth.get("x509_common_name") or []
    return {v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in raw}


class TlsCredentials:
    """The Link service's mTLS as the link layer uses it (node/subsystem.py LinkCredentials)."""

    def __init__(self, files: TlsFiles) -> None:
        self.files = files

    def server(self) -> grpc.ServerCredentials:
        return server_credentials(self.files)

    def dial(self, addr: str, peer: str, options: list) -> grpc.aio.Channel:
        # dialled by address: the certificate must name the neighbour, not the address
        return grpc.aio.secure_channel(addr, channel_credentials(self.files),
                                       options=options + [(TARGET_NAME_OPTION, peer)])

    def names(self, context: Any) -> set[str]:
        return peer_names(context)
