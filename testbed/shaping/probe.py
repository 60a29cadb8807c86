"""Does this kernel have the netem qdisc? Probed once per process in a scratch namespace."""
from __future__ import annotations

import functools
import logging
import subprocess

from testbed import registry

log = logging.getLogger(__name__)


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True)


@functools.lru_cache(maxsize=1)
def netem_available() -> bool:
    """Add a netem qdisc to a dummy interface inside a registered scratch namespace, then remove it all."""
    run_id = registry.new_run_id()
    ns = f"{registry.prefix(run_id)}probe"
    registry.register(run_id, "netem-probe")
    try:
        if _run(["ip", "netns", "add", ns]).returncode != 0:
            return False
        if _run(["ip", "-n", ns, "link", "add", "p0", "type", "dummy"]).returncode != 0:
            return False
        r = _run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "p0", "root", "netem", "delay", "1ms"])
        log.debug("netem probe: rc=%s %s", r.returncode, r.stderr.strip())
        return r.returncode == 0
    except FileNotFoundError:       # no ip/tc binaries
        return False
    finally:
        _run(["ip", "netns", "del", ns])
        registry.unregister(run_id)
