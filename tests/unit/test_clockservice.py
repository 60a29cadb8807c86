"""The clock exchange over real UDP on loopback (testbed/clockservice.py): a service whose clock is shifted by a
known (test-only) offset is measured within +-2 ms, and a silent service is one clear error."""
from __future__ import annotations

import socket

import pytest

from testbed.clockoffset import ClockError
from testbed.clockservice import ClockService, measure

pytestmark = pytest.mark.timeout(20)

SHIFT = 0.050


def test_an_injected_50ms_offset_is_found_within_2ms() -> None:
    with ClockService(offset=SHIFT) as service:
        got = measure(service.address, count=20)
    assert got.offset == pytest.approx(SHIFT, abs=0.002)
    assert got.samples == 20 and 0.0 <= got.uncertainty < 0.002
    assert service.answered == 20


def test_a_service_that_never_answers_is_one_sentence_naming_the_machine() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as silent:
        silent.bind(("127.0.0.1", 0))        # bound, so no ICMP refusal: the probes just go unanswered
        with pytest.raises(ClockError, match=r"machine m2 did not answer any of 3 clock probes"):
            measure(silent.getsockname(), count=3, timeout=0.05, machine="m2")


def test_a_stray_datagram_does_not_stop_the_service() -> None:
    with ClockService() as service:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.sendto(b"hello", service.address)
        got = measure(service.address, count=3)
    assert got.offset == pytest.approx(0.0, abs=0.002)
