"""Node daemons on loopback for these tests run with fast session timers (nodenet_support.FAST)."""
from __future__ import annotations

import pytest

from nodenet_support import FAST


@pytest.fixture
def localnet_settings() -> dict:
    return FAST
