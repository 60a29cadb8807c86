"""Security of a node: mTLS on the Link service (tls.py) and client tokens on the management services (tokens.py).

Both are off unless the node config has a `security:` section (node/config.py SecurityConfig); the testbed
writes one when a scenario says `security: {tls: true, auth: true}`.
"""
