"""Building the node image, online or offline, with a content-hash cache.

Online: FROM python:3.11-slim (pulled). Offline (no registry reachable): a
bookworm base made with debootstrap from the machine's Debian mirror and
`docker import`ed. Python packages always come from wheels downloaded on the
host, so the Dockerfile build step needs no network either way. The content
hash of the Dockerfile, the node requirements and the node sources is stored as
an image label; an unchanged tree is a cache hit and no build runs.

Several engines (machines): the image is built on one and copied to each
engine that lacks it with `docker save | docker load` (distribute_image).
"""
from __future__ import annotations

import hashlib
import logging
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from testbed import PREFIX, __version__
from testbed.docker_engine import LOCAL, Engine, docker, require_engine
from node.errors import UserError

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parent.parent
IMAGE_DIR = REPO / "images" / "node"
NODE_REQUIREMENTS = IMAGE_DIR / "requirements-node.txt"
IMAGE = f"{PREFIX}-node:{__version__}"
ONLINE_BASE = "python:3.11-slim"
OFFLINE_BASE = f"{PREFIX}-base:bookworm"
HASH_LABEL = "wanbed.content-hash"
NODE_USER = "wanbed"                   # the image's non-root user that runs the node daemon
NODE_UID = 10001                       # its fixed uid/gid: the runtime chowns the mounted workdir to it
BASE_PACKAGES = ["python3", "python3-venv", "python3-pip", "iproute2", "iputils-ping",
                 "tcpdump", "iperf3", "procps"]
MIRROR_SOURCES = Path("/etc/apt/sources.list.d/debian.sources")


@dataclass
class BuildOptions:
    mode: str = "auto"                 # "auto" | "online" | "offline"
    force: bool = False
    build_dir: Path = REPO / "build"   # wheels and the debootstrap root live here
    image: str = IMAGE


@dataclass
class BuildResult:
    image: str
    cached: bool
    mode: str                          # "cache" | "online" | "offline"
    seconds: float
    content_hash: str


def _sources() -> list[Path]:
    files = [IMAGE_DIR / "Dockerfile", NODE_REQUIREMENTS]
    files += sorted(p for p in (REPO / "node").rglob("*") if p.is_file() and _shipped(p))
    return files


def _shipped(p: Path) -> bool:
    return "__pycache__" not in p.parts and p.suffix != ".pyc"


def content_hash() -> str:
    """sha256 over the relative path and bytes of every file that goes into the image."""
    h = hashlib.sha256()
    h.update(f"uid={NODE_UID}\0".encode())       # a build argument that changes the image
    for f in _sources():
        h.update(str(f.relative_to(REPO)).encode() + b"\0")
        h.update(f.read_bytes() + b"\0")
    return h.hexdigest()


def image_label(image: str, label: str, engine: Engine = LOCAL) -> str | None:
    res = docker(["image", "inspect", "--format", f'{{{{index .Config.Labels "{label}"}}}}', image], check=False,
                 engine=engine)
    return res.stdout.strip() if res.returncode == 0 else None


def image_exists(image: str, engine: Engine = LOCAL) -> bool:
    return docker(["image", "inspect", image], check=False, engine=engine).returncode == 0


def debian_mirror() -> str:
    """The machine's own Debian mirror (first URIs line of the deb822 sources)."""
    if MIRROR_SOURCES.exists():
        for line in MIRROR_SOURCES.read_text().splitlines():
            if line.startswith("URIs:"):
                return line.split()[1]
    return "http://deb.debian.org/debian"


def _run_step(argv: list[str], what: str, progress: Callable[[str], None], timeout: float) -> None:
    """Run a long step, echoing its output lines as progress."""
    progress(f"{what} ...")
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tail: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        tail = (tail + [line.rstrip()])[-10:]
        if line.startswith(("I: Retrieving", "I: Extracting", "I: Configuring", "I: Base system", "Step ",
                            "Successfully", "Saved ")):
            progress(f"  {line.rstrip()}")
        if time.monotonic() - t0 > timeout:
            proc.kill()
    if proc.wait() != 0:
        raise RuntimeError(f"{what} failed: " + " | ".join(tail[-5:]))
    progress(f"{what} done in {time.monotonic() - t0:.0f} s")


def make_offline_base(build_dir: Path, progress: Callable[[str], None], engine: Engine = LOCAL) -> None:
    """debootstrap a minimal bookworm (python3.11, the host's ABI) and import it as OFFLINE_BASE."""
    if shutil.which("debootstrap") is None:
        raise UserError("offline image build needs debootstrap (apt-get install debootstrap).")
    rootfs = build_dir / "rootfs"
    if not (rootfs / "usr" / "bin" / "python3").exists():
        shutil.rmtree(rootfs, ignore_errors=True)
        _run_step(["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}",
                   "bookworm", str(rootfs), debian_mirror()], "debootstrap bookworm (takes minutes)",
                  progress, timeout=1800)
    progress(f"importing {rootfs} as {OFFLINE_BASE} ...")
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
    imp = subprocess.run(["docker", "import", "-", OFFLINE_BASE], stdin=tar.stdout, capture_output=True, text=True,
                         env=engine.env())
    tar.wait()
    if imp.returncode != 0:
        raise RuntimeError(f"docker import failed: {imp.stderr.strip()}")


# Pure-Python packages the index has only as a source archive: built into a wheel here (the image has no compiler
# and installs from wheels only).
BUILT_HERE = frozenset({"pysyncobj"})


def node_requirements() -> tuple[list[str], list[str]]:
    """The node's pins, split: (downloaded as cp311 wheels, built into wheels on this host)."""
    pins = [line.strip() for line in NODE_REQUIREMENTS.read_text().splitlines()
            if line.strip() and not line.lstrip().startswith("#")]
    built = [p for p in pins if p.split("==")[0].strip().lower() in BUILT_HERE]
    return [p for p in pins if p not in built], built


def download_wheels(build_dir: Path, progress: Callable[[str], None]) -> Path:
    """cp311 manylinux wheels for the node requirements (host and image share Python 3.11)."""
    wheels = build_dir / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    downloaded, built = node_requirements()
    _run_step([sys.executable, "-P", "-m", "pip", "download", "--quiet", "--only-binary=:all:", "--python-version", "3.11",
               "-d", str(wheels), *downloaded], "downloading node wheels", progress, timeout=600)
    if built:
        _run_step([sys.executable, "-P", "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(wheels), *built],
                  f"building wheels of {', '.join(built)}", progress, timeout=600)
    return wheels


def _stage_context(wheels: Path, ctx: Path) -> None:
    shutil.copy2(IMAGE_DIR / "Dockerfile", ctx / "Dockerfile")
    shutil.copytree(wheels, ctx / "wheels")
    shutil.copy2(NODE_REQUIREMENTS, ctx / "wheels" / "requirements-node.txt")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(REPO / "node", ctx / "src" / "node", ignore=ignore)


def _online_base_available(engine: Engine = LOCAL) -> bool:
    if image_exists(ONLINE_BASE, engine):
        return True
    try:
        return docker(["pull", ONLINE_BASE], check=False, timeout=60, engine=engine).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def build(opts: BuildOptions, progress: Callable[[str], None] = print, engine: Engine = LOCAL) -> BuildResult:
    """Build the node image on `engine` unless an image with the same content hash exists (opts.force rebuilds)."""
    require_engine(engine)
    t0 = time.monotonic()
    digest = content_hash()
    if not opts.force and image_label(opts.image, HASH_LABEL, engine) == digest:
        return BuildResult(opts.image, True, "cache", time.monotonic() - t0, digest)
    if opts.mode == "online" or (opts.mode == "auto" and _online_base_available(engine)):
        if opts.mode == "online" and not _online_base_available(engine):
            raise UserError(f"cannot pull {ONLINE_BASE}: no registry reachable; use --offline.")
        mode, base = "online", ONLINE_BASE
    else:
        mode, base = "offline", OFFLINE_BASE
        if opts.force or not image_exists(OFFLINE_BASE, engine):
            make_offline_base(opts.build_dir, progress, engine)
    wheels = download_wheels(opts.build_dir, progress)
    with tempfile.TemporaryDirectory(prefix=f"{PREFIX}-image-") as tmp:
        ctx = Path(tmp)
        _stage_context(wheels, ctx)
        target = [f"DOCKER_HOST={engine.host}"] if engine.host else []
        _run_step(["env", "DOCKER_BUILDKIT=0", *target, "docker", "build", "--build-arg", f"BASE={base}",
                   "--build-arg", f"VERSION={__version__}", "--build-arg", f"CONTENT_HASH={digest}",
                   "--build-arg", f"NODE_UID={NODE_UID}",
                   "-t", opts.image, str(ctx)], f"docker build {opts.image} ({mode})", progress, timeout=1200)
    # The image this build replaced is now untagged: drop it, so rebuilds do not pile up layers.
    docker(["image", "prune", "-f", "--filter", f"label={HASH_LABEL}"], check=False, engine=engine)
    return BuildResult(opts.image, False, mode, time.monotonic() - t0, digest)


def ensure_image(image: str = IMAGE, engine: Engine = LOCAL) -> str:
    """The image name, (re)built first when missing or older than the node sources (the docker runtime's
    default image): containers must run the same daemon code as the testbed that drives them."""
    if image != IMAGE:
        if not image_exists(image, engine):
            raise UserError(f"docker image {image} does not exist; build it or use the default {IMAGE}.")
        return image
    res = build(BuildOptions(image=image), progress=lambda s: log.info("%s", s), engine=engine)
    if not res.cached:
        log.info("built %s (%s) in %.0f s", image, res.mode, res.seconds)
    return image


def load_image(image: str, source: Engine, target: Engine, timeout: float = 900.0) -> float:
    """Copy `image` from one engine to another (`docker save | docker load`); returns the seconds it took."""
    t0 = time.monotonic()
    save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=source.env())
    try:
        load = subprocess.run(["docker", "load", "--quiet"], stdin=save.stdout, capture_output=True, text=True,
                              timeout=timeout, env=target.env())
    finally:
        assert save.stdout is not None
        save.stdout.close()
        try:
            save.wait(timeout=60)
        except subprocess.TimeoutExpired:
            save.kill()
            save.wait()
    if save.returncode != 0 or load.returncode != 0:
        why = (save.stderr.read().decode(errors="replace") if save.stderr else "") + load.stderr
        raise RuntimeError(f"copying {image} from {source} to {target} failed: {' '.join(why.split())}")
    log.info("loaded %s from %s onto %s in %.1f s", image, source.name, target.name, time.monotonic() - t0)
    return time.monotonic() - t0


def distribute_image(image: str, engines: list[Engine]) -> dict[str, float]:
    """Make `image` present, with the same content, on every engine: engines that lack it (or hold another
    build under the same tag) get it from the first engine that has it. Returns {machine: seconds} per copy."""
    have = [e for e in engines if image_exists(image, e)]
    if not have:
        first = engines[0] if engines else LOCAL
        raise UserError(f"machine {first.name} is an engine without the node image: build or load it "
                        f"(`DOCKER_HOST={first.address()} testbed image build`, or `docker save {image} | "
                        f"DOCKER_HOST={first.address()} docker load` where {image} exists).")
    source = have[0]
    wanted = image_label(image, HASH_LABEL, source)
    copied: dict[str, float] = {}
    for engine in engines:
        if engine in have and image_label(image, HASH_LABEL, engine) == wanted:
            continue
        copied[engine.name] = load_image(image, source, engine)
    return copied
