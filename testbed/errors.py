"""Errors a user can cause. The CLI prints them as one sentence and exits non-zero."""


class UserError(Exception):
    """Bad input, missing privilege or missing kernel feature: shown without a traceback."""

    exit_code = 2


class NotAvailableYet(UserError):
    """A command whose implementation has not landed yet."""

    def __init__(self, command: str, issue: int) -> None:
        super().__init__(f"`testbed {command}` is not available yet (tracked in issue #{issue}).")
