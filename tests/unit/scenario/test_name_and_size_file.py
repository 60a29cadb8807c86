"""Scenario inputs that name or read something on disk: the scenario name and an empirical size file."""
from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from node.errors import UserError
from testbed.experiment.workload import read_sizes
from testbed.scenario import ScenarioError, load, load_text
from testbed.scenario.sections.workload import SIZE_FILE_MAX_BYTES

pytestmark = pytest.mark.timeout(30)     # reading /dev/zero or opening a FIFO would hang: fail instead


def _one_sentence(err: BaseException) -> str:
    assert isinstance(err, UserError)
    text = str(err)
    assert "\n" not in text and "Traceback" not in text
    return text


# ---- name ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", [".", ".."])
def test_dot_names_are_refused(name: str) -> None:
    with pytest.raises(ScenarioError) as info:
        load_text(f"name: '{name}'\n")
    text = _one_sentence(info.value)
    assert f'name: expected a name other than "{name}"' in text


@pytest.mark.parametrize("name", [".", ".."])
def test_dot_names_are_refused_from_set(name: str) -> None:
    with pytest.raises(ScenarioError, match="expected a name other than"):
        load_text("name: fine\n", overrides=[f"name={name}"])


@pytest.mark.parametrize("name", ["a.b", "...", ".hidden", "v1.2"])
def test_names_with_dots_are_still_fine(name: str) -> None:
    assert load_text(f"name: '{name}'\n").name == name


# ---- workload size file --------------------------------------------------------------------

def _scenario(tmp_path: Path, file: str) -> Path:
    p = tmp_path / "s.yaml"
    p.write_text(textwrap.dedent(f"""\
        name: emp
        topology: {{generator: ring, params: {{n: 3}}}}
        workload:
          generators:
            - size: {{dist: empirical, file: '{file}'}}
        """))
    return p


def _refused(path: Path, needle: str) -> str:
    with pytest.raises(ScenarioError) as info:
        load(path)
    text = _one_sentence(info.value)
    assert "workload.generators[0].size.file" in text and needle in text, text
    return text


def test_dev_zero_is_refused_at_validation(tmp_path: Path) -> None:
    _refused(_scenario(tmp_path, "/dev/zero"), "/dev/zero is a device; expected a regular file")


def test_fifo_is_refused_at_validation(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "sizes.fifo")
    _refused(_scenario(tmp_path, "sizes.fifo"), "is a FIFO")


def test_directory_is_refused_at_validation(tmp_path: Path) -> None:
    (tmp_path / "sizes").mkdir()
    _refused(_scenario(tmp_path, "sizes"), "is a directory")


def test_file_over_the_limit_is_refused_unread(tmp_path: Path) -> None:
    big = tmp_path / "sizes.txt"
    with open(big, "wb") as f:                 # sparse: no disk space, and nothing to read
        f.truncate(SIZE_FILE_MAX_BYTES + 1)
    text = _refused(_scenario(tmp_path, "sizes.txt"), f"expected at most {SIZE_FILE_MAX_BYTES} bytes")
    assert SIZE_FILE_MAX_BYTES == 64 << 20 and "64 MiB" in text


def test_regular_file_at_the_limit_and_missing_file_still_load(tmp_path: Path) -> None:
    ok = tmp_path / "sizes.txt"
    ok.write_text("100\n")
    with open(ok, "r+b") as f:
        f.truncate(SIZE_FILE_MAX_BYTES)
    assert load(_scenario(tmp_path, "sizes.txt")).workload.generators[0].size.file == "sizes.txt"
    # A missing file is reported by the workload plan ("does not exist"), as before.
    assert load(_scenario(tmp_path, "nowhere.txt")).workload.generators[0].size.file == "nowhere.txt"


@pytest.mark.parametrize("kind", ["device", "fifo", "directory", "big"])
def test_read_sizes_refuses_without_reading(tmp_path: Path, kind: str) -> None:
    """A Scenario built in code (or a file swapped after validation) reaches read_sizes: same refusal."""
    path = Path("/dev/zero")
    if kind == "fifo":
        path = tmp_path / "f"
        os.mkfifo(path)
    elif kind == "directory":
        path = tmp_path
    elif kind == "big":
        path = tmp_path / "big"
        with open(path, "wb") as f:
            f.truncate(SIZE_FILE_MAX_BYTES + 1)
    with pytest.raises(ScenarioError) as info:
        read_sizes(path, "workload.generators[0].size")
    text = _one_sentence(info.value)
    assert text.startswith("workload.generators[0].size.file: the empirical size file") and text.endswith(".")


def test_read_sizes_regular_file_still_works(tmp_path: Path) -> None:
    p = tmp_path / "sizes.txt"
    p.write_text("# measured\n100\n\n2KiB  # comment\n")
    assert read_sizes(p) == [100, 2048]
