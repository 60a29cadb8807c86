"""The `security:` section of a node config (node/security/): mTLS files and client token digests."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from node.errors import ConfigError
from node.names import is_user_name


@dataclass
class TlsConfig:
    """mTLS on the Link service (node/security/tls.py): PEM files, relative paths from records_dir.

    With a certificate the data port takes only clients with a certificate of `ca`, the dialler checks that the
    neighbour's certificate names the neighbour, and the acceptor that it names the node its OPEN claims."""
    cert: str = ""                 # this node's certificate (its DNS name is the node's name)
    key: str = ""                  # its private key
    ca: str = ""                   # the certificate authority every neighbour's certificate must come from

    @property
    def enabled(self) -> bool:
        return bool(self.cert)

    def validate(self) -> None:
        given = [k for k in ("cert", "key", "ca") if getattr(self, k)]
        if given and len(given) != 3:
            raise ConfigError("security.tls needs all of cert, key and ca (or none of them).")


_SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")


@dataclass
class AuthConfig:
    """Client tokens on the management services (node/security/tokens.py): SHA-256 hex digests only, so a
    config file never holds a token. With any digest set every Submit, Control and PubSub call needs one."""
    admin: str = ""                # the admin token's digest: every call, every mailbox
    users: dict[str, str] = field(default_factory=dict)    # user -> its token's digest: that user's mail only

    @property
    def enabled(self) -> bool:
        return bool(self.admin or self.users)

    def validate(self) -> None:
        for who, digest in [("admin", self.admin), *((f"users.{u}", d) for u, d in self.users.items())]:
            if (digest or who != "admin") and not _SHA256_HEX.match(digest):
                raise ConfigError(f"security.auth.{who} must be a SHA-256 hex digest (64 lowercase hex digits).")
        bad = [u for u in self.users if not is_user_name(u)]
        if bad:
            raise ConfigError(f"security.auth.users: {bad[0]!r} is not a valid user name.")


@dataclass
class SecurityConfig:
    tls: TlsConfig = field(default_factory=TlsConfig)
    auth: AuthConfig = field(default_factory=AuthConfig)

    def validate(self, node: Any = None) -> None:
        self.tls.validate()
        self.auth.validate()
