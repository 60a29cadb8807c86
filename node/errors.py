"""Errors a user can cause, shared by the node, the testbed and the analysis.

Every command line prints a `UserError` as one sentence and exits with its
`exit_code`; anything else is a bug and keeps its traceback.
"""


class UserError(Exception):
    """Bad input, missing privilege or missing kernel feature: shown without a traceback."""

    exit_code = 2


class ConfigError(UserError):
    """A node configuration is invalid (node/config.py and the subsystems' sections)."""


DETAILS_MAX = 500     # characters of a status message (non-ASCII ones travel percent-encoded, up to 12 bytes each)


def clip(text: str) -> str:
    """A status message that echoes client input, cut short: the message travels in a gRPC trailer, and one over
    the client's metadata limit (16 KiB) reaches it as RESOURCE_EXHAUSTED 'received metadata size exceeds hard
    limit' instead of the node's answer (found by tests/integration/node/test_node_fuzz.py)."""
    return text if len(text) <= DETAILS_MAX else f"{text[:DETAILS_MAX]}... ({len(text)} characters in all)"
