"""Security as a node subsystem: mTLS credentials for the Link service, TLS on the management port, client tokens
for the management services (an interceptor that refuses unknown tokens, and the authorizer the services ask
per call)."""
from __future__ import annotations

from typing import Any

import grpc

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
        self._files: tls.TlsFiles | None = None

    def _tls_files(self) -> tls.TlsFiles | None:
        if self._files is None:
            self._files = tls.load(self.cfg)     # before anything starts: a missing file is one clear error
        return self._files

    def credentials(self) -> tls.TlsCredentials | None:
        files = self._tls_files()
        return tls.TlsCredentials(files) if files is not None else None

    def management_credentials(self) -> grpc.ServerCredentials | None:
        files = self._tls_files()
        return tls.management_credentials(files) if files is not None else None

    def server_interceptors(self) -> list:
        return [TokenGuard(self.tokens)]

    def authorizer(self) -> Tokens:
        return self.tokens


SUBSYSTEM = SecuritySubsystem
