"""IPv6 forms that carry an IPv4 address (issue 7 item 16).

IPv4-mapped answers, and NAT64 ones once the operator declares the prefix, are judged by the
IPv4 address they carry: the property tests below compare, for every IPv4 address hypothesis
can find (biased towards the edges of every denied range), the verdict for the wrapped form
with the verdict for the address itself. Every other embedding stays denied whatever it carries.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Iterator

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from dispatch.egress import EgressClient, EgressDenied, EgressPolicy
from dispatch.egress.ranges import IPV4_DENIED, WELL_KNOWN_NAT64, Verdict, classify_address
from tests.egress_support.connector import RecordingBackend
from tests.egress_support.resolver import FakeResolver
from tests.egress_support.servers import LocalHTTPServer, Reply
from tests.support.factories import invoke

V4 = ipaddress.IPv4Address
V6 = ipaddress.IPv6Address
MAPPED = "IPv4-mapped (::ffff:0:0/96)"
NAT64 = "NAT64 (64:ff9b::/96)"
NAT64_POLICY = EgressPolicy(nat64_prefixes=(WELL_KNOWN_NAT64,))
# A network-specific prefix inside the RFC 8215 local-use block, as an operator would declare it.
LOCAL_USE_96 = ipaddress.IPv6Network("64:ff9b:1:0:0:1::/96")

_DENIED_V4 = [network for network, _label in IPV4_DENIED]
_METADATA_V4 = ["169.254.169.254", "169.254.170.2", "100.100.100.200", "192.0.0.192"]


def _edges(network: ipaddress.IPv4Network) -> list[V4]:
    first, last = int(network.network_address), int(network.broadcast_address)
    return [V4(n) for n in {first - 1, first, last, last + 1} if 0 <= n <= 0xFFFFFFFF]


# Uniform IPv4 addresses are nearly all public; mix in every denied range, its edges and the
# addresses just outside it, where an off-by-one in the unwrapping would show.
ipv4s = st.one_of(
    st.ip_addresses(v=4),
    st.sampled_from(_DENIED_V4).flatmap(lambda network: st.ip_addresses(network=network)),
    st.sampled_from(sorted({edge for network in _DENIED_V4 for edge in _edges(network)})),
    st.sampled_from([V4(address) for address in _METADATA_V4]),
)
allow_cidrs = st.lists(
    st.builds(
        lambda address, length: ipaddress.IPv4Network(f"{address}/{length}", strict=False),
        st.ip_addresses(v=4),
        st.integers(min_value=8, max_value=32),
    )
    | st.sampled_from(_DENIED_V4),
    max_size=3,
)


def mapped(address: V4) -> V6:
    return V6((0xFFFF << 32) | int(address))


def nat64(address: V4, prefix: ipaddress.IPv6Network = WELL_KNOWN_NAT64) -> V6:
    return V6(int(prefix.network_address) | int(address))


def _same_verdict(wrapped: Verdict, plain: Verdict, form: str) -> None:
    assert wrapped.allowed == plain.allowed
    if plain.allowed:
        assert wrapped == plain
    else:
        assert wrapped.rule == f"{form} embedding {plain.rule}"


@given(ipv4s)
@example(V4("127.0.0.1"))
@example(V4("10.0.0.1"))
@example(V4("169.254.169.254"))
@example(V4("8.8.8.8"))
def test_mapped_and_declared_nat64_are_judged_by_the_embedded_ipv4(address: V4) -> None:
    plain = classify_address(address)
    _same_verdict(classify_address(mapped(address)), plain, MAPPED)
    _same_verdict(classify_address(nat64(address), (WELL_KNOWN_NAT64,)), plain, NAT64)
    declared = classify_address(nat64(address, LOCAL_USE_96), (LOCAL_USE_96,))
    _same_verdict(declared, plain, f"NAT64 ({LOCAL_USE_96})")


@given(ipv4s)
@example(V4("8.8.8.8"))
def test_undeclared_nat64_and_the_other_embeddings_are_denied_whatever_they_carry(
    address: V4,
) -> None:
    packed = int(address)
    others = {
        "NAT64 (64:ff9b::/96)": nat64(address),
        "NAT64 local-use (64:ff9b:1::/48)": nat64(address, LOCAL_USE_96),
        "IPv4-translated (::ffff:0:0:0/96)": V6((0xFFFF << 48) | packed),
        "6to4 (2002::/16)": V6((0x2002 << 112) | (packed << 80) | 1),
        "Teredo (2001::/32)": V6((0x2001 << 112) | (~packed & 0xFFFFFFFF)),
    }
    if packed > 1:  # :: and ::1 have their own rules
        others["IPv4-compatible (::/96)"] = V6(packed)
    for form, wrapped in others.items():
        verdict = classify_address(wrapped)
        assert not verdict.allowed, wrapped
        assert verdict.rule.startswith(form), (wrapped, verdict.rule)
        # The well-known prefix is refused for a public IPv4 only for want of the option.
        verdict = NAT64_POLICY.verdict_for(wrapped, "")
        if form != NAT64 or not classify_address(address).allowed:
            assert not verdict.allowed, wrapped


@given(ipv4s, allow_cidrs)
@example(V4("10.0.0.1"), [ipaddress.IPv4Network("10.0.0.0/8")])
@example(V4("127.0.0.1"), [ipaddress.IPv4Network("127.0.0.1/32")])
def test_the_allowlist_applies_to_the_embedded_address_too(
    address: V4, cidrs: list[ipaddress.IPv4Network]
) -> None:
    without = EgressPolicy(allow_cidrs=tuple(cidrs))
    with_nat64 = EgressPolicy(allow_cidrs=tuple(cidrs), nat64_prefixes=(WELL_KNOWN_NAT64,))
    plain = without.verdict_for(address, "x.test").allowed
    assert without.verdict_for(mapped(address), "x.test").allowed == plain
    assert with_nat64.verdict_for(nat64(address), "x.test").allowed == plain
    # Without the option the allowlist of IPv4 ranges never opens the NAT64 prefix.
    assert not without.verdict_for(nat64(address), "x.test").allowed


@pytest.mark.parametrize(
    ("address", "rule"),
    [
        ("::ffff:127.0.0.1", f"{MAPPED} embedding loopback (127.0.0.0/8)"),
        ("::ffff:10.0.0.1", f"{MAPPED} embedding private (10.0.0.0/8)"),
        (
            "::ffff:169.254.169.254",
            f"{MAPPED} embedding cloud metadata (169.254.169.254: AWS/GCP/Azure)",
        ),
        (
            "64:ff9b::169.254.169.254",
            f"{NAT64} embedding cloud metadata (169.254.169.254: AWS/GCP/Azure)",
        ),
        ("64:ff9b::127.0.0.1", f"{NAT64} embedding loopback (127.0.0.0/8)"),
        ("64:ff9b::10.0.0.1", f"{NAT64} embedding private (10.0.0.0/8)"),
        ("64:ff9b:1::808:808", "NAT64 local-use (64:ff9b:1::/48)"),
        ("2002:808:808::1", "6to4 (2002::/16)"),
    ],
)
def test_private_embeddings_stay_denied_with_nat64_enabled(address: str, rule: str) -> None:
    verdict = NAT64_POLICY.verdict_for(ipaddress.ip_address(address), "x.test")
    assert verdict == Verdict(allowed=False, rule=rule)


# --- the operator option


@pytest.mark.parametrize(
    ("value", "prefixes"),
    [
        ("", ()),
        ("0", ()),
        ("off", ()),
        ("1", ("64:ff9b::/96",)),
        ("true", ("64:ff9b::/96",)),
        ("64:ff9b::/96", ("64:ff9b::/96",)),
        (" 64:ff9b:1:0:0:1::/96 , fd00:64::/96", ("64:ff9b:1:0:0:1::/96", "fd00:64::/96")),
    ],
)
def test_nat64_setting(value: str, prefixes: tuple[str, ...]) -> None:
    policy = EgressPolicy.from_env({"HERALD_EGRESS_NAT64": value})
    assert policy.nat64_prefixes == tuple(ipaddress.IPv6Network(p) for p in prefixes)


@pytest.mark.parametrize(
    "value",
    [
        "maybe",
        "64:ff9b::/64",  # another RFC 6052 length: we decode only /96
        "64:ff9b:1::/48",  # the whole local-use block has no single layout
        "64:ff9b::1/96",  # host bits set: a typo
        "10.0.0.0/8",
        "1,64:ff9b::/96",
    ],
)
def test_nat64_setting_rejects_what_it_cannot_decode(value: str) -> None:
    with pytest.raises(ValueError, match="HERALD_EGRESS_NAT64"):
        EgressPolicy.from_env({"HERALD_EGRESS_NAT64": value})


def test_policy_refuses_a_nat64_prefix_of_another_length() -> None:
    with pytest.raises(ValueError, match="/96"):
        EgressPolicy(nat64_prefixes=(ipaddress.IPv6Network("64:ff9b::/64"),))


# --- end to end through EgressClient: DNS is a table, the socket a recorder

ANSWERS = {
    "mapped-public.test": ["::ffff:8.8.8.8"],
    "mapped-private.test": ["::ffff:10.0.0.1"],
    "nat64-public.test": ["64:ff9b::808:808"],
    "nat64-metadata.test": ["64:ff9b::a9fe:a9fe"],
    "dual-mapped.test": ["::ffff:8.8.8.8", "::ffff:127.0.0.1"],
}


def _fetch(url: str, policy: EgressPolicy) -> tuple[list[str], EgressDenied | None]:
    backend = RecordingBackend()

    async def fetch() -> None:
        client = EgressClient(policy, resolver=FakeResolver(ANSWERS), network_backend=backend)
        async with client:
            await client.request("GET", url)

    try:
        asyncio.run(fetch())
    except EgressDenied as denied:
        return [c.host for c in backend.connects], denied
    return [c.host for c in backend.connects], None


def test_a_mapped_answer_connects_to_the_ipv4_it_was_judged_by() -> None:
    assert _fetch("https://mapped-public.test/", EgressPolicy()) == (["8.8.8.8"], None)
    assert _fetch("https://[::ffff:8.8.8.8]/", EgressPolicy()) == (["8.8.8.8"], None)


def test_a_mapped_private_answer_is_denied_unless_allowlisted() -> None:
    connects, denied = _fetch("https://mapped-private.test/", EgressPolicy())
    assert connects == []
    assert denied is not None
    assert denied.rule == f"{MAPPED} embedding private (10.0.0.0/8)"
    listed = EgressPolicy(allow_cidrs=(ipaddress.ip_network("10.0.0.0/8"),))
    assert _fetch("https://mapped-private.test/", listed) == (["10.0.0.1"], None)


def test_any_private_mapped_answer_denies_the_whole_lookup() -> None:
    connects, denied = _fetch("https://dual-mapped.test/", EgressPolicy())
    assert connects == []
    assert denied is not None
    assert denied.rule == f"{MAPPED} embedding loopback (127.0.0.0/8)"


def test_nat64_is_allowed_only_by_the_operator_option() -> None:
    connects, denied = _fetch("https://nat64-public.test/", EgressPolicy())
    assert connects == []
    assert denied is not None
    assert denied.rule == f"{NAT64} not enabled (HERALD_EGRESS_NAT64)"
    # Through the translator: the socket goes to the IPv6 address, the only way to reach it.
    assert _fetch("https://nat64-public.test/", NAT64_POLICY) == (["64:ff9b::808:808"], None)
    connects, denied = _fetch("https://nat64-metadata.test/", NAT64_POLICY)
    assert connects == []
    assert denied is not None
    assert denied.rule == f"{NAT64} embedding cloud metadata (169.254.169.254: AWS/GCP/Azure)"


# --- through the real CLI, against a server on 127.0.0.1 reached by its IPv4-mapped literal


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalHTTPServer]:
    with LocalHTTPServer({"/a.csv": Reply(body=b"email\nann@example.com\n")}) as local:
        monkeypatch.setenv("HERALD_EGRESS_ALLOW_HTTP", "1")
        monkeypatch.setenv("HERALD_EGRESS_PORTS", str(local.port))
        monkeypatch.delenv("HERALD_EGRESS_ALLOW", raising=False)
        monkeypatch.delenv("HERALD_EGRESS_NAT64", raising=False)
        yield local


def test_cli_mapped_loopback_is_denied_and_the_allowlist_admits_it(
    server: LocalHTTPServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = server.url("/a.csv", host="[::ffff:127.0.0.1]")
    result = invoke("audience", "check", url)
    assert result.exit_code == 2, result.output
    assert "IPv4-mapped (::ffff:0:0/96) embedding loopback (127.0.0.0/8)" in result.output
    assert server.requests == []
    monkeypatch.setenv("HERALD_EGRESS_ALLOW", "127.0.0.1/32")
    result = invoke("audience", "check", url)
    assert result.exit_code == 0, result.output
    assert "1 recipient(s)" in result.output
    assert [request.peer for request in server.requests] == ["127.0.0.1"]


def test_cli_nat64_of_loopback_is_denied_even_with_nat64_enabled(
    server: LocalHTTPServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HERALD_EGRESS_NAT64", "1")
    result = invoke("audience", "check", server.url("/a.csv", host="[64:ff9b::127.0.0.1]"))
    assert result.exit_code == 2, result.output
    assert "NAT64 (64:ff9b::/96) embedding loopback (127.0.0.0/8)" in result.output
    assert server.requests == []


def test_cli_rejects_a_malformed_nat64_setting_in_one_line(
    server: LocalHTTPServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HERALD_EGRESS_NAT64", "64:ff9b::/64")
    result = invoke("audience", "check", server.url("/a.csv"))
    assert result.exit_code == 2, result.output
    assert "HERALD_EGRESS_NAT64: '64:ff9b::/64' is not 1, 0 or an IPv6 /96 prefix" in result.output
    assert server.requests == []
