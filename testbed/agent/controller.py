"""The controller's side of the agents: start one on a machine's engine, send it requests, remove it.

See testbed/agent/__init__.py for what an agent is and why requests go through
the engine's exec. `AgentWireHalf` is a wire emulator half run by an agent: the
WireShaper API (testbed/shaping/wire.py) with each control request relayed.
"""
from __future__ import annotations

import glob
import io
import json
import logging
import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Any

from node.errors import UserError
from testbed import PREFIX, registry
from testbed.docker_engine import Engine, docker
from testbed.shaping import pcapmerge
from testbed.shaping.base import LinkEnd
from testbed.shaping.split import SplitWireShaper
from testbed.shaping.wire import WireShaper
from testbed.topology.model import Direction

log = logging.getLogger(__name__)

RUN_LABEL = "wanbed.run"          # the same labels as the host containers (testbed/runtime/docker.py)
PREFIX_LABEL = "wanbed.prefix"
CODE_DIR = "/opt/wanbed-agent"    # where the agent's code is copied inside its container
REPO = Path(__file__).resolve().parents[2]
# The files the agent runs, standard library only; testbed/shaping/__init__.py is replaced by an empty one
# (the real one imports the controller's shapers, which the agent does not need).
SHIPPED = ("testbed/__init__.py", "testbed/agent/__init__.py", "testbed/agent/ops.py",
           "testbed/shaping/tunnel.py", "testbed/shaping/wire_emulator.py",
           # the clock service and what its module imports (standard library beneath)
           "testbed/clockservice.py", "testbed/clockoffset.py", "node/__init__.py", "node/clockmodel.py",
           "node/jsonlines.py")
EMPTY_INIT = ("testbed/shaping/__init__.py",)
# What the agent may do on its machine (docs/multi-machine.md: --privileged fails under this engine's
# capability bound, these explicit capabilities work there and where --privileged works).
CAPABILITIES = ("NET_ADMIN", "NET_RAW", "SYS_ADMIN", "SYS_PTRACE")
EXEC_TIMEOUT = 120.0
STATE_DIR = "/run/wanbed-agent"   # testbed/agent/ops.py's STATE_DIR (that module runs in the agent, not imported here)


class AgentError(UserError):
    """An agent's request that failed; one sentence naming the machine."""


def agent_container(run_id: str, machine: str) -> str:
    # '.' never occurs in a host name, so the agent's name cannot clash with a host container's
    return f"{registry.prefix(run_id)}.agent-{machine}"


def _add_iptables(tar: tarfile.TarFile) -> None:
    """The controller's iptables under wanbed-agent/iptables/ (bin/, lib/, xtables/), for an agent whose image has
    none (the node image has none): a partition's chain is made by the agent of the host's machine. The C library
    is the image's own; the binary is run as `iptables` and `iptables-restore` (a multi-call binary, named by its
    argv[0]). Nothing is added when this machine has no iptables: the agent then says so when a partition asks."""
    found = shutil.which("iptables")
    if found is None:
        return
    binary = os.path.realpath(found)
    tar.add(binary, arcname=f"wanbed-agent/iptables/bin/{os.path.basename(binary)}")
    for name in ("iptables", "iptables-restore"):
        link = tarfile.TarInfo(f"wanbed-agent/iptables/bin/{name}")
        link.type, link.linkname = tarfile.SYMTYPE, os.path.basename(binary)
        tar.addfile(link)
    libs = subprocess.run(["ldd", binary], capture_output=True, text=True).stdout
    for path in re.findall(r"=> (/\S+)", libs):
        if not re.match(r"(libc|libm|libdl|libpthread|ld-linux.*)\.so", os.path.basename(path)):
            tar.add(os.path.realpath(path), arcname=f"wanbed-agent/iptables/lib/{os.path.basename(path)}")
    for ext in glob.glob("/usr/lib/*/xtables") + glob.glob("/usr/lib*/xtables"):
        if os.path.isdir(ext):
            tar.add(ext, arcname="wanbed-agent/iptables/xtables")
            break


def _code_tar() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for rel in SHIPPED:
            tar.add(REPO / rel, arcname=f"wanbed-agent/{rel}")
        for rel in EMPTY_INIT:
            info = tarfile.TarInfo(f"wanbed-agent/{rel}")
            info.size = 0
            tar.addfile(info, io.BytesIO(b""))
        _add_iptables(tar)
    return buf.getvalue()


class Agent:
    """One machine's agent container. start() makes it; attach through state() in a later process."""

    def __init__(self, run_id: str, machine: str, engine: Engine, image: str = "") -> None:
        self.run_id = run_id
        self.machine = machine
        self.engine = engine
        self.image = image
        self.container = agent_container(run_id, machine)

    def __repr__(self) -> str:
        return f"Agent({self.machine!r}, {self.engine.address()!r})"

    @classmethod
    def from_state(cls, run_id: str, state: dict[str, Any]) -> Agent:
        return cls(run_id, state["machine"], Engine(state["machine"], state["engine"]))

    def state(self) -> dict[str, Any]:
        return {"machine": self.machine, "engine": self.engine.address(), "container": self.container}

    def start(self) -> dict[str, Any]:
        """Run the agent container on its engine and copy its code in; the agent's `hello` answer."""
        if not self.image:
            raise UserError(f"the agent of machine {self.machine} needs an image.")
        caps = [a for c in CAPABILITIES for a in ("--cap-add", c)]
        try:
            docker(["run", "-d", "--name", self.container, "--network", "host", "--pid", "host", *caps,
                    "--device", "/dev/net/tun", "--user", "0:0", "--no-healthcheck",
                    "--label", f"{RUN_LABEL}={self.run_id}", "--label", f"{PREFIX_LABEL}={PREFIX}",
                    self.image, "sleep", "infinity"], engine=self.engine)
            docker(["cp", "-", f"{self.container}:/opt"], input=_code_tar(), engine=self.engine)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            raise AgentError(f"the agent of machine {self.machine} did not start: {exc}") from None
        return self.request([{"op": "hello"}])[0]

    def request(self, ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Run a list of operations in the agent (one exec); their answers. The first failure raises AgentError."""
        try:
            res = docker(["exec", "-i", "-e", f"PYTHONPATH={CODE_DIR}", self.container, "python", "-m",
                          "testbed.agent.ops"], input=json.dumps(ops), check=False, timeout=EXEC_TIMEOUT,
                         engine=self.engine)
        except subprocess.TimeoutExpired:
            raise AgentError(f"the agent of machine {self.machine} did not answer within "
                             f"{EXEC_TIMEOUT:.0f} s.") from None
        try:
            answers = json.loads(res.stdout)
        except ValueError:
            raise AgentError(f"the agent of machine {self.machine} does not answer: "
                             f"{(res.stderr or res.stdout).strip()[:300]}") from None
        for op, answer in zip(ops, answers):
            if not answer.get("ok"):
                raise AgentError(f"the agent of machine {self.machine}: {op.get('op')}: {answer.get('error')}.")
        return answers

    def close(self) -> None:
        """Remove the agent container: its wire half and the namespace names it made go with it."""
        docker(["rm", "-f", "-v", self.container], check=False, engine=self.engine)


class AgentWireHalf(WireShaper):
    """A wire emulator half run by `agent`: WireShaper's requests, each relayed through the agent.

    Captures: the half cannot write into the controller's run directory, so a link's `pcap` is written in the
    agent (its tag's capture directory, by the file's name) and collect() copies the files back to the paths the
    controller asked for, once the half has ended (its files closed)."""

    def __init__(self, run_id: str, workdir: Path, agent: Agent, half: int,
                 state: dict[str, Any] | None = None) -> None:
        import threading
        self.run_id = run_id
        self.workdir = Path(workdir)
        self.agent = agent
        self.half = half
        self.links = {}
        self._lock = threading.Lock()
        self._conn = None
        self._buf = b""
        self._closed = False
        self.tag = registry.prefix(run_id) + f"h{half}"
        self.pcaps: dict[str, str] = {}     # file name in the agent's capture directory -> the controller's path
        if state is not None:
            self.pid, self.sock_path = int(state["pid"]), state["socket"]
            self.links = dict(state.get("links", {}))
            self.pcaps = dict(state.get("pcaps", {}))
            return
        started = agent.request([{"op": "wire_start", "tag": self.tag}])[0]
        self.pid, self.sock_path = int(started["pid"]), str(started["socket"])

    @classmethod
    def from_state(cls, run_id: str, state: dict[str, Any]) -> AgentWireHalf:
        agent = Agent.from_state(run_id, state["agent"])
        return cls(run_id, Path(state["workdir"]), agent, int(state["half"]), state=state)

    def _call(self, req: dict[str, Any]) -> dict[str, Any]:
        if req.get("pcap"):
            name = Path(req["pcap"]).name
            self.pcaps[name] = str(req["pcap"])
            req = {**req, "pcap": f"{pcap_dir(self.tag)}/{name}"}
        try:
            answer = self.agent.request([{"op": "wire", "socket": self.sock_path, "requests": [req]}])[0]
        except AgentError as exc:
            raise ConnectionError(str(exc)) from None     # WireShaper reports it as "not reachable"
        return answer["answers"][0]

    def state(self) -> dict[str, Any]:
        return {**super().state(), "backend": "wire-agent", "agent": self.agent.state(), "pcaps": self.pcaps}

    def detach(self) -> None:
        pass                     # no connection is held between requests

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._call({"op": "shutdown"})
            if self.pcaps:       # the half closes its captures as it ends
                self.agent.request([{"op": "wait_exit", "pid": self.pid}])
        except (OSError, ValueError, KeyError, UserError):
            pass                 # the agent container's removal ends the half anyway

    def collect(self) -> list[Path]:
        """Copy this half's captures from its agent to the controller's paths (after close()); the paths."""
        if not self.pcaps:
            return []
        res = docker(["cp", f"{self.agent.container}:{pcap_dir(self.tag)}/.", "-"], check=False, input=b"",
                     engine=self.agent.engine)
        if res.returncode != 0:
            raise AgentError(f"the captures of machine {self.agent.machine} could not be copied: "
                             f"{res.stderr.decode(errors='replace').strip()}")
        out = []
        with tarfile.open(fileobj=io.BytesIO(res.stdout)) as tar:
            for member in tar.getmembers():
                name = Path(member.name).name
                target = self.pcaps.get(name)
                f = tar.extractfile(member) if member.isfile() else None
                if target is None or f is None:
                    continue
                Path(target).parent.mkdir(parents=True, exist_ok=True)
                Path(target).write_bytes(f.read())
                out.append(Path(target))
        return out


def pcap_dir(tag: str) -> str:
    """Where a wire half run by an agent writes its captures, inside the agent (testbed/agent/ops.py makes it)."""
    return f"{STATE_DIR}/{tag}-pcap"


class AgentSplitShaper(SplitWireShaper):
    """SplitWireShaper whose halves the agents run; its state() names how a later process reattaches.

    close() also brings the captures home: each half's files are copied from its agent into the run directory,
    and a split link's two files (one direction each, `<link>.<machine>.pcap`) are merged by timestamp into
    `<link>.pcap`, as one emulator writes it (testbed/shaping/pcapmerge.py says why merging is sound here)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        state = kwargs.get("state") or {}
        self.captures: dict[str, str] = dict(state.get("captures", {}))    # split link -> its pcap path

    def add_link(self, link_id: str, a: LinkEnd, b: LinkEnd, a_to_b: Direction, b_to_a: Direction,
                 pcap: Path | None = None, snaplen: int = 128) -> None:
        super().add_link(link_id, a, b, a_to_b, b_to_a, pcap=pcap, snaplen=snaplen)
        if pcap is not None and len(self.links[link_id].machines) == 2:
            self.captures[link_id] = str(pcap)

    def state(self) -> dict[str, Any]:
        return {**super().state(), "attach": f"{__name__}:split_shaper_from_state", "captures": self.captures}

    def close(self) -> None:
        if self._closed:
            return
        super().close()
        for m, half in self.halves.items():
            try:
                half.collect()                          # type: ignore[attr-defined]
            except (AgentError, RuntimeError, OSError, tarfile.TarError) as exc:
                log.error("run %s: the captures of machine %s are lost: %s", self.run_id, m, exc)
        for link_id, path in self.captures.items():
            target = Path(path)
            parts = [target.with_name(f"{target.stem}.{m}{target.suffix}") for m in self.links[link_id].machines]
            try:
                pcapmerge.merge([p for p in parts if p.exists()], target)
            except (OSError, ValueError) as exc:
                log.error("run %s: the halves' captures of link %s are not merged (%s): %s", self.run_id, link_id,
                          exc, ", ".join(str(p) for p in parts))
                continue
            for p in parts:
                p.unlink(missing_ok=True)


def split_shaper(run_id: str, workdir: Path, agents: dict[str, Agent], tunnel_addresses: dict[str, str],
                 placement: dict[str, str]) -> AgentSplitShaper:
    """The run's wire shaper over several machines, each half run by that machine's agent.
    tunnel_addresses: machine -> the address its half's tunnels bind and are reached at; placement: netns ->
    machine."""
    halves: dict[str, WireShaper] = {}
    try:
        for i, m in enumerate(tunnel_addresses):
            halves[m] = AgentWireHalf(run_id, Path(workdir) / m, agents[m], half=i)
    except BaseException:
        for h in halves.values():
            h.close()
        raise
    return AgentSplitShaper(run_id, workdir, tunnel_addresses, placement, halves=halves)


def split_shaper_from_state(state: dict[str, Any]) -> AgentSplitShaper:
    """split_shaper()'s shaper again in a later process, from its state()."""
    run_id = state["run_id"]
    halves: dict[str, WireShaper] = {m: AgentWireHalf.from_state(run_id, s) for m, s in state["halves"].items()}
    return AgentSplitShaper(run_id, Path(state["workdir"]), state["machines"], state["placement"], state=state,
                            halves=halves)
