"""The run-directory record schema, shared by the node (writer) and spark_analysis (reader).

Every JSON line in a run directory has `ts` (Unix seconds, float) and `node`.
Each record kind below lists its required fields and their types; writers may
add fields, readers must not rely on anything not listed here. Tests on both
sides check records against this module (docs/run-directory.md).
"""
from __future__ import annotations

from dataclasses import dataclass

Number = (int, float)


@dataclass(frozen=True)
class Field:
    name: str
    types: tuple[type, ...]
    doc: str


def _f(name: str, types: type | tuple[type, ...], doc: str) -> Field:
    return Field(name, types if isinstance(types, tuple) else (types,), doc)


COMMON = (
    _f("ts", Number, "Unix time of the record, seconds"),
    _f("node", str, "name of the node (or 'testbed' for host-level records)"),
)

RECORDS: dict[str, tuple[Field, ...]] = {
    # nodes/<node>/deliveries.jsonl: one line per message delivered to a local mailbox
    "delivery": COMMON + (
        _f("msg_id", str, "message id, unique per submission"),
        _f("src", str, "originating node"),
        _f("dst", str, "recipient node (this node)"),
        _f("size", int, "message size in bytes"),
        _f("fragments", int, "number of fragments the message travelled as (1 when not fragmented)"),
        _f("mode", str, "'fragmenting' or 'non-fragmenting'"),
        _f("submit_ts", Number, "when the originator accepted the message"),
        _f("deliver_ts", Number, "when the message reached the mailbox"),
        _f("hops", int, "links crossed"),
    ),
    # nodes/<node>/submissions.jsonl: one line per submission attempt
    "submission": COMMON + (
        _f("msg_id", str, "message id ('' when refused before one was assigned)"),
        _f("src", str, "submitting node"),
        _f("dst", (str, list), "recipient node(s)"),
        _f("size", int, "message size in bytes"),
        _f("accepted", bool, "whether the node took responsibility for the message"),
        _f("reason", str, "why refused ('' when accepted)"),
    ),
    # accepted.jsonl (the repetition's directory): one line per submission the workload driver saw accepted,
    # written by the driver as the reply arrived (`node` is the node that accepted it): the client's side of
    # the accepted set, which the loss checker reconciles with the nodes' submissions.jsonl
    "accepted": COMMON + (
        _f("msg_id", str, "the message id the node answered with"),
        _f("dst", list, "the recipient nodes (one message copy each)"),
        _f("size", int, "message size in bytes"),
    ),
    # nodes/<node>/metrics.jsonl: periodic snapshot
    "metrics": COMMON + (
        _f("spool_messages", int, "messages held in the spool"),
        _f("spool_bytes", int, "payload bytes held in the spool"),
        _f("neighbours", dict, "per neighbour: queue and traffic counters"),
        _f("delivered", int, "messages delivered here so far"),
    ),
    # nodes/<node>/reports.jsonl: non-delivery reports made here (lifetime expired, reassembly timed out), reports
    # that reached the originator, and copies kept without a next hop ("event": "ndr_made" | "ndr_delivered" |
    # "orphan"; an orphan is not final: its report message goes with the ndr_made line when its lifetime ends)
    "report": COMMON + (
        _f("event", str, "'ndr_made', 'ndr_delivered' or 'orphan'"),
        _f("msg_id", str, "the message the report is about"),
        _f("dst", str, "the destination node of the message copy"),
        _f("reason", str, "why it was not delivered"),
    ),
    # nodes/<node>/routes.jsonl: one line per change of the node's routing table
    "route": COMMON + (
        _f("dst", str, "destination node"),
        _f("next_hop", str, "the neighbour its copies go to now"),
        _f("cost", (int, float, type(None)), "total path cost (null: unreachable, or a static entry)"),
        _f("reason", str, "'initial', 'cost', 'switch', 'withdrawn', 'unreachable' or 'static'"),
    ),
    # nodes/<node>/publications.jsonl: one line per publication accepted at this node (node/broker/)
    "publication": COMMON + (
        _f("pub_id", str, "publication id, unique"),
        _f("topic", str, "the topic it was published on"),
        _f("size", int, "payload bytes"),
        _f("expected", list, "the subscriptions ('node/name') whose interest had reached this node when it was "
           "published: the receipts expected"),
        _f("expected_durable", list, "those of them that are durable (each must receive it exactly once)"),
        _f("targets", list, "the nodes of those subscriptions"),
    ),
    # subscribers/<node>/<name>/receipts.jsonl: one line per publication a subscriber client received (the
    # first arrival of each publication id; redeliveries are counted in subscriber.json beside it)
    "receipt": COMMON + (
        _f("subscription", str, "the subscription's name at its node (`node` is the subscriber's node)"),
        _f("durable", bool, "whether the subscription is durable"),
        _f("pub_id", str, "the publication"),
        _f("topic", str, "its topic"),
        _f("origin", str, "the node it was published at"),
        _f("publish_ts", Number, "when it was published (the origin's clock)"),
        _f("latency", Number, "ts - publish_ts, seconds, as measured (two clocks when the subscriber and the origin "
           "ran on different machines: the summary and the report correct it by machines.json)"),
        _f("size", int, "payload bytes"),
        _f("hops", int, "brokers it passed"),
    ),
    # nodes/<node>/rates.jsonl: MQ rate control (node/rate/). A client writes "report" (each weight it reports:
    # every T/2 with periodic=true, and whenever the weight changes; its weight,
    # queue, the rate in force, sent_bytes = bytes its root acknowledged so far, overflowed = submissions refused
    # so far), "assigned" (a rate from the root) and "fallback" (back to R/N after the root was silent); the
    # root writes "assign" (per client per round: the weight it used and the rate it sent) and "queue" (every
    # T/2: its consumer's mailbox bytes)
    "rate": COMMON + (
        _f("event", str, "'report', 'assigned', 'fallback', 'assign' or 'queue'"),
        _f("client", str, "the client the line is about ('' for the root's queue samples)"),
        _f("weight", int, "the client's weight, 0..9 (decile of its queue occupancy)"),
        _f("rate_bps", Number, "the client's sending rate, bits/s of payload (queue: the root's R)"),
        _f("queue_bytes", int, "client: bytes it holds for the root; root queue: the consumer's mailbox bytes"),
    ),
    # nodes/<node>/pools.jsonl: pooled event consumption (node/pools/). A controller replica writes "elected"
    # (it became the leader: `term`), "map" (its leader applied a change: `version`, `term`, `algorithm`, `moves`)
    # and "load"; a consumer writes "applied" (an assignment is in force: `version`, `term`, `connections`),
    # "fence_sent" (an application moved: `app`, `old`, `new`, `seq` = the last event the old instance gets),
    # "fence_done" (the new instance released what the fence held: `app`, `old`, `new`, `seq`, `version`, `term`,
    # `pause_s` from its fence_sent, null when this daemon did not send it) and "refused" (an assignment or
    # control publication it would not take: `reason`)
    "pool": COMMON + (
        _f("event", str, "'elected', 'map', 'applied', 'fence_sent', 'fence_done', 'refused' or 'load'"),
    ),
    # nodes/<node>/gateway.jsonl: EMG gateway policies (node/gateway/), one line per decision of its policy
    # manager or its control service
    "gateway": COMMON + (
        _f("event", str, "'queue_high', 'queue_low', 'not_solved', 'escalate', 'reset', 'set' or 'request'"),
        _f("action", str, "'deactivate_lb', 'activate_lb', 'throttle', 'restore', 'drop', 'accept', 'refuse' "
           "or 'none'"),
        _f("connector", str, "the outgoing connector (neighbour) whose queue it is about ('' for set and request)"),
        _f("gamma", Number, "the selector gamma in force, -1 (utilisation) .. 1 (delivery guarantee)"),
        _f("queue", int, "messages queued for the connector then"),
        _f("threshold", Number, "the connector's queue threshold then (raised while escalated)"),
        _f("maxrate", (int, float, type(None)), "MAXRATE in force, msg/s (null: the original THROUGHPUTs)"),
        _f("values", dict, "details: phi_out, throughput per incoming connector, dropped message ids, ..."),
    ),
    # events.jsonl: faults and link changes as applied
    "event": COMMON + (
        _f("event", str, "what happened: link_set, link_down, link_up, partition, heal, kill, restart, pause, "
           "resume; the testbed's own: workload_end, records_failed"),
        _f("target", (str, list), "the link, host or host sets it applied to"),
    ),
    # links.jsonl: traffic on the emulated links, one line per link every second (testbed/experiment/linkmon.py);
    # each direction: packets, bytes, dropped_loss, dropped_queue, dropped_down, duplicated (counters since the
    # link was made; the netem shaper counts queue drops only) and bps (bits/s since the previous line)
    "link": COMMON + (
        _f("link", str, "the link's name (topology.json)"),
        _f("a", str, "its a end (host)"),
        _f("b", str, "its b end (host)"),
        _f("a_to_b", dict, "counters of the a->b direction"),
        _f("b_to_a", dict, "counters of the b->a direction"),
    ),
    # host.jsonl: machine load every second
    "host": COMMON + (
        _f("cpu_percent", Number, "whole-machine CPU use, 0-100"),
        _f("mem_percent", Number, "memory use, 0-100"),
    ),
}


# Optional fields: written only by some nodes (here: with resource management on). Readers must
# treat them as possibly absent; `validate_optional` checks their types when they are present.
OPTIONAL: dict[str, tuple[Field, ...]] = {
    "submission": (
        _f("maybe_accepted", bool, "workload.jsonl: true when the call failed after it was sent (no answer in "
           "time, the connection dropped): the node may have accepted the message without the driver learning it"),
    ),
    "metrics": (
        _f("resources", dict, "Brachman's resource management, present when the node config has a resources: "
           "section: buffers{classes_enabled, usage[class], limits[class], free_pool, single_fragment_input_usage, "
           "readjustments, refusals{'class:reason': n}}, streams{active, by_upstream{neighbour: n}, allocated_buffers, "
           "held_fragments}, recipient{capacity{single, multi}, used{single, multi}, reserved, "
           "reservation_queue_length, reservation_queue_fragments, granted, queued, expired, optimistic_ok, "
           "optimistic_refused, removed_fragments}, rbsad{draws, delayed, total_delay}, refusals{reason: n} "
           "(reasons: congested, class_full, stream_refused, stream_full, recipient_full, recipient_wait, "
           "recipient_never_fits); per neighbour also deferred_in/out (also without resources once a full link "
           "queue, limits.max_link_queue, deferred a piece), credits_in/out and scheduler"
           "{queued_by_priority, served_by_priority, transfers, ready, waiting_for_credit, waiting_for_timer, streams}"),
        _f("broker", dict, "the publish/subscribe broker (node/broker/): published, refused, copies_in, copies_out, "
           "copies_out_bytes (bytes of the stored copies: publication, header, targets), live_in, live_out, "
           "live_out_bytes (bytes of the frames), control_in, control_out, control_out_bytes, control_local "
           "(the same for control topics starting with '_'), live_dropped{reason: n}, duplicates, expired, "
           "hop_limit, bad, local, inbox, interest{seq, records, changes, remote_subscriptions}, subscriptions"
           "{name: {durable, pattern, connected, backlog, delivered, dropped}}"),
        _f("pools", dict, "pooled event consumption (node/pools/), present with pools.enabled: bad (control "
           "publications refused), consumer{consumer, term, version, applied_term, applied_version, "
           "connections{app: instance}, seqs{app: n}, sent{app: n}, load{app: events/s}, refused_events, "
           "fences_unsent}"),
        _f("rate", dict, "MQ rate control (node/rate/), present with a rate: role: client {role, weight, "
           "queue_bytes, queue_limit, rate_bps, overflowed, sent_bytes, reports, assignments}; root {role, round, "
           "queue_bytes, queue_messages, deferred, clients{name: {weight, queue_bytes, rate_bps}}}"),
        _f("gateway", dict, "EMG gateway policies (node/gateway/), present with gateway.enabled: gamma, maxrate "
           "(null: not throttled), threshold, phi_out, outgoing{connector: {queue, deactivated, threshold, phi, rate, "
           "sent}}, "
           "incoming{connector: {throughput (null: unlimited), accepted, deferred (neighbour) or throttled (user)}}, "
           "users{user: {credits (null: unlimited)}}, refused{throttled, no_credits, locked, not_permitted}, dropped"),
        _f("routing", dict, "routing state, present with routing.mode dynamic (or rules): mode, routes (table size), "
           "changes (table changes so far), seq, adverts, links{neighbour: {latency_ms, sd_ms, jitter_ms, loss, "
           "probes_sent, probes_answered, samples_dropped, cost (null: withdrawn), up, suppressed, probed}}, probes_refused{reason: n} "
           "(reasons: malformed, name, key, mac, seq)"),
    ),
    "event": (
        _f("counts", dict, "records_failed: per node, the record lines its daemon could not write (Control Stats "
           "`records_failed`, summed over the daemon's restarts)"),
        _f("scope", str, "kill and restart faults: 'process' (the daemon, netns runtime) or 'container' (docker)"),
        _f("replumbed", list, "container restart: the interfaces moved into the new container's namespace"),
        _f("before", dict, "link_set: the changed fields' values until then, per direction of the link's own ends"),
    ),
    "host": (
        _f("machine", str, "the machine sampled (its host name on one machine; the placement's name on several): "
           "saturation is judged per machine"),
        _f("steal_percent", Number, "CPU time the hypervisor gave to another guest while this machine was runnable "
           "(0-100, counted in cpu_percent too); older runs lack it"),
    ),
}


def validate_optional(kind: str, record: object) -> list[str]:
    """Type problems of the optional fields present in a record (absent ones are fine)."""
    if not isinstance(record, dict):
        return [f"expected a JSON object, got {type(record).__name__}"]
    return [f"field {f.name!r}: expected {_names(f.types)}, got {type(record[f.name]).__name__}"
            for f in OPTIONAL.get(kind, ()) if f.name in record and not isinstance(record[f.name], f.types)]


def validate(kind: str, record: object) -> list[str]:
    """Problems with one record of the given kind; empty when it conforms."""
    if kind not in RECORDS:
        return [f"unknown record kind {kind!r}"]
    if not isinstance(record, dict):
        return [f"expected a JSON object, got {type(record).__name__}"]
    problems = []
    for field in RECORDS[kind]:
        if field.name not in record:
            problems.append(f"missing field {field.name!r} ({field.doc})")
            continue
        value = record[field.name]
        # bool is an int in Python; an int field must not accept True/False
        if isinstance(value, bool) and bool not in field.types:
            problems.append(f"field {field.name!r}: expected {_names(field.types)}, got bool")
        elif not isinstance(value, field.types):
            problems.append(f"field {field.name!r}: expected {_names(field.types)}, got {type(value).__name__}")
    return problems


def _names(types: tuple[type, ...]) -> str:
    return " or ".join(t.__name__ for t in types)
