"""The one rule for names that cross process boundaries: node names and mailbox user names.

Node names become parts of interface names, file names and message ids, so
they are short and plain: 1-10 ASCII letters, digits, '_' or '-'. User names
(the part before '@') may also hold '.', up to 64 characters. Both are matched
whole (`fullmatch`): a trailing newline is not part of a valid name.
"""
from __future__ import annotations

import re

NODE_NAME_MAX = 10
NODE_NAME_RULE = f"1-{NODE_NAME_MAX} letters, digits, '_' or '-'"
_NODE = re.compile(rf"[A-Za-z0-9_-]{{1,{NODE_NAME_MAX}}}")
_USER = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")


def is_node_name(name: object) -> bool:
    return isinstance(name, str) and _NODE.fullmatch(name) is not None


def is_user_name(name: object) -> bool:
    return isinstance(name, str) and _USER.fullmatch(name) is not None
