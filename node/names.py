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
# message ids: what this node makes (<node>-<hex>, ndr.<id>.<node>) and what a client may pass through;
# no white space or control characters, so an id never splits a log or record line
MESSAGE_ID_MAX = 200
_MESSAGE_ID = re.compile(rf"[A-Za-z0-9_.:@+-]{{1,{MESSAGE_ID_MAX}}}")


def is_node_name(name: object) -> bool:
    return isinstance(name, str) and _NODE.fullmatch(name) is not None


def is_user_name(name: object) -> bool:
    return isinstance(name, str) and _USER.fullmatch(name) is not None


def is_message_id(msg_id: object) -> bool:
    return isinstance(msg_id, str) and _MESSAGE_ID.fullmatch(msg_id) is not None
