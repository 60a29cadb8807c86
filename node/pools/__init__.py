"""Pooled event consumption (the Ericsson pools seed): consumers feed exactly one instance of each interested
application, and a replicated controller re-balances the connections on joins and leaves.

  assign.py    the replicated pool state and the pure function applying one command to it (round robin and
               load-aware allocation, invariants, balance)
  fence.py     the handover fence between the old and the new instance of a connection (no I/O)
  messages.py  parsing and validation of the control-plane publications, and the stale-assignment guard
  controller.py  the pool state replicated over Raft (pysyncobj) among the controller replicas
"""
