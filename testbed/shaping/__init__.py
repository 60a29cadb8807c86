"""Link shaping: one meaning, two backends (kernel netem, userspace `wire` emulator).

make_shaper() picks the backend ("auto" = netem when the kernel has it, else
wire); attach() rebuilds a shaper from its state() in a later process. A network
over several machines uses split.SplitWireShaper: one wire emulator per machine,
links across machines joined by UDP tunnels.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from node.errors import UserError
from testbed.shaping.base import DirectionCounters, LinkEnd, Shaper


def make_shaper(choice: str, run_id: str, workdir: Path) -> tuple[Shaper, str]:
    from testbed.shaping.probe import netem_available
    if choice not in ("auto", "netem", "wire"):
        raise UserError(f"unknown shaper {choice!r}: expected auto, netem or wire.")
    if choice == "netem":
        if not netem_available():
            raise UserError("the netem shaper was requested but this kernel has no netem qdisc (use --shaper wire).")
        from testbed.shaping.netem import NetemShaper
        return NetemShaper(run_id, Path(workdir)), "shaper: netem (requested)"
    if choice == "auto" and netem_available():
        from testbed.shaping.netem import NetemShaper
        return NetemShaper(run_id, Path(workdir)), "shaper: netem (kernel netem qdisc available)"
    from testbed.shaping.wire import WireShaper
    why = "requested" if choice == "wire" else "this kernel has no netem qdisc"
    return WireShaper(run_id, Path(workdir)), f"shaper: wire ({why})"


def attach(state: dict[str, Any]) -> Shaper:
    """A shaper object for a running network, from the dict its state() returned."""
    backend = state.get("backend")
    if backend == "wire":
        from testbed.shaping.wire import WireShaper
        return WireShaper(state["run_id"], Path(state["workdir"]), state=state)
    if backend == "wire-split":
        from testbed.shaping.split import SplitWireShaper
        return SplitWireShaper(state["run_id"], Path(state["workdir"]), state["machines"], state["placement"],
                               state=state)
    if backend == "netem":
        from testbed.shaping.netem import NetemShaper
        return NetemShaper(state["run_id"], Path(state["workdir"]), state=state)
    raise UserError(f"unknown shaper state (backend {backend!r}).")


__all__ = ["DirectionCounters", "LinkEnd", "Shaper", "attach", "make_shaper"]
