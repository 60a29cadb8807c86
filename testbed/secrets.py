"""A run's secrets (scenario `security:`): the certificate authority, the node certificates and the client tokens.

Layout in the run directory (docs/run-directory.md):

    secrets/                  0700, and everything in it 0600 (written under a 077 umask)
    secrets/ca.crt            the CA's certificate
    secrets/tokens.json       {"admin": {node: TOKEN}, "users": {node: {user: TOKEN}}}
    secrets/pools.secret      the pool controller replicas' Raft password (scenario `pools:`; with or without
                              `security:`: Raft peers unpickle what they receive, the password guards it)
    nodes/<node>/ca.crt       the CA certificate the node trusts
    nodes/<node>/node.crt     the node's certificate: DNS name (and CN) = the node's name
    nodes/<node>/node.key     its private key (0600, owned like the directory: a container's user reads it)

A node's config names its files relative to its own directory (which the docker runtime mounts at /work)
and holds only the SHA-256 digests of its admin token and of its own users' tokens. Every node has an admin token
of its own: one node's admin token (a node's config, a client's memory) is worth nothing at any other node.
The testbed's clients dial a node's management port with the CA certificate as their only root and check that
the node's certificate names the node (`access`).

The CA's private key is never written: it lives in memory while the node certificates are issued, all at once
when a run (or `testbed up`) starts, and nothing issues a certificate later, so no file can leak it.
"""
from __future__ import annotations

import contextlib
import datetime
import json
import os
import secrets as pysecrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from node.client import Access
from node.errors import UserError
from node.security.tokens import digest

SECRETS_DIR = "secrets"
TOKENS_FILE = "tokens.json"
POOLS_FILE = "pools.secret"
CERT_FILES = {"cert": "node.crt", "key": "node.key", "ca": "ca.crt"}
VALID_DAYS = 30          # a run (or a `testbed up` network) lives far shorter


@dataclass
class RunSecrets:
    tls: bool = False
    auth: bool = False
    admins: dict[str, str] = field(default_factory=dict)     # node -> its admin token (none without auth)
    users: dict[str, dict[str, str]] = field(default_factory=dict)   # node -> user -> token
    ca: bytes = b""                                           # the CA certificate (PEM; none without tls)

    def token(self, node: str, user: str = "") -> str:
        """The token a client uses at `node`: its admin's, or `user`'s there (one sentence if it has none)."""
        if not self.auth:
            return ""
        if not user:
            try:
                return self.admins[node]
            except KeyError:
                raise UserError(f"the run has no admin token for {node} (nodes with one: "
                                f"{', '.join(sorted(self.admins)) or 'none'}).") from None
        try:
            return self.users[node][user]
        except KeyError:
            raise UserError(f"the run has no token for user {user!r} at {node} (users there: "
                            f"{', '.join(sorted(self.users.get(node, {}))) or 'none'}).") from None

    def access(self, node: str, user: str = "") -> Access:
        """What a client of `node` carries: the token of `token`, and with tls the CA and the name to check."""
        return Access(self.token(node, user), self.ca if self.tls else b"", node if self.tls else "")

    def node_section(self, node: str) -> dict[str, Any]:
        """The `security:` mapping of a node's config (empty when the run has no security)."""
        out: dict[str, Any] = {}
        if self.tls:
            out["tls"] = dict(CERT_FILES)
        if self.auth:
            out["auth"] = {"admin": digest(self.token(node)),
                           "users": {u: digest(t) for u, t in sorted(self.users.get(node, {}).items())}}
        return out


@contextlib.contextmanager
def private_umask() -> Iterator[None]:
    """A 077 umask while the run's secrets directory is made and filled, so nothing in it is ever readable by
    others, whatever the caller's umask. The umask is the process's: keep the block short."""
    old = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(old)


def write_private(path: Path, data: bytes, owner_of: Path | None = None) -> None:
    """Write a secret 0600 from the start (never briefly readable by others); with `owner_of`, owned like it."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    if owner_of is not None:
        st = owner_of.stat()
        if (st.st_uid, st.st_gid) != (os.getuid(), os.getgid()):
            os.chown(path, st.st_uid, st.st_gid)     # the docker runtime's non-root daemon reads its own key


def make(run_dir: Path, users: dict[str, list[str]], tls: bool, auth: bool,
         nodes_dir: Path | None = None) -> RunSecrets:
    """Make (and write) the secrets of a run whose daemons are the keys of `users` (node -> its users); the node
    files go to <nodes_dir>/<node>/ (default: the run's nodes/)."""
    out = RunSecrets(tls=tls, auth=auth)
    if not (tls or auth):
        return out
    ca_pem = None
    if tls:     # the node files stay readable by a container's daemon: outside the private umask
        ca_pem = _make_certificates(Path(nodes_dir) if nodes_dir is not None else Path(run_dir) / "nodes",
                                    sorted(users), Path(run_dir).name)
        out.ca = ca_pem
    if auth:
        out.admins = {n: pysecrets.token_urlsafe(32) for n in sorted(users)}
        out.users = {n: {u: pysecrets.token_urlsafe(32) for u in sorted(set(us))} for n, us in sorted(users.items())}
    sdir = Path(run_dir) / SECRETS_DIR
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    with private_umask():
        sdir.mkdir(mode=0o700, exist_ok=True)
        os.chmod(sdir, 0o700)        # it may be an earlier run's
        if ca_pem is not None:
            write_private(sdir / "ca.crt", ca_pem)
        write_private(sdir / TOKENS_FILE, json.dumps({"tls": tls, "auth": auth, "admin": out.admins,
                                                      "users": out.users}, indent=1).encode())
    return out


def pools_password(run_dir: Path) -> str:
    """The Raft password of a run's pool controller replicas, new for every run (written to secrets/ so the
    run.s files say what the replicas shared; the replicas' node configs hold it too)."""
    password = pysecrets.token_urlsafe(32)
    sdir = Path(run_dir) / SECRETS_DIR
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    with private_umask():
        sdir.mkdir(mode=0o700, exist_ok=True)
        os.chmod(sdir, 0o700)
        write_private(sdir / POOLS_FILE, password.encode())
    return password


def load(run_dir: Path) -> RunSecrets:
    """The secrets a run wrote (none: a run without security)."""
    path = Path(run_dir) / SECRETS_DIR / TOKENS_FILE
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        return RunSecrets()
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read the run's tokens {path}: {exc}.") from None
    admins = (raw.get("admin") or {}) if isinstance(raw, dict) else None
    if not isinstance(admins, dict):
        raise UserError(f"the run's tokens {path} have no admin token per node (written by an older testbed?).")
    out = RunSecrets(tls=bool(raw.get("tls")), auth=bool(raw.get("auth")),
                     admins={str(n): str(t) for n, t in admins.items()},
                     users={n: dict(u) for n, u in (raw.get("users") or {}).items()})
    if out.tls:
        ca = path.parent / "ca.crt"
        try:
            out.ca = ca.read_bytes()
        except OSError as exc:
            raise UserError(f"cannot read the run's CA certificate {ca}: {exc.strerror}.") from None
    return out


def _make_certificates(nodes_dir: Path, nodes: list[str], label: str) -> bytes:
    """A CA of its own and a certificate from it for each of `nodes` in <nodes_dir>/<node>/; returns the CA's
    certificate. The CA's key is dropped on return."""
    # Only the testbed needs `cryptography` (the node daemon loads PEM files through grpc).
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = now - datetime.timedelta(hours=1), now + datetime.timedelta(days=VALID_DAYS)   # some clock skew

    def pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
        return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"wanbed run CA {label}")])
    ca_cert = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
               .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(start).not_valid_after(end)
               .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                            data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                            crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
               .sign(ca_key, hashes.SHA256()))
    ca_pem = ca_cert.public_bytes(serialization.Encoding.PEM)
    for node in nodes:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, node)])).issuer_name(ca_name)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(start).not_valid_after(end)
                .add_extension(x509.SubjectAlternativeName([x509.DNSName(node)]), critical=False)
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                # each node is a TLS server (it accepts) and a client (it dials)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                      ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
                .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                               critical=False)
                .sign(ca_key, hashes.SHA256()))
        d = nodes_dir / node
        d.mkdir(parents=True, exist_ok=True)
        (d / CERT_FILES["ca"]).write_bytes(ca_pem)
        (d / CERT_FILES["cert"]).write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        write_private(d / CERT_FILES["key"], pem_key(key), owner_of=d)
    return ca_pem


def make_stranger(out_dir: Path, name: str) -> Path:
    """A certificate named `name` from a CA of its own (not the run's), for tests of refused sessions: returns
    the directory with its ca.crt, node.crt and node.key."""
    other = Path(out_dir)
    other.mkdir(parents=True, exist_ok=True)
    _make_certificates(other, [name], "stranger")
    return other / name
