"""A Mininet topology file as Mininet users write one: k sites in a chain, a switch and a host at each.

On a machine with Mininet (netem, Open vSwitch):  sudo mn --custom mininet-linear.py --topo linear,3 --link tc
The same network in wanbed:                       testbed run scenarios/examples/mininet-linear.yaml
"""
from mininet.topo import Topo


class LinearWan(Topo):
    """Each site: host h<i> on switch s<i> over a fast access link; sites joined by slower WAN trunks."""

    def build(self, k=3, trunk_delay='20ms'):
        previous = None
        for i in range(1, k + 1):
            switch = self.addSwitch('s%d' % i)
            host = self.addHost('h%d' % i)
            self.addLink(host, switch, bw=100, delay='1ms')
            if previous:
                self.addLink(previous, switch, bw=10, delay=trunk_delay, loss=0.1, max_queue_size=200)
            previous = switch


topos = {'linear': LinearWan}
