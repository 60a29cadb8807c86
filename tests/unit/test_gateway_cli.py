"""`testbed gateway`: its argument checks (one line, status 2, before any node is asked) and its text form."""
from __future__ import annotations

import pytest

from testbed import cli
from testbed.commands.gateway import render


@pytest.mark.parametrize("args,words", [
    (["--throughput", "1"], "go with --request USER"),
    (["--request", "alice", "--throughput", "1"], "needs --throughput, --guarantee and --percent"),
    (["--request", "alice", "--throughput", "1", "--guarantee", "0.5", "--percent", "9", "--gamma", "1"],
     "nothing to set"),
    (["--gamma", "nan"], "--gamma must be a finite number"),
    (["--threshold", "-1"], "--threshold must be a number of messages"),
])
def test_bad_arguments_are_one_line(args, words, capsys, monkeypatch):
    monkeypatch.setenv("WANBED_NODES", "gw=127.0.0.1:1")      # never dialled: refused before
    assert cli.main(["gateway", "gw", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0]


def test_render_shows_connectors_users_and_refusals():
    text = render("gw", {"gamma": 1.0, "maxrate": 0.0, "threshold": 200, "phi_out": 4.9, "dropped": 0,
                         "outgoing": {"o1": {"queue": 203, "deactivated": True, "rate": 1.0, "sent": 412}},
                         "incoming": {"s1": {"throughput": 0.0, "accepted": 10, "deferred": 3}},
                         "users": {"alice": {"credits": None}},
                         "refused": {"throttled": 1, "no_credits": 0, "locked": 0, "not_permitted": 0}})
    assert text.splitlines()[0] == "gw: gamma 1, threshold 200, MAXRATE 0 msg/s, Phi_out 4.9 msg/s, dropped 0"
    assert "o1        203    off  1     412" in text and "alice  unlimited" in text and "throttled 1" in text
