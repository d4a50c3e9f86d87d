"""The address table of the egress guard (docs/design.md §8): which IP addresses count as public
unicast.

The table is our own on purpose. ``ipaddress.is_global`` / ``is_private`` changed meaning between
Python releases (CVE-2024-4032, gh-117566) and, on 3.11, call ``224.0.0.1``, ``fec0::1``,
``64:ff9b::7f00:1`` and ``2002:7f00:1::`` global. A fixed table behaves the same on every Python.

Every verdict names the rule that decided it, so a denial can be explained to an operator
("private (10.0.0.0/8)") without anyone re-deriving it.

IPv6 forms that carry an IPv4 address are decided per form (ssrf.md §2.2). Two are judged by the
IPv4 address they carry, because that address IS where the packets end up:

- IPv4-mapped ``::ffff:a.b.c.d`` (RFC 4291 §2.5.5.2) is how a dual-stack socket names an IPv4
  peer; we connect to ``a.b.c.d`` itself, so the verdict is the verdict for ``a.b.c.d``.
- NAT64 (RFC 6052/6146) prefixes the operator declares (``nat64_prefixes``; the well-known
  ``64:ff9b::/96`` or a network-specific /96): on an IPv6-only network the translator forwards to
  the low 32 bits, so those are judged. Undeclared, ``64:ff9b::/96`` is denied: off such a
  network, nobody can say where it leads. The local-use block ``64:ff9b:1::/48`` (RFC 8215) has
  no fixed layout (RFC 6052 §2.2 allows /48 to /96, some with the address split around the
  u-octet), so it is denied as a whole; an operator using a /96 inside it declares that /96.

The others are denied, naming what they hide when that is itself not public, e.g.
"6to4 (2002::/16) embedding cloud metadata (169.254.169.254: AWS/GCP/Azure)":

- IPv4-compatible ``::a.b.c.d`` (deprecated, RFC 4291 §2.5.5.1) and IPv4-translated
  ``::ffff:0:a.b.c.d`` (SIIT, RFC 2765, dropped by RFC 6145): no legitimate DNS answer uses them,
  and what a host or translator does with them depends on a network we cannot see.
- 6to4 ``2002::/16`` (RFC 3056, relays deprecated by RFC 7526) and Teredo ``2001::/32`` (RFC 4380):
  the embedded address is a tunnel endpoint (a site's border router, a NAT), not the final host,
  so a public embedded address proves nothing about where the packets are delivered.
- ISATAP (RFC 5214): an interface identifier ``0:5efe:a.b.c.d`` (u/g bits aside) inside an
  otherwise public prefix. Where ISATAP runs, the site's router tunnels it to ``a.b.c.d`` in
  *that* site — ours, if the prefix is ours, which we cannot tell — so it is denied when
  ``a.b.c.d`` is not public; with a public ``a.b.c.d`` it stays an ordinary public address.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Final

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

PUBLIC_UNICAST: Final = "public unicast"


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    rule: str


# Checked before the ranges: these sit inside denied ranges anyway, but an operator reading a log
# should see at once that someone aimed at the instance credentials endpoint.
_CLOUD_METADATA: Final[dict[IPAddress, str]] = {
    ipaddress.ip_address("169.254.169.254"): "AWS/GCP/Azure",
    ipaddress.ip_address("169.254.170.2"): "AWS ECS",
    ipaddress.ip_address("fd00:ec2::254"): "AWS IPv6",
    ipaddress.ip_address("100.100.100.200"): "Alibaba",
    ipaddress.ip_address("192.0.0.192"): "Oracle",
}

# First match wins, so the single address 255.255.255.255 precedes the 240/4 block holding it.
IPV4_DENIED: Final[tuple[tuple[ipaddress.IPv4Network, str], ...]] = tuple(
    (ipaddress.IPv4Network(cidr), label)
    for cidr, label in (
        ("0.0.0.0/8", "this network"),
        ("10.0.0.0/8", "private"),
        ("100.64.0.0/10", "shared address space (CGNAT)"),
        ("127.0.0.0/8", "loopback"),
        ("169.254.0.0/16", "link-local"),
        ("172.16.0.0/12", "private"),
        ("192.0.0.0/24", "IETF protocol assignments"),
        ("192.0.2.0/24", "documentation"),
        ("192.88.99.0/24", "6to4 relay anycast"),
        ("192.168.0.0/16", "private"),
        ("198.18.0.0/15", "benchmarking"),
        ("198.51.100.0/24", "documentation"),
        ("203.0.113.0/24", "documentation"),
        ("224.0.0.0/4", "multicast"),
        ("255.255.255.255/32", "limited broadcast"),
        ("240.0.0.0/4", "reserved"),
    )
)

_UNSPECIFIED_V6: Final = ipaddress.IPv6Address("::")
_LOOPBACK_V6: Final = ipaddress.IPv6Address("::1")

IPV4_MAPPED: Final = ipaddress.IPv6Network("::ffff:0:0/96")
WELL_KNOWN_NAT64: Final = ipaddress.IPv6Network("64:ff9b::/96")

# Denied blocks whose low 32 bits are an IPv4 address. ::/96 (compatible) also holds :: and ::1,
# which get their own, clearer rules before this table is consulted. The third field says why a
# PUBLIC embedded address is denied too; None when the form itself says it.
_IPV6_EMBEDDING_LOW32: Final[tuple[tuple[ipaddress.IPv6Network, str, str | None], ...]] = tuple(
    (ipaddress.IPv6Network(cidr), label, why)
    for cidr, label, why in (
        ("::ffff:0:0:0/96", "IPv4-translated", None),
        ("64:ff9b::/96", "NAT64", "not enabled (HERALD_EGRESS_NAT64)"),
        ("::/96", "IPv4-compatible", None),
    )
)

# RFC 5214 §6.1: the interface identifier 0000:5efe (0200:5efe when the IPv4 is global) followed
# by the IPv4 address; the mask ignores the u/g bits so no spelling slips through.
_ISATAP_MASK: Final = 0xFCFFFFFF
_ISATAP_ID: Final = 0x00005EFE

_TEREDO: Final = ipaddress.IPv6Network("2001::/32")
_SIX_TO_FOUR: Final = ipaddress.IPv6Network("2002::/16")

_IPV6_DENIED: Final[tuple[tuple[ipaddress.IPv6Network, str], ...]] = tuple(
    (ipaddress.IPv6Network(cidr), label)
    for cidr, label in (
        # The local-use NAT64 prefix (RFC 8215) may carry the IPv4 at several offsets (RFC 6052
        # §2.2), so there is no single embedded address to judge: deny the block as a whole. A
        # declared /96 inside it is judged before this table is reached.
        ("64:ff9b:1::/48", "NAT64 local-use"),
        ("100::/64", "discard-only"),
        ("2001:2::/48", "benchmarking"),
        ("2001:db8::/32", "documentation"),
        ("2001:10::/28", "ORCHID (deprecated)"),
        ("2001:20::/28", "ORCHIDv2"),
        ("3fff::/20", "documentation"),
        ("5f00::/16", "SRv6 SIDs"),
        ("fc00::/7", "unique local"),
        ("fe80::/10", "link-local"),
        ("fec0::/10", "site-local (deprecated)"),
        ("ff00::/8", "multicast"),
    )
)

_GLOBAL_UNICAST_V6: Final = ipaddress.IPv6Network("2000::/3")


NAT64Prefixes = tuple[ipaddress.IPv6Network, ...]


def classify_address(ip: IPAddress, nat64_prefixes: NAT64Prefixes = ()) -> Verdict:
    """Allow only public unicast; otherwise name the first rule that denies ``ip``.

    ``nat64_prefixes`` are the /96 NAT64 prefixes the operator declared: addresses inside them
    are judged by the IPv4 address they carry, like IPv4-mapped ones always are.
    """
    if isinstance(ip, ipaddress.IPv4Address):
        return _classify_v4(ip)
    return _classify_v6(ip, nat64_prefixes)


def embedded_destination(
    ip: ipaddress.IPv6Address, nat64_prefixes: NAT64Prefixes = ()
) -> tuple[str, ipaddress.IPv4Address] | None:
    """The IPv4 address that is the real destination of ``ip``, with the form that carried it.

    Only IPv4-mapped addresses and declared NAT64 prefixes qualify (see the module docstring);
    every other embedding is a tunnel or a translation we cannot see, and yields ``None``.
    """
    if ip.scope_id is not None:
        return None
    if ip in IPV4_MAPPED:
        return f"IPv4-mapped ({IPV4_MAPPED})", _low32(ip)
    for prefix in nat64_prefixes:
        if ip in prefix:
            return f"NAT64 ({prefix})", _low32(ip)
    return None


def _denied(rule: str) -> Verdict:
    return Verdict(allowed=False, rule=rule)


def _metadata_rule(ip: IPAddress) -> str | None:
    provider = _CLOUD_METADATA.get(ip)
    return None if provider is None else f"cloud metadata ({ip}: {provider})"


def _classify_v4(ip: ipaddress.IPv4Address) -> Verdict:
    metadata = _metadata_rule(ip)
    if metadata is not None:
        return _denied(metadata)
    for network, label in IPV4_DENIED:
        if ip in network:
            return _denied(f"{label} ({network})")
    return Verdict(allowed=True, rule=PUBLIC_UNICAST)


def _classify_v6(ip: ipaddress.IPv6Address, nat64_prefixes: NAT64Prefixes) -> Verdict:
    # A zone id pins the address to one local interface: never a public destination.
    if ip.scope_id is not None:
        return _denied(f"IPv6 zone id (%{ip.scope_id})")
    # Compare without any scope so the exact-address lookups below cannot be sidestepped.
    if ip == _UNSPECIFIED_V6:
        return _denied("unspecified (::/128)")
    if ip == _LOOPBACK_V6:
        return _denied("loopback (::1/128)")
    metadata = _metadata_rule(ip)
    if metadata is not None:
        return _denied(metadata)
    carried = embedded_destination(ip, nat64_prefixes)
    if carried is not None:
        form, embedded = carried
        inner = _classify_v4(embedded)
        return inner if inner.allowed else _denied(f"{form} embedding {inner.rule}")
    for network, label, why in _IPV6_EMBEDDING_LOW32:
        if ip in network:
            return _embedding(f"{label} ({network})", _low32(ip), why)
    if ip in _TEREDO:
        # RFC 4380 §4: the client's IPv4 is stored inverted in the last 32 bits.
        return _embedding(f"Teredo ({_TEREDO})", ipaddress.IPv4Address(~int(ip) & 0xFFFFFFFF))
    if ip in _SIX_TO_FOUR:
        # RFC 3056 §2: the IPv4 sits in bits 16..47.
        embedded = ipaddress.IPv4Address((int(ip) >> 80) & 0xFFFFFFFF)
        return _embedding(f"6to4 ({_SIX_TO_FOUR})", embedded)
    for network, label in _IPV6_DENIED:
        if ip in network:
            return _denied(f"{label} ({network})")
    if ip not in _GLOBAL_UNICAST_V6:
        return _denied(f"not global unicast (outside {_GLOBAL_UNICAST_V6})")
    if (int(ip) >> 32) & _ISATAP_MASK == _ISATAP_ID:
        inner = _classify_v4(_low32(ip))
        if not inner.allowed:
            return _denied(f"ISATAP (interface id 0:5efe:w.x.y.z) embedding {inner.rule}")
    return Verdict(allowed=True, rule=PUBLIC_UNICAST)


def _low32(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address:
    return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)


def _embedding(form: str, embedded: ipaddress.IPv4Address, why: str | None = None) -> Verdict:
    """Deny an IPv4-carrying form, naming what it hid when that is itself not public."""
    inner = _classify_v4(embedded)
    if inner.allowed:
        return _denied(form if why is None else f"{form} {why}")
    return _denied(f"{form} embedding {inner.rule}")
