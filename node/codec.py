"""The wire codec of the Link protocol: Fragment and Run frames <-> spool pieces.

Frames from a neighbour are validated here (one Refusal per refused
fragment); the engine only ever sees valid pieces. A Run frame carries
consecutive fragments of one message copy with the header once.
"""
from __future__ import annotations

import math
from typing import Callable, Mapping

from node.config import NodeConfig
from node.names import is_message_id, is_node_name, is_user_name
from node.reports import REPORT_KIND, REPORTER
from node.rpc import link_pb2
from node.piece import Piece
from node.refusal import Refusal

# a subsystem's message kinds a neighbour may pass on: kind -> (msg_id, originator) -> accepted
# (node/subsystem.py MessageKind.accept, collected by the engine's hooks)
Accept = Mapping[str, Callable[[str, str], bool]]
NO_KINDS: Accept = {}

MAX_RUN = 65536            # fragments in one Run frame a receiver accepts (a sender puts at most max_frames)
SEQ_MAX = (1 << 64) - 1    # sequence numbers are uint64 on the wire


def _check_header(f: link_pb2.Fragment, cfg: NodeConfig, accept: Accept) -> str | None:
    """Validate the fields a fragment shares with the rest of its message copy; a string is the reason to refuse."""
    lim = cfg.limits
    if not is_message_id(f.msg_id):
        return "fragment without a valid msg_id"
    if f.total_size > lim.max_message_size:
        return f"message size {f.total_size} exceeds the limit {lim.max_message_size}"
    if not f.recipients or len(f.recipients) > lim.max_recipients:
        return "fragment must name between 1 and max_recipients recipients"
    dsts = {r.node for r in f.recipients}
    if len(dsts) != 1 or not is_node_name(next(iter(dsts))):
        return "a fragment's recipients must all be at one valid node"
    if f.hops < 1 or f.hops > lim.max_hops:
        return f"hop count {f.hops} outside 1..{lim.max_hops} (routing loop?)"
    if not is_node_name(f.src):
        return "fragment without a valid source node"
    if f.originator and not is_user_name(f.originator):
        return "fragment with an invalid originator"
    if any(r.user and not is_user_name(r.user) for r in f.recipients):
        return "fragment with an invalid recipient user"
    if not (math.isfinite(f.submit_ts) and math.isfinite(f.expires_ts)):
        return "fragment with a timestamp that is not a finite number"
    if f.submit_ts < 0 or f.expires_ts < 0:      # 0 is "none"; below it only a broken or forged sender
        return "fragment with a negative timestamp"
    if f.priority > lim.max_priority:
        return f"priority {f.priority} outside 0..{lim.max_priority}"
    if f.kind and not ((f.kind == REPORT_KIND and f.originator == REPORTER and f.msg_id.startswith("ndr."))
                       or (f.kind in accept and accept[f.kind](f.msg_id, f.originator))):
        # a neighbour may only pass on what nodes make: user mail, a report a node made (a forged report
        # kind would suppress the reports about that message) or a subsystem's message (a broker's copy)
        return f"fragment of kind {f.kind!r} that a neighbour may not set"
    return None


def _check_range(off: int, n: int, total: int, cfg: NodeConfig) -> str | None:
    if n > cfg.limits.max_frame_bytes:
        return f"fragment of {n} bytes exceeds the frame limit {cfg.limits.max_frame_bytes}"
    if off + n > total or (n == 0 and total > 0):
        return f"byte range {off}+{n} does not fit a message of {total} bytes"
    return None


def piece_from_frame(f: link_pb2.Fragment, cfg: NodeConfig, accept: Accept = NO_KINDS) -> Piece | Refusal:
    """Validate a Fragment frame from a neighbour: the piece, or why it is refused (for good)."""
    reason = _check_header(f, cfg, accept) or _check_range(f.offset, len(f.data), f.total_size, cfg)
    if reason:
        return Refusal(reason)
    return Piece(f.msg_id, f.recipients[0].node, f.offset, f.total_size, f.hops, f.src, f.originator,
                 [r.user for r in f.recipients], f.priority, f.submit_ts, f.expires_ts, f.kind,
                 f.fragments or 1, bytes(f.data))


def pieces_from_run(run: link_pb2.Run, cfg: NodeConfig,
                    accept: Accept = NO_KINDS) -> list[tuple[int, Piece | Refusal]]:
    """(seq, piece or why it is refused) for every fragment of a Run frame; the header is checked once."""
    h = run.head
    data = run.data
    reason = _check_header(h, cfg, accept)
    if reason is None and len(data) > MAX_RUN:
        reason = f"a run of {len(data)} fragments exceeds the limit of {MAX_RUN}"
    if reason is None and h.seq + len(data) - 1 > SEQ_MAX:
        reason = "a run whose sequence numbers overflow"
    if reason:
        # refusals name sequence numbers; those past the 64-bit range cannot be named and are dropped
        return [(h.seq + i, Refusal(reason)) for i in range(min(len(data), max(0, SEQ_MAX - h.seq + 1)))]
    # shared by all pieces of the run: nothing mutates these per piece
    dst = h.recipients[0].node
    users = [r.user for r in h.recipients]
    msg_id, total, hops, src, originator = h.msg_id, h.total_size, h.hops, h.src, h.originator
    prio, submit_ts, expires_ts, kind, frags = h.priority, h.submit_ts, h.expires_ts, h.kind, h.fragments or 1
    out: list[tuple[int, Piece | Refusal]] = []
    seq, off = h.seq, h.offset
    limit = cfg.limits.max_frame_bytes
    for d in data:
        n = len(d)
        if n > limit or off + n > total or (n == 0 and total > 0):
            out.append((seq, Refusal(_check_range(off, n, total, cfg) or "bad byte range")))
        else:
            out.append((seq, Piece(msg_id, dst, off, total, hops, src, originator, users, prio, submit_ts,
                                   expires_ts, kind, frags, d)))
        seq += 1
        off += n
    return out


def frame_from_piece(p: Piece, seq: int) -> link_pb2.Frame:
    return link_pb2.Frame(fragment=_header(p, seq, p.data))


def _header(p: Piece, seq: int, data: bytes = b"") -> link_pb2.Fragment:
    return link_pb2.Fragment(
        msg_id=p.msg_id, offset=p.off, total_size=p.total, hops=p.hops + 1, data=data, src=p.src,
        recipients=[{"node": p.dst, "user": u} for u in p.users], priority=p.prio, submit_ts=p.submit_ts,
        expires_ts=p.expires_ts, seq=seq, kind=p.kind, originator=p.originator, fragments=p.fragments)


def frames_from_pieces(pieces: list[Piece], first_seq: int, runs: bool = True) -> list[link_pb2.Frame]:
    """Frames for pieces numbered first_seq, first_seq + 1, ...: each stretch of consecutive byte ranges of
    one message copy becomes one Run frame (header once) when the peer understands runs."""
    out: list[link_pb2.Frame] = []
    n = len(pieces)
    i = 0
    while i < n:
        p = pieces[i]
        j = i + 1
        if runs:
            end = p.off + len(p.data)
            while j < n:
                q = pieces[j]
                if q.off != end or q.msg_id != p.msg_id or q.dst != p.dst or q.hops != p.hops or not q.data:
                    break
                end += len(q.data)
                j += 1
        if j - i == 1 or not p.data:
            out.append(frame_from_piece(p, first_seq + i))
            j = i + 1
        else:
            out.append(link_pb2.Frame(run=link_pb2.Run(head=_header(p, first_seq + i),
                                                       data=[q.data for q in pieces[i:j]])))
        i = j
    return out
