"""Pooled event consumption (the Ericsson pools seed): consumers feed exactly one instance of each interested
application, and a replicated controller re-balances the connections on joins and leaves.

  assign.py    the replicated pool state and the pure function applying one command to it (round robin and
               load-aware allocation, invariants, balance)
  fence.py     the handover fence between the old and the new instance of a connection (no I/O)
  messages.py  parsing and validation of the control-plane publications, and the stale-assignment guard
  controller.py  the pool state replicated over Raft (pysyncobj) among the controller replicas
  config.py    the `pools:` section of a node config
  subsystem.py the pools as a node subsystem: which roles this node plays
  sender.py    the consumer (PS): events -> one durable publication per application (the broker's topic
               transform), assignments, fences, heartbeats
  store.py     the consumer's sequence numbers and map in the spool
  host.py      a controller replica in the daemon: heartbeats, crash detection, assignments from the leader
  listen.py    a subsystem's own subscription at this node's broker, read in-process
  service.py   the Pools gRPC service (GetPools)
"""
