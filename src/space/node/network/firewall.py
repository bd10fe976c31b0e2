"""nftables inside a sandbox's namespace (DESIGN §8), rendered as one atomic ruleset.

`netdev` on the tap: frames must carry the guest's MAC and IPv4 address, ARP may not
lie, VLAN-tagged and IPv6 frames are dropped. `inet`: DNS (UDP/TCP 53 to any address)
and TCP 80/443 are redirected to the gateway's listeners in the namespace; every other
packet from the guest is redirected to the host side too, only to be rejected at once
(TCP reset, ICMP port unreachable for UDP, admin-prohibited otherwise) so guests fail
fast. Nothing is forwarded. The tables die with the namespace.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

from space.node.network.netns import NetworkError, SandboxNetwork

TABLE = "space"


@dataclass(frozen=True)
class Redirects:
    dns: int
    http: int
    https: int


def render(net: SandboxNetwork, ports: Redirects) -> str:
    tap, mac, guest = net.tap, net.guest_mac, net.guest_ip
    return f"""
table netdev {TABLE} {{
  chain guard {{
    type filter hook ingress device "{tap}" priority -500; policy drop;
    ether saddr != {mac} drop
    ether type arp arp htype 1 arp ptype ip arp hlen 6 arp plen 4 \
arp saddr ether {mac} arp saddr ip {guest} accept
    ether type ip ip saddr {guest} accept
  }}
}}
table inet {TABLE} {{
  chain prerouting {{
    type nat hook prerouting priority dstnat; policy accept;
    iifname "{tap}" udp dport 53 redirect to :{ports.dns}
    iifname "{tap}" tcp dport 53 redirect to :{ports.dns}
    iifname "{tap}" tcp dport 80 redirect to :{ports.http}
    iifname "{tap}" tcp dport 443 redirect to :{ports.https}
    iifname "{tap}" meta l4proto {{ tcp, udp, icmp }} redirect
  }}
  chain input {{
    type filter hook input priority filter; policy drop;
    iif lo accept
    ct state established,related accept
    iifname "{tap}" udp dport {ports.dns} ct original proto-dst 53 accept
    iifname "{tap}" tcp dport {ports.dns} ct original proto-dst 53 accept
    iifname "{tap}" tcp dport {ports.http} ct original proto-dst 80 accept
    iifname "{tap}" tcp dport {ports.https} ct original proto-dst 443 accept
    meta l4proto tcp reject with tcp reset
    meta l4proto udp reject with icmpx port-unreachable
    reject with icmpx admin-prohibited
  }}
  chain forward {{
    type filter hook forward priority filter; policy drop;
  }}
}}
"""


def apply(net: SandboxNetwork, ports: Redirects) -> None:
    """Replace the namespace's SPACE tables atomically; pin the guest's neighbour entry."""
    ruleset = render(net, ports)
    flush = f"table netdev {TABLE}\ndelete table netdev {TABLE}\n"
    flush += f"table inet {TABLE}\ndelete table inet {TABLE}\n"
    _run(["ip", "netns", "exec", net.netns, "nft", "-f", "-"], flush + ruleset)
    _run(
        [
            "ip",
            "netns",
            "exec",
            net.netns,
            "sysctl",
            "-qw",
            "net.ipv6.conf.all.disable_ipv6=1",
            "net.ipv6.conf.default.disable_ipv6=1",
            "net.ipv4.ip_forward=0",
        ]
    )
    _run(
        [
            "ip",
            "-n",
            net.netns,
            "neigh",
            "replace",
            net.guest_ip,
            "lladdr",
            net.guest_mac,
            "dev",
            net.tap,
            "nud",
            "permanent",
        ]
    )


def _run(argv: list[str], stdin: str | None = None) -> None:
    result = subprocess.run(argv, input=stdin, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise NetworkError(f"{' '.join(argv[:6])}: {result.stderr.strip()}")
