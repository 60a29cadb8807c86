"""The agent's side of a request: runs in the agent container, standard library only.

`python -m testbed.agent.ops` reads one JSON list of operations from stdin and
writes one JSON list of answers to stdout, in order; it stops at the first
operation that fails (its answer is {"ok": false, "error": ...}, the ones after
it are not run), so a set-up list is never half applied silently. Operations:

    {"op": "hello"}                                 -> {"ok", "pid", "tun", "kernel", "boot_id"}
    {"op": "attach", "netns": NAME, "pid": PID}     name PID's network namespace NAME (as `ip netns attach`)
    {"op": "detach", "netns": NAME}                 forget a name (the namespace lives while its processes do)
    {"op": "ip", "netns": NAME|null, "batch": TEXT} `ip [-n NAME] -batch -`
    {"op": "sysctl", "netns": NAME, "values": {KEY: VALUE}}
    {"op": "wire_start", "tag": TAG}                start this machine's wire emulator half -> {"pid", "socket"};
                                                    its captures go to STATE_DIR/TAG-pcap/
    {"op": "wire", "socket": PATH, "requests": [REQ, ...]}   relay requests to it -> {"answers": [...]}
    {"op": "wait_exit", "pid": PID}                 wait for a process (a half told to shut down) to end
    {"op": "chain", "netns": NAME, "chain": CHAIN, "rules": TEXT|null}
                                                    a partition: put iptables-restore `rules` (the filter table's
                                                    CHAIN) in NAME's INPUT and OUTPUT; null: remove CHAIN
    {"op": "clock_start", "tag": TAG, "host": ADDR, "offset": S}
                                                    start this machine's clock service (testbed/clockservice.py)
                                                    on ADDR -> {"pid", "port"}; `offset` is for tests only
"""
from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import time
from typing import Any

STATE_DIR = "/run/wanbed-agent"      # the wire halves' sockets and logs (inside the agent container)
WIRE_START_TIMEOUT = 10.0            # s for a started half to answer on its control socket
CLOCK_START_TIMEOUT = 10.0           # s for a started clock service to say its port
WAIT_EXIT_TIMEOUT = 10.0             # s for a wire half told to shut down to end (its captures closed)
# The controller's iptables, shipped with the agent's code when the node image has none (testbed/agent/controller.py):
# its binary, the libraries it needs beyond the C library, and its extensions.
IPTABLES_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                            "iptables")


class OpError(Exception):
    """An operation that failed; its message is the answer's `error`."""


def _run(argv: list[str], stdin: str | None = None) -> str:
    res = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=60)
    if res.returncode != 0:
        why = "; ".join(line.strip() for line in (res.stderr or res.stdout).splitlines() if line.strip())
        raise OpError(f"{' '.join(argv[:4])} failed: {why}")
    return res.stdout


def _sysctl(netns: str, values: dict[str, str]) -> None:
    # /proc/sys is read-only in a container: remount it writable in a mount namespace of this command's own
    # (unshare -m), entered into the host's network namespace first so /proc/sys/net is that namespace's.
    script = "mount -o remount,rw /proc/sys && " + " && ".join(
        f"echo {shlex.quote(str(v))} > {shlex.quote('/proc/sys/' + k.replace('.', '/'))}" for k, v in values.items())
    _run(["ip", "netns", "exec", netns, "unshare", "-m", "sh", "-c", script])


def _iptables_env() -> dict[str, str]:
    """The environment that runs `iptables`: the image's own when it has one, else the shipped one."""
    env = dict(os.environ)
    if not any(os.path.exists(os.path.join(d, "iptables")) for d in env.get("PATH", "").split(":") if d) \
            and os.path.isdir(IPTABLES_DIR):
        env.update(PATH=f"{IPTABLES_DIR}/bin:{env.get('PATH', '')}", LD_LIBRARY_PATH=f"{IPTABLES_DIR}/lib",
                   XTABLES_LIBDIR=f"{IPTABLES_DIR}/xtables")
    return env


def _chain(netns: str, chain: str, rules: str | None) -> None:
    # The same rules and hooks as the controller's own partition (testbed/network.py): a chain of the run in
    # INPUT and OUTPUT, loaded with iptables-restore --noflush; removed hooks first, then the chain.
    if rules is None:
        script = (f"iptables -w -D INPUT -j {chain} 2>/dev/null; iptables -w -D OUTPUT -j {chain} 2>/dev/null; "
                  f"iptables -w -F {chain} 2>/dev/null; iptables -w -X {chain} 2>/dev/null; "
                  f"! iptables -w -n -L {chain} >/dev/null 2>&1")
    else:
        script = (f"iptables -w -N {chain} 2>/dev/null; "
                  f"iptables -w -C INPUT -j {chain} 2>/dev/null || iptables -w -I INPUT 1 -j {chain}; "
                  f"iptables -w -C OUTPUT -j {chain} 2>/dev/null || iptables -w -I OUTPUT 1 -j {chain}; "
                  "iptables-restore -w --noflush")
    res = subprocess.run(["ip", "netns", "exec", netns, "sh", "-c", script], input=rules or "",
                         capture_output=True, text=True, timeout=60, env=_iptables_env())
    if res.returncode != 0:
        why = "; ".join(line.strip() for line in (res.stderr or res.stdout).splitlines() if line.strip())
        raise OpError(f"iptables in {netns} failed: {why or 'chain ' + chain + ' is still there'}")


def _wire_call(path: str, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
        c.settimeout(30)
        c.connect(path)
        buf = b""
        for req in requests:
            c.sendall(json.dumps(req).encode() + b"\n")
            while b"\n" not in buf:
                data = c.recv(65536)
                if not data:
                    raise OpError("the wire emulator closed its control connection")
                buf += data
            line, _, buf = buf.partition(b"\n")
            out.append(json.loads(line))
    return out


def _wire_start(tag: str) -> dict[str, Any]:
    os.makedirs(STATE_DIR, exist_ok=True)
    # the half's captures, which the controller copies out after the half has ended
    os.makedirs(f"{STATE_DIR}/{tag}-pcap", exist_ok=True)
    sock = f"{STATE_DIR}/{tag}-wire.sock"
    with open(f"{STATE_DIR}/{tag}-wire.log", "ab") as logf:
        # start_new_session: the half outlives this exec, as the local emulator outlives `testbed up`
        proc = subprocess.Popen([sys.executable, "-m", "testbed.shaping.wire_emulator", "--socket", sock,
                                 "--prefix", tag], stdout=logf, stderr=logf, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    deadline = time.monotonic() + WIRE_START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise OpError(f"the wire emulator exited at start (log {STATE_DIR}/{tag}-wire.log in the agent)")
        try:
            _wire_call(sock, [{"op": "ping"}])
            return {"pid": proc.pid, "socket": sock}
        except OSError:
            time.sleep(0.02)
    proc.kill()
    raise OpError("the wire emulator did not answer on its control socket within "
                  f"{WIRE_START_TIMEOUT:.0f} s")


def _clock_start(tag: str, host: str, offset: float) -> dict[str, Any]:
    os.makedirs(STATE_DIR, exist_ok=True)
    port_file, log = f"{STATE_DIR}/{tag}-clock.port", f"{STATE_DIR}/{tag}-clock.log"
    if os.path.exists(port_file):
        os.unlink(port_file)
    with open(log, "ab") as logf:
        # detached like the wire half: the service outlives this exec and goes with the agent's container
        proc = subprocess.Popen([sys.executable, "-m", "testbed.clockservice", "--host", host, "--offset",
                                 repr(float(offset)), "--port-file", port_file], stdout=logf, stderr=logf,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + CLOCK_START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            with open(log, errors="replace") as f:
                last = [line.strip() for line in f if line.strip()][-1:] or ["no output"]
            raise OpError(f"the clock service exited at start on {host}: {last[0]}")
        if os.path.exists(port_file):
            with open(port_file) as f:
                return {"pid": proc.pid, "port": int(f.read().strip())}
        time.sleep(0.02)
    proc.kill()
    raise OpError(f"the clock service on {host} did not start within {CLOCK_START_TIMEOUT:.0f} s")


def _wait_exit(pid: int, timeout: float) -> None:
    # The half is no child of this exec (started by an earlier one): gone, or a zombie nobody reaped yet, is ended.
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    return
        except OSError:
            return
        time.sleep(0.02)
    raise OpError(f"process {pid} did not end within {timeout:.0f} s")


def run_op(op: dict[str, Any]) -> dict[str, Any]:
    kind = op.get("op")
    if kind == "hello":
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot_id = f.read().strip()
        return {"pid": os.getpid(), "tun": os.path.exists("/dev/net/tun"), "kernel": os.uname().release,
                "boot_id": boot_id}
    if kind == "attach":
        # a name left from an earlier attach (a restarted container has a new namespace) is replaced
        subprocess.run(["ip", "netns", "delete", str(op["netns"])], capture_output=True)
        _run(["ip", "netns", "attach", str(op["netns"]), str(int(op["pid"]))])
        return {}
    if kind == "detach":
        subprocess.run(["ip", "netns", "delete", str(op["netns"])], capture_output=True)
        return {}
    if kind == "ip":
        ns = op.get("netns")
        _run(["ip", *(["-n", ns] if ns else []), "-batch", "-"], stdin=op["batch"])
        return {}
    if kind == "sysctl":
        _sysctl(str(op["netns"]), dict(op["values"]))
        return {}
    if kind == "wire_start":
        return _wire_start(str(op["tag"]))
    if kind == "wire":
        return {"answers": _wire_call(str(op["socket"]), list(op["requests"]))}
    if kind == "wait_exit":
        _wait_exit(int(op["pid"]), float(op.get("timeout", WAIT_EXIT_TIMEOUT)))
        return {}
    if kind == "chain":
        _chain(str(op["netns"]), str(op["chain"]), None if op.get("rules") is None else str(op["rules"]))
        return {}
    if kind == "clock_start":
        return _clock_start(str(op["tag"]), str(op["host"]), float(op.get("offset", 0.0)))
    raise OpError(f"unknown operation {kind!r}")


def run(ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    answers: list[dict[str, Any]] = []
    for op in ops:
        try:
            answers.append({"ok": True, **run_op(op)})
        except (OpError, OSError, KeyError, ValueError, TypeError, subprocess.TimeoutExpired) as exc:
            answers.append({"ok": False, "error": str(exc) or type(exc).__name__})
            break
    return answers


def main() -> None:
    try:
        ops = json.load(sys.stdin)
        if not isinstance(ops, list):
            raise ValueError("expected a JSON list of operations")
    except ValueError as exc:
        json.dump([{"ok": False, "error": f"bad request: {exc}"}], sys.stdout)
        return
    json.dump(run(ops), sys.stdout)


if __name__ == "__main__":
    main()
