"""The error a bad topology parameter raises, below both the generators and the importers that raise it."""
from __future__ import annotations


class ParamError(ValueError):
    """A bad generator parameter; `param` names it (for the loader's key path)."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param
