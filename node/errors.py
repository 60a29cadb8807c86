"""Errors a user can cause, shared by the node, the testbed and the analysis.

Every command line prints a `UserError` as one sentence and exits with its
`exit_code`; anything else is a bug and keeps its traceback.
"""


class UserError(Exception):
    """Bad input, missing privilege or missing kernel feature: shown without a traceback."""

    exit_code = 2
