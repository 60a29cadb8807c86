"""The publish/subscribe broker (node/broker/broker.py has the whole story).

It plugs into the node at three seams and nowhere else:
  - the engine's `consumers` for message kind "pub": a stored publication copy addressed to this node is
    handed to the broker from the spool's inbox (node/mta.py);
  - link frame handlers: `interest` (node/broker/interest.py) and `publication` (the non-durable path);
  - the PubSub gRPC service (node/broker/service.py) on the management address.
Its own tables are in the node's spool (node/broker/store.py); topics and patterns: node/broker/topics.py;
local subscriptions and client streams: node/broker/subscriptions.py.
"""
