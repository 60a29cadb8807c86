"""`testbed pools` against a real daemon that runs no pools (a run without a `pools:` section): one line, exit 2."""
from __future__ import annotations

import pytest

from nodenet_support import chain
from testbed import cli

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def net():
    yield from chain("wanbed-pools-cli-", ["n1"])


def test_a_node_without_pools_is_one_line_and_status_2(net, capsys) -> None:
    assert cli.main(["pools", "n1", "--address", net.nodes["n1"].mgmt]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("testbed: pools of n1:") and "runs no pools" in err[0], err
