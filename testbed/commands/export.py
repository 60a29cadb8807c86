"""`testbed export SCENARIO --to mininet|kathara [DIR]`: the scenario's network for another emulator.

`--to mininet` prints a runnable Mininet script (stdout, for `> topo.py`); `--to kathara DIR` writes a
lab folder. Both are read back by the `mininet` and `kathara` generators (testbed/topology/importers/).
Anything the target cannot express is one line naming the link, exit status 2. The links are the
ones `testbed run` and `testbed up` build (timescale.wall_topology): wall units, time_scale applied.
"""
from __future__ import annotations

import argparse
import sys

from node.errors import UserError

FORMATS = ("mininet", "kathara")


def _export(args: argparse.Namespace) -> int:
    from testbed.scenario import load
    from testbed.topology import exporters
    from testbed.topology.exporters import kathara, mininet

    target, *rest = args.to
    if target not in FORMATS:
        raise UserError(f"--to {target}: expected mininet or kathara.")
    if target == "kathara" and len(rest) != 1:
        raise UserError("--to kathara writes a lab folder: give one, e.g. testbed export s.yaml --to kathara lab/")
    if target == "mininet" and rest:
        raise UserError("--to mininet writes to standard output (testbed export s.yaml --to mininet > topo.py); "
                        "it takes no folder.")
    net = exporters.from_scenario(load(args.scenario, overrides=args.set))
    if target == "mininet":
        sys.stdout.write(mininet.export(net))
        return 0
    written = kathara.write(net, rest[0])
    print(f"wrote {len(written)} files to {rest[0]}: lab.conf and one startup file per machine", file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", usage="testbed export SCENARIO --to mininet | --to kathara DIR [--set KEY=VALUE]",
                       help="write a scenario's network as a Mininet script or a Kathará lab",
                       description="Write the scenario's hosts and links (with their per-direction link "
                                   "parameters in wall units, time_scale applied as by run and up) for another "
                                   "emulator: --to mininet prints a Topo script to "
                                   "standard output, --to kathara DIR writes lab.conf and startup files.")
    p.add_argument("scenario", metavar="SCENARIO", help="scenario YAML file")
    # one option with the folder after the format (`--to kathara DIR`): a positional DIR after --to would be
    # taken for SCENARIO's neighbour by argparse and refused
    p.add_argument("--to", required=True, nargs="+", metavar="FORMAT [DIR]",
                   help="mininet (to standard output) or kathara DIR (a new or empty lab folder)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a scenario key before exporting (repeatable)")
    p.set_defaults(handler=_export)
