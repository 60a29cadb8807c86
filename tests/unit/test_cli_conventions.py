"""Conventions every `testbed` command keeps: an epilog with examples, help on every positional, `up` saying
it needs root, --resume's help agreeing with the README, `export` taking its words in any order, unit-bearing
values for send/pub, `reproduce --list --json` with estimated wall times, shell completion."""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from testbed import cli

pytestmark = pytest.mark.timeout(120)
ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = str(ROOT / "scenarios" / "quickstart.yaml")


def tb(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def subparsers(parser: argparse.ArgumentParser, path: str = "testbed") -> Iterator[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield f"{path} {name}", sub
                yield from subparsers(sub, f"{path} {name}")


def test_every_command_has_examples_and_help_on_its_positionals() -> None:
    commands = list(subparsers(cli.build_parser()))
    assert len(commands) >= 25
    for path, p in commands:
        epilog = p.epilog or ""
        assert "examples:" in epilog, f"{path}: no examples in its --help"
        lines = epilog.split("examples:", 1)[1].strip().splitlines()
        assert lines and all(re.match(r"\s*(\S+=\S+ |date \| |sudo )?testbed ", l) for l in lines), (path, lines)
        assert any(path.split(" ", 1)[1] in l for l in lines), f"{path}: no example runs it"
        for a in p._actions:
            if not a.option_strings and not isinstance(a, argparse._SubParsersAction):
                assert a.help and a.help != argparse.SUPPRESS, f"{path}: positional {a.dest} has no help"
        p.format_help()        # every help string formats (a stray % would raise here)


def test_up_says_it_needs_root_and_resume_help_agrees_with_the_readme() -> None:
    parsers = dict(subparsers(cli.build_parser()))
    up = parsers["testbed up"]
    assert "root" in up.format_help()
    [resume] = [a.help for a in parsers["testbed run"]._actions if "--resume" in a.option_strings]
    readme = (ROOT / "README.md").read_text()
    bullet = readme[readme.index("- `--resume`: "):].split("\n- ", 1)[0]
    # both say what is skipped (complete repetitions, not cells) and what is run again
    for words in ("skip", "repetitions", "did not complete", "seed"):
        assert words in resume and words in bullet, (words, resume, bullet)


def test_export_takes_the_scenario_before_or_after_to(capsys, tmp_path: Path) -> None:
    code, before, err = tb(capsys, "export", QUICKSTART, "--to", "mininet")
    assert code == 0, err
    code, after, err = tb(capsys, "export", "--to", "mininet", QUICKSTART)
    assert code == 0 and after == before, err
    code, _, err = tb(capsys, "export", "--to", "kathara", str(tmp_path / "lab"), QUICKSTART)
    assert code == 0 and (tmp_path / "lab" / "lab.conf").is_file(), err
    code, _, err = tb(capsys, "export", "--to", "kathara", QUICKSTART)
    assert code == 2 and "give one" in err


def test_send_and_pub_take_units_and_refuse_bad_ones_in_one_line(capsys) -> None:
    args = cli.build_parser().parse_args(["send", "n1", "--to", "n2", "--size", "100kB", "--lifetime", "10s"])
    from testbed.commands.messaging import read_body, read_lifetime
    assert read_body(args) == (None, 100_000) and read_lifetime(args) == 10.0
    args = cli.build_parser().parse_args(["pub", "n1", "t.x", "--size", "4KiB", "--lifetime", "2m"])
    assert read_body(args) == (None, 4096) and read_lifetime(args) == 120.0
    # checked before any node is asked: the address is never dialled
    for argv in (["send", "n1", "--to", "n2", "--size", "lots", "--address", "127.0.0.1:9"],
                 ["send", "n1", "--to", "n2", "--size", "1kB", "--lifetime", "soon", "--address", "127.0.0.1:9"],
                 ["pub", "n1", "t.x", "--size", "-5", "--address", "127.0.0.1:9"]):
        code, out, err = tb(capsys, *argv)
        assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("testbed: --"), (argv, err)


def test_reproduce_list_json_has_estimated_wall_times(capsys, monkeypatch, tmp_path: Path) -> None:
    from testbed.reproduce import spec
    # one shipped figure (its scenario found from the copy) and a broken one: planning all of them takes seconds
    figure = (ROOT / "reproductions" / "brachman-6.9.yaml").read_text()
    scenario = re.search(r"^scenario: (\S+)", figure, re.M).group(1)
    (tmp_path / "fig.yaml").write_text(figure.replace(f"scenario: {scenario}",
                                                      f"scenario: {(ROOT / 'reproductions' / scenario).resolve()}"))
    (tmp_path / "broken.yaml").write_text("title: x\n")
    monkeypatch.setattr(spec, "FOLDER", tmp_path)
    code, out, err = tb(capsys, "reproduce", "--list", "--json")
    assert code == 0, err
    broken, fig = json.loads(out)
    assert broken["name"] == "broken" and broken["error"] and broken["estimate_s"] is None
    assert fig["name"] == "fig" and fig["error"] is None and fig["title"].startswith("Brachman 1989, Fig. 6.9")
    assert fig["repetitions"] == 15 and fig["estimate_s"] > 15 * 10     # each rep: duration, drain, 10 s set-up
    code, text, _ = tb(capsys, "reproduce", "--list")
    assert code == 0 and "broken" in text and f"~{round(fig['estimate_s'] / 60)} min" in text


def test_shell_completion_completes_commands(tmp_path: Path) -> None:
    pytest.importorskip("argcomplete")
    out = tmp_path / "completions"
    line = "testbed rep"
    env = {**os.environ, "_ARGCOMPLETE": "1", "_ARGCOMPLETE_IFS": "\n", "COMP_LINE": line,
           "COMP_POINT": str(len(line)), "_ARGCOMPLETE_STDOUT_FILENAME": str(out)}
    r = subprocess.run([sys.executable, "-m", "testbed"], env=env, capture_output=True, text=True, timeout=60,
                       cwd=ROOT, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    assert sorted(w.strip() for w in out.read_text().split("\n") if w.strip()) == ["report", "reproduce"]


def test_up_and_status_tables_off_a_terminal_are_not_folded(capsys) -> None:
    from testbed.commands.network import _print_tables
    ifs = [{"ifname": f"eth{i}", "address": f"10.200.{i}.1/30", "link": f"n1-n{i}"} for i in range(1, 7)]
    direction = {"delay": 0.025, "jitter": 0.005, "loss": 0.01, "rate": 320e3}
    desc = {"run_id": "abc123", "topology": "star", "runtime": "netns", "shaper": "netem",
            "hosts": [{"name": "n1", "mgmt_address": "10.99.0.2", "data_address": "10.255.0.1", "interfaces": ifs}],
            "links": [{"name": "n1-n2", "state": "up", "a_to_b": direction, "b_to_a": direction}]}
    _print_tables(desc)
    lines = capsys.readouterr().out.splitlines()
    [host] = [l for l in lines if l.startswith("n1 ")]
    assert "eth1=10.200.1.1/30" in host and "eth6=10.200.6.1/30" in host and len(host) > 80
    [link] = [l for l in lines if l.startswith("n1-n2 ")]
    assert link.count("rate 320kbit") == 2


# What the parser and the light commands must not import (pyroute2, gRPC, Spark, rich, the node's subsystems):
# each costs a noticeable share of a second at every start of `testbed`, which the tests start thousands of times.
LOADED = r"""
import sys
from testbed import cli
for argv in sys.argv[1:]:
    try:
        cli.main(argv.split())
    except SystemExit:
        pass
heavy = {"pyroute2", "grpc", "pyspark", "rich", "node.registry", "node.client"}
print(" ".join(sorted(heavy & {m.split(".")[0] for m in sys.modules} | heavy & set(sys.modules))), file=sys.stderr)
"""


def test_help_and_light_commands_import_no_heavy_package(tmp_path: Path) -> None:
    # one fresh interpreter: the help of the whole CLI and of the network commands, `status` with no network up
    # (an empty registry of its own, whatever else runs on the machine)
    argv = ["--help", "clean --help", "status --help", "exec --help", "link --help", "check --help",
            "status --json"]
    r = subprocess.run([sys.executable, "-c", LOADED, *argv], capture_output=True, text=True, timeout=60, cwd=ROOT,
                       env={**os.environ, "WANBED_REGISTRY": str(tmp_path)})
    loaded = r.stderr.strip().splitlines()[-1].split() if r.stderr.strip() else []
    assert r.returncode == 0 and '"running": false' in r.stdout, r.stderr
    assert not loaded, f"loaded by parsing or by a light command: {loaded}"


def test_every_command_is_listed_once_with_its_own_parser() -> None:
    # the table that lists commands without importing them names exactly the parsers the groups register
    sub = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    parsers = dict(sub.choices.items())
    assert list(parsers) == list(cli.COMMANDS)
    assert all(p.prog == f"testbed {name}" for name, p in parsers.items())
    assert [a.dest for a in sub._choices_actions] == list(cli.COMMANDS)
