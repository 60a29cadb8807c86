"""MQ rate control between client message queues and a root queue (the MQ-on-MPLS-VPN study, its §3.3;
docs/reproductions/mq-adaptive.md).

Clients forward to a root at rates the root assigns from how full each client's
queue is, so a bursty client borrows the capacity the quiet ones leave unused.

  weights.py     the decile of a queue's occupancy (the weight a client reports)
  allocation.py  the root's rule: R_i from the reported weights (pluggable; "fixed" = control off)
  bucket.py      the token bucket a client paces its forwarding with
  pacer.py       the link scheduler seam: a transfer queue whose pops the bucket paces
  admission.py   the admission policy seam: the client's bounded queue, the root's "not now"
  control.py     the running part: rate frames both ways, the rounds, rates.jsonl

The engine learns nothing of it: the pacer wraps the queue towards the root, the
admission layer wraps the node's policy, and `rate` Link frames go through the
link frame handler seam.
"""
