"""The per-machine agent of a network over several machines (docs/multi-machine.md, plan A).

One agent per machine: a plain container of that machine's Docker engine,
started with NET_ADMIN, SYS_ADMIN and SYS_PTRACE, /dev/net/tun,
`--network host --pid host` (it sees the machine's network and every host
container's init by pid), labelled `wanbed.run`/`wanbed.prefix` so that
`testbed clean` removes it with the run's other containers. It names the host
containers' network namespaces by pid, applies `ip` batches and sysctls in
them, puts and removes the run's partition chain in them (with the controller's
iptables, copied in with its code when the image has none), runs that
machine's half of the wire emulator
(testbed/shaping/wire_emulator.py), whose requests it relays, and runs the
machine's clock service (testbed/clockservice.py) on the machine's address,
which the cell runner probes at the start and the end of a repetition.

The controller talks to it through the engine's exec (`docker exec -i`), one
JSON request list in, one JSON answer list out (testbed/agent/ops.py). Why the
exec and not a TCP server of its own: the controller must reach every engine
anyway, so the exec needs no further port, address or authentication (the
engine's own TLS or ssh protects it), and an agent with nothing listening
cannot be reached by the emulated hosts. The cost is one `docker exec` per
request list (tens of ms), so the controller sends a machine's set-up as one
list.

The agent's code is copied into its container (`docker cp`): the node image
holds the node only, and the agent needs nothing beyond the standard library.
"""
