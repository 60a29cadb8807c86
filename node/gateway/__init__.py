"""EMG's gateway policies (Cosenza, Gonzalez Prieto, Stadler, "EMG Management"): connectors with THROUGHPUT
and paced delivery, users with credits, lock-out and permit/deny, and the selector gamma turned into actions by
a policy manager. Plugged in as a subsystem (node/gateway/subsystem.py)."""
