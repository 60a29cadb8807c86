"""What a client's submission must satisfy before anything is stored (routes are checked by the engine)."""
from __future__ import annotations

import math

from node.config import NodeConfig
from node.names import is_node_name, is_user_name

MAX_LIFETIME = 10 * 365 * 86400.0


def submission_problem(cfg: NodeConfig, recipients: list[tuple[str, str]], size: int, priority: int,
                       lifetime: float) -> str | None:
    """The reason to refuse a submission, or None."""
    lim = cfg.limits
    if not recipients:
        return "no recipients"
    if len(recipients) > lim.max_recipients:
        return f"{len(recipients)} recipients exceed the limit of {lim.max_recipients}"
    if size < 0 or size > lim.max_message_size:
        return f"message size {size} exceeds the limit of {lim.max_message_size} bytes"
    if priority < 0 or priority > lim.max_priority:
        return f"priority {priority} outside 0..{lim.max_priority}"
    if not (0 <= lifetime <= MAX_LIFETIME) or math.isnan(lifetime):
        return f"lifetime {lifetime} is not between 0 and {MAX_LIFETIME:.0f} seconds"
    for node, user in recipients:
        if not is_node_name(node):
            return f"invalid recipient node {node!r}"
        if user and not is_user_name(user):
            return f"invalid recipient user {user!r}"
        if node == cfg.name and cfg.local_users and user not in cfg.local_users:
            return f"unknown recipient {user}@{node}"
    return None
