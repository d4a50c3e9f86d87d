"""The address table: every range denied with its own rule, and the addresses beside it allowed.

A guard that denied everything would pass half of a denial-only table, so the ALLOWED rows
(public addresses, and the first address outside each private range) carry equal weight.
"""

from __future__ import annotations

import ipaddress

import pytest

from dispatch.egress.ranges import IPV4_DENIED, PUBLIC_UNICAST, classify_address

ISATAP = "ISATAP (interface id 0:5efe:w.x.y.z)"
AWS_METADATA = "cloud metadata (169.254.169.254: AWS/GCP/Azure)"

DENIED: list[tuple[str, str]] = [
    # IPv4 ranges
    ("0.0.0.0", "this network (0.0.0.0/8)"),
    ("0.255.255.255", "this network (0.0.0.0/8)"),
    ("10.0.0.0", "private (10.0.0.0/8)"),
    ("10.255.255.255", "private (10.0.0.0/8)"),
    ("100.64.0.0", "shared address space (CGNAT) (100.64.0.0/10)"),
    ("100.127.255.255", "shared address space (CGNAT) (100.64.0.0/10)"),
    ("127.0.0.1", "loopback (127.0.0.0/8)"),
    ("127.255.255.254", "loopback (127.0.0.0/8)"),
    ("169.254.0.1", "link-local (169.254.0.0/16)"),
    ("172.16.0.0", "private (172.16.0.0/12)"),
    ("172.31.255.255", "private (172.16.0.0/12)"),
    ("192.0.0.8", "IETF protocol assignments (192.0.0.0/24)"),
    ("192.0.2.1", "documentation (192.0.2.0/24)"),
    ("192.88.99.1", "6to4 relay anycast (192.88.99.0/24)"),
    ("192.168.0.1", "private (192.168.0.0/16)"),
    ("192.168.255.255", "private (192.168.0.0/16)"),
    ("198.18.0.0", "benchmarking (198.18.0.0/15)"),
    ("198.19.255.255", "benchmarking (198.18.0.0/15)"),
    ("198.51.100.7", "documentation (198.51.100.0/24)"),
    ("203.0.113.9", "documentation (203.0.113.0/24)"),
    ("224.0.0.1", "multicast (224.0.0.0/4)"),
    ("239.255.255.250", "multicast (224.0.0.0/4)"),
    ("240.0.0.1", "reserved (240.0.0.0/4)"),
    ("255.255.255.254", "reserved (240.0.0.0/4)"),
    ("255.255.255.255", "limited broadcast (255.255.255.255/32)"),
    # Cloud metadata, named as such
    ("169.254.169.254", "cloud metadata (169.254.169.254: AWS/GCP/Azure)"),
    ("169.254.170.2", "cloud metadata (169.254.170.2: AWS ECS)"),
    ("fd00:ec2::254", "cloud metadata (fd00:ec2::254: AWS IPv6)"),
    ("100.100.100.200", "cloud metadata (100.100.100.200: Alibaba)"),
    ("192.0.0.192", "cloud metadata (192.0.0.192: Oracle)"),
    # IPv6 special addresses and blocks
    ("::", "unspecified (::/128)"),
    ("::1", "loopback (::1/128)"),
    ("fc00::1", "unique local (fc00::/7)"),
    ("fdff:ffff::1", "unique local (fc00::/7)"),
    ("fe80::1", "link-local (fe80::/10)"),
    ("febf:ffff::1", "link-local (fe80::/10)"),
    ("fec0::1", "site-local (deprecated) (fec0::/10)"),
    ("ff02::1", "multicast (ff00::/8)"),
    ("ff05::1:3", "multicast (ff00::/8)"),
    ("100::1", "discard-only (100::/64)"),
    ("2001:db8::1", "documentation (2001:db8::/32)"),
    ("2001:10::1", "ORCHID (deprecated) (2001:10::/28)"),
    ("2001:20::1", "ORCHIDv2 (2001:20::/28)"),
    ("2001:2f:ffff::1", "ORCHIDv2 (2001:20::/28)"),
    ("3fff::1", "documentation (3fff::/20)"),
    ("3fff:fff::1", "documentation (3fff::/20)"),
    ("5f00::1", "SRv6 SIDs (5f00::/16)"),
    ("4000::1", "not global unicast (outside 2000::/3)"),
    ("1fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "not global unicast (outside 2000::/3)"),
    ("fe80::1%eth0", "IPv6 zone id (%eth0)"),
    # IPv6 forms embedding IPv4. Mapped (and declared NAT64) addresses are judged by the IPv4
    # they carry; every other form is denied, naming what it hides.
    ("::ffff:127.0.0.1", "IPv4-mapped (::ffff:0:0/96) embedding loopback (127.0.0.0/8)"),
    ("::ffff:7f00:1", "IPv4-mapped (::ffff:0:0/96) embedding loopback (127.0.0.0/8)"),
    (
        "::ffff:169.254.169.254",
        "IPv4-mapped (::ffff:0:0/96) embedding cloud metadata (169.254.169.254: AWS/GCP/Azure)",
    ),
    ("::ffff:10.0.0.1", "IPv4-mapped (::ffff:0:0/96) embedding private (10.0.0.0/8)"),
    ("::ffff:0.0.0.0", "IPv4-mapped (::ffff:0:0/96) embedding this network (0.0.0.0/8)"),
    ("::ffff:8.8.8.8%eth0", "IPv6 zone id (%eth0)"),
    ("::8.8.8.8", "IPv4-compatible (::/96)"),
    ("::ffff:0:808:808", "IPv4-translated (::ffff:0:0:0/96)"),
    ("::127.0.0.1", "IPv4-compatible (::/96) embedding loopback (127.0.0.0/8)"),
    ("::10.0.0.1", "IPv4-compatible (::/96) embedding private (10.0.0.0/8)"),
    ("::ffff:0:7f00:1", "IPv4-translated (::ffff:0:0:0/96) embedding loopback (127.0.0.0/8)"),
    ("64:ff9b::7f00:1", "NAT64 (64:ff9b::/96) embedding loopback (127.0.0.0/8)"),
    (
        "64:ff9b::a9fe:a9fe",
        "NAT64 (64:ff9b::/96) embedding cloud metadata (169.254.169.254: AWS/GCP/Azure)",
    ),
    ("64:ff9b::808:808", "NAT64 (64:ff9b::/96) not enabled (HERALD_EGRESS_NAT64)"),
    ("64:ff9b:1::a9fe:a9fe", "NAT64 local-use (64:ff9b:1::/48)"),
    # Only 64:ff9b:1::/48 is the local-use prefix, but 64:ff9b:1:1::1 is inside it.
    ("64:ff9b:1:1::1", "NAT64 local-use (64:ff9b:1::/48)"),
    ("64:ff9b:1:ffff::1", "NAT64 local-use (64:ff9b:1::/48)"),
    ("64:ff9b:2::1", "not global unicast (outside 2000::/3)"),
    ("2002:7f00:1::", "6to4 (2002::/16) embedding loopback (127.0.0.0/8)"),
    (
        "2002:a9fe:a9fe::",
        "6to4 (2002::/16) embedding cloud metadata (169.254.169.254: AWS/GCP/Azure)",
    ),
    ("2002:808:808::1", "6to4 (2002::/16)"),
    # Teredo: client 127.0.0.1 is stored inverted as 80ff:fffe
    ("2001:0:4136:e378:8000:63bf:80ff:fffe", "Teredo (2001::/32) embedding loopback (127.0.0.0/8)"),
    # RFC 4380's own example: client 192.0.2.45
    (
        "2001:0:4136:e378:8000:63bf:3fff:fdd2",
        "Teredo (2001::/32) embedding documentation (192.0.2.0/24)",
    ),
    ("2001:0:4136:e378:8000:63bf:f7f7:f7f7", "Teredo (2001::/32)"),
    ("2001:2::1", "benchmarking (2001:2::/48)"),  # next to, not inside, the Teredo block
    # ISATAP interface ids (RFC 5214) in a public prefix: denied when the IPv4 is not public
    ("2a00:1450:1:2:0:5efe:a00:1", f"{ISATAP} embedding private (10.0.0.0/8)"),
    ("2a00:1450:1:2:200:5efe:7f00:1", f"{ISATAP} embedding loopback (127.0.0.0/8)"),
    ("2a00:1450:1:2:300:5efe:a9fe:a9fe", f"{ISATAP} embedding {AWS_METADATA}"),
    ("fe80::5efe:808:808", "link-local (fe80::/10)"),  # the outer rule decides first
]

ALLOWED: list[str] = [
    "8.8.8.8",
    "1.1.1.1",
    "93.184.215.14",
    "2606:4700:4700::1111",
    "2001:4860:4860::8888",
    # the first address outside each neighbouring range
    "1.0.0.0",
    "9.255.255.255",
    "11.0.0.0",
    "100.63.255.255",
    "100.128.0.0",
    "126.255.255.255",
    "128.0.0.0",
    "169.253.255.255",
    "169.255.0.0",
    "172.15.255.255",
    "172.32.0.0",
    "191.255.255.255",
    "192.0.1.0",
    "192.0.3.0",
    "192.88.98.255",
    "192.88.100.0",
    "192.167.255.255",
    "192.169.0.0",
    "198.17.255.255",
    "198.20.0.0",
    "198.51.99.255",
    "198.51.101.0",
    "203.0.112.255",
    "203.0.114.0",
    "223.255.255.255",
    "2000::1",
    "2001:1:ffff::1",
    "2001:200::1",
    "2001:30::1",
    "2001:db7:ffff::1",
    "2001:db9::1",
    "2003::1",
    "3ffe:ffff::1",
    "3fff:1000::1",
    "2a00:1450:4001::1",
    # IPv4-mapped answers carry a public IPv4: as public as that address
    "::ffff:8.8.8.8",
    "::ffff:1.0.0.0",
    "::ffff:223.255.255.255",
    # ISATAP with a public IPv4, and an identifier that only resembles ISATAP
    "2a00:1450:1:2:200:5efe:808:808",
    "2a00:1450:1:2:400:5efe:a00:1",
    "2a00:1450:1:2:0:5eff:a00:1",
]


@pytest.mark.parametrize(("address", "rule"), DENIED, ids=[a for a, _ in DENIED])
def test_denied_addresses_name_their_rule(address: str, rule: str) -> None:
    verdict = classify_address(ipaddress.ip_address(address))
    assert not verdict.allowed
    assert verdict.rule == rule


@pytest.mark.parametrize("address", ALLOWED)
def test_public_unicast_is_allowed(address: str) -> None:
    verdict = classify_address(ipaddress.ip_address(address))
    assert verdict.allowed
    assert verdict.rule == PUBLIC_UNICAST


def test_cloud_metadata_rules_say_so() -> None:
    metadata = ["169.254.169.254", "169.254.170.2", "fd00:ec2::254", "100.100.100.200"]
    for address in [*metadata, "192.0.0.192"]:
        assert classify_address(ipaddress.ip_address(address)).rule.startswith("cloud metadata")


@pytest.mark.parametrize(("network", "label"), [(str(net), label) for net, label in IPV4_DENIED])
def test_every_ipv4_range_is_denied_at_both_ends_and_through_every_ipv6_wrapper(
    network: str, label: str
) -> None:
    block = ipaddress.IPv4Network(network)
    last = block.broadcast_address
    if block.prefixlen < 32 and last == ipaddress.IPv4Address("255.255.255.255"):
        last -= 1  # that one address has its own, earlier rule
    for edge in (block.network_address, last):
        verdict = classify_address(edge)
        assert not verdict.allowed
        assert verdict.rule == f"{label} ({block})"
        packed = int(edge)
        wrapped = {
            "IPv4-mapped (::ffff:0:0/96)": ipaddress.IPv6Address((0xFFFF << 32) | packed),
            "IPv4-compatible (::/96)": ipaddress.IPv6Address(packed),
            "NAT64 (64:ff9b::/96)": ipaddress.IPv6Address((0x64FF9B << 96) | packed),
            "6to4 (2002::/16)": ipaddress.IPv6Address((0x2002 << 112) | (packed << 80)),
        }
        for form, address in wrapped.items():
            if str(edge) == "0.0.0.0" and form == "IPv4-compatible (::/96)":
                continue  # that is ::, with its own rule
            assert classify_address(address).rule == f"{form} embedding {verdict.rule}"


def test_is_global_would_have_been_wrong() -> None:
    """Why the table is ours: on 3.11 the stdlib calls these global (ssrf.md §0.3)."""
    for address in ("fec0::1", "64:ff9b::7f00:1", "2002:7f00:1::"):
        assert not classify_address(ipaddress.ip_address(address)).allowed
