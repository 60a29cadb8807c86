"""`testbed export SCENARIO --to mininet|kathara [DIR]`: the scenario's network for another emulator.

`--to mininet` prints a runnable Mininet script (stdout, for `> topo.py`); `--to kathara DIR` writes a
lab folder. Both are read back by the `mininet` and `kathara` generators (testbed/topology/importers/).
Anything the target cannot express is one line naming the link, exit status 2. The links are the
ones `testbed run` and `testbed up` build (timescale.wall_topology): wall units, time_scale applied.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from node.errors import UserError
from testbed.commands import examples

FORMATS = ("mininet", "kathara")


def _operands(args: argparse.Namespace) -> tuple[str, str, str | None]:
    """(format, scenario, lab folder or None) from SCENARIO and --to's words, in whatever order they were
    given: `s.yaml --to kathara lab/`, `--to kathara lab/ s.yaml`, `--to mininet s.yaml`. Without a SCENARIO
    before --to, the scenario is the word naming an existing file (a lab folder is new or a folder)."""
    target, *words = args.to
    if target not in FORMATS:
        raise UserError(f"--to {target}: expected mininet or kathara.")
    if args.scenario is not None:
        scenario = args.scenario
    else:
        files = [w for w in words if Path(w).is_file()]
        if len(files) > 1:
            raise UserError(f"--to {target} {' '.join(words)}: give one scenario file (and for kathara one folder).")
        if not files and len(words) != 1:
            raise UserError("give the scenario file: testbed export SCENARIO --to mininet | --to kathara DIR.")
        scenario = files[0] if files else words[0]
        words.remove(scenario)
    if target == "kathara" and len(words) != 1:
        raise UserError("--to kathara writes a lab folder: give one, e.g. testbed export s.yaml --to kathara lab/")
    if target == "mininet" and words:
        raise UserError("--to mininet writes to standard output (testbed export s.yaml --to mininet > topo.py); "
                        "it takes no folder.")
    return target, scenario, words[0] if words else None


def _export(args: argparse.Namespace) -> int:
    from testbed.scenario import load
    from testbed.topology import exporters
    from testbed.topology.exporters import kathara, mininet

    target, scenario, folder = _operands(args)
    net = exporters.from_scenario(load(scenario, overrides=args.set))
    if target == "mininet":
        sys.stdout.write(mininet.export(net))
        return 0
    assert folder is not None
    written = kathara.write(net, folder)
    print(f"wrote {len(written)} files to {folder}: lab.conf and one startup file per machine", file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", usage="testbed export SCENARIO --to mininet | --to kathara DIR [--set KEY=VALUE]",
                       description="Write the scenario's hosts and links (with their per-direction link "
                                   "parameters in wall units, time_scale applied as by run and up) for another "
                                   "emulator: --to mininet prints a Topo script to "
                                   "standard output, --to kathara DIR writes lab.conf and startup files. "
                                   "SCENARIO may come before or after --to.",
                       **examples("testbed export scenarios/quickstart.yaml --to mininet > topo.py",
                                  "testbed export --to kathara lab/ scenarios/quickstart.yaml",
                                  "testbed export scenarios/quickstart.yaml --to mininet --set time_scale=1"))
    p.add_argument("scenario", metavar="SCENARIO", nargs="?",
                   help="scenario YAML file (before --to, or among --to's words after it)")
    # one option with the folder after the format (`--to kathara DIR`): a positional DIR after --to would be
    # taken for SCENARIO's neighbour by argparse and refused; so --to takes the words after it and
    # _operands sorts out which is the scenario
    p.add_argument("--to", required=True, nargs="+", metavar="FORMAT [DIR]",
                   help="mininet (to standard output) or kathara DIR (a new or empty lab folder)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a scenario key before exporting (repeatable)")
    p.set_defaults(handler=_export)
