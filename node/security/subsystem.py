"""Security as a node subsystem: mTLS credentials for the Link service, client tokens for the management
services (an interceptor that refuses unknown tokens, and the authorizer the services ask per call)."""
from __future__ import annotations

from typing import Any

from node.security import tls
from node.security.config import SecurityConfig
from node.security.tokens import TokenGuard, Tokens
from node.subsystem import Subsystem


class SecuritySubsystem(Subsystem):
    name = "security"
    config = SecurityConfig

    def __init__(self, cfg: Any) -> None:
        super().__init__(cfg)
        self.tokens = Tokens(cfg)

    def credentials(self) -> tls.TlsCredentials | None:
        files = tls.load(self.cfg)     # before anything starts: a missing file is one clear error
        return tls.TlsCredentials(files) if files is not None else None

    def server_interceptors(self) -> list:
        return [TokenGuard(self.tokens)]

    def authorizer(self) -> Tokens:
        return self.tokens


SUBSYSTEM = SecuritySubsystem
