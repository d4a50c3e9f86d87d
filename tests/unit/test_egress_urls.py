"""The bypass corpus, run end to end through ``EgressClient`` with no network at all.

DNS is a table (``FakeResolver``) and the socket opener is a recorder (``RecordingBackend``), so
each case shows both the decision and, when allowed, the exact address the socket went to.
Invariant checked on every case: the socket never goes anywhere the address table denies.
"""

from __future__ import annotations

import asyncio
import ipaddress
from dataclasses import dataclass, field

import pytest

from dispatch.egress import (
    EgressClient,
    EgressDenied,
    EgressError,
    EgressPolicy,
    EgressTimeout,
    PinnedNetworkBackend,
    check_url,
    system_resolver,
)
from dispatch.egress.ranges import classify_address
from tests.egress_support.connector import RecordingBackend, redirect_reply
from tests.egress_support.resolver import FakeResolver

PUBLIC = "93.184.215.14"

ANSWERS: dict[str, list[str]] = {
    "public.test": [PUBLIC],
    "example.test": [PUBLIC],
    "dual.test": [PUBLIC, "2606:4700:4700::1111"],
    "v6only.test": ["2606:4700:4700::1111"],
    "xn--r8jz45g.xn--zckzah": [PUBLIC],  # 例え.テスト after IDNA
    "mixed.test": ["8.8.8.8", "10.0.0.1"],
    "rebind-any.test": [PUBLIC, "127.0.0.1"],
    "metadata.test": ["169.254.169.254"],
    "ecs.test": ["169.254.170.2"],
    "alibaba.test": ["100.100.100.200"],
    "oracle.test": ["192.0.0.192"],
    "aws6.test": ["fd00:ec2::254"],
    "cgnat.test": ["100.64.0.1"],
    "private6.test": ["fd12:3456::1"],
    "mapped.test": ["::ffff:10.0.0.1"],
    "nat64.test": ["64:ff9b::a9fe:a9fe"],
    "sixtofour.test": ["2002:a9fe:a9fe::"],
    "zone.test": ["fe80::1%eth0"],
    "garbage.test": ["not-an-address"],
    "empty.test": [],
    "intranet.test": ["10.1.2.3"],
    "localhost": ["127.0.0.1"],
    "redirector.test": ["8.8.4.4"],
}
SEQUENCES = {"rebind.test": [[PUBLIC], ["127.0.0.1"]]}

CORPUS_POLICY = EgressPolicy(allow_http=True, extra_ports=frozenset({8080, 8443}))
HTTPS_ONLY = EgressPolicy()
ALLOWLIST_POLICY = EgressPolicy(
    allow_http=True,
    allow_cidrs=(ipaddress.ip_network("127.0.0.1/32"), ipaddress.ip_network("fd12:3456::/32")),
    allow_hosts=frozenset({"intranet.test", "localhost"}),
)

# A redirector whose 30x points inside; the redirect is re-checked before any connect.
REPLIES = {"8.8.4.4": redirect_reply("http://169.254.169.254/latest/meta-data/")}


@dataclass(frozen=True)
class Case:
    id: str
    url: str
    rule: str | None = None  # expected denial rule; a trailing "*" means "starts with"
    address: str | None = None  # the offending address named by the denial
    connect: str | None = None  # allowed: the only address the socket may go to
    error: type[EgressError] | None = None  # allowed by policy but failing (DNS)
    policy: EgressPolicy = field(default=CORPUS_POLICY)


def deny(id: str, url: str, rule: str, address: str | None = None, **kw: object) -> Case:
    return Case(id=id, url=url, rule=rule, address=address, **kw)  # type: ignore[arg-type]


def allow(id: str, url: str, connect: str, **kw: object) -> Case:
    return Case(id=id, url=url, connect=connect, **kw)  # type: ignore[arg-type]


NUMERIC = "non-canonical numeric host"
LOOPBACK = "loopback (127.0.0.0/8)"
AWS_METADATA = "cloud metadata (169.254.169.254: AWS/GCP/Azure)"

CORPUS: list[Case] = [
    # --- numeric encodings of 127.0.0.1 that getaddrinfo would accept
    deny("decimal", "http://2130706433/", NUMERIC),
    deny("hex-whole", "http://0x7f000001/", NUMERIC),
    deny("hex-short", "http://0x7f.1/", NUMERIC),
    deny("hex-dotted", "http://0x7f.0x0.0x0.0x1/", NUMERIC),
    deny("hex-mixed", "http://0x7f.0.0.1/", NUMERIC),
    deny("octal-whole", "http://017700000001/", NUMERIC),
    deny("octal-short", "http://0177.1/", NUMERIC),
    deny("short-2", "http://127.1/", NUMERIC),
    deny("short-3", "http://127.0.1/", NUMERIC),
    deny("zero", "http://0/", NUMERIC),
    deny("trailing-dot-ip", "http://127.0.0.1./", NUMERIC),
    deny("numeric-tld", "http://evil.127/", NUMERIC),
    deny("octal-dotted", "http://0177.0.0.1/", "invalid url*"),
    deny("leading-zero", "http://127.0.0.01/", "invalid url*"),
    deny("zero-padded", "http://127.000.000.001/", "invalid url*"),
    # --- IPv4 literals
    deny("loopback", "http://127.0.0.1/", LOOPBACK, "127.0.0.1"),
    deny("loopback-other", "http://127.255.0.1:8080/", LOOPBACK, "127.255.0.1"),
    deny("private-10", "https://10.0.0.1/", "private (10.0.0.0/8)", "10.0.0.1"),
    deny("private-172", "https://172.16.0.1/", "private (172.16.0.0/12)", "172.16.0.1"),
    deny("private-192", "https://192.168.1.1/", "private (192.168.0.0/16)", "192.168.1.1"),
    deny("cgnat", "https://100.64.0.1/", "shared address space (CGNAT) (100.64.0.0/10)"),
    deny("this-network", "http://0.0.0.0/", "this network (0.0.0.0/8)", "0.0.0.0"),
    deny("multicast", "http://224.0.0.1/", "multicast (224.0.0.0/4)"),
    deny("broadcast", "http://255.255.255.255/", "limited broadcast (255.255.255.255/32)"),
    # --- cloud metadata endpoints, by literal and by name
    deny("aws-gcp-azure", "http://169.254.169.254/latest/", AWS_METADATA, "169.254.169.254"),
    deny(
        "aws-ecs", "http://169.254.170.2/v2/credentials", "cloud metadata (169.254.170.2: AWS ECS)"
    ),
    deny("aws-ipv6", "http://[fd00:ec2::254]/", "cloud metadata (fd00:ec2::254: AWS IPv6)"),
    deny("alibaba", "http://100.100.100.200/", "cloud metadata (100.100.100.200: Alibaba)"),
    deny("oracle", "http://192.0.0.192/", "cloud metadata (192.0.0.192: Oracle)"),
    deny(
        "gcp-name",
        "http://metadata.google.internal/",
        "cloud metadata (metadata.google.internal: GCP)",
    ),
    deny("metadata-by-dns", "http://metadata.test/", AWS_METADATA, "169.254.169.254"),
    deny("ecs-by-dns", "https://ecs.test/", "cloud metadata (169.254.170.2: AWS ECS)"),
    deny("alibaba-by-dns", "https://alibaba.test/", "cloud metadata (100.100.100.200: Alibaba)"),
    deny("oracle-by-dns", "https://oracle.test/", "cloud metadata (192.0.0.192: Oracle)"),
    deny("aws6-by-dns", "https://aws6.test/", "cloud metadata (fd00:ec2::254: AWS IPv6)"),
    # --- IPv6 literals
    deny("v6-loopback", "http://[::1]/", "loopback (::1/128)", "::1"),
    deny("v6-unspecified", "http://[::]/", "unspecified (::/128)"),
    deny(
        "v6-mapped",
        "http://[::ffff:127.0.0.1]/",
        f"IPv4-mapped (::ffff:0:0/96) embedding {LOOPBACK}",
    ),
    deny(
        "v6-mapped-hex",
        "http://[::ffff:7f00:1]/",
        f"IPv4-mapped (::ffff:0:0/96) embedding {LOOPBACK}",
    ),
    deny("v6-compatible", "http://[::127.0.0.1]/", f"IPv4-compatible (::/96) embedding {LOOPBACK}"),
    deny("v6-translated", "http://[::ffff:0:7f00:1]/", "IPv4-translated (::ffff:0:0:0/96)*"),
    deny("nat64", "http://[64:ff9b::7f00:1]/", f"NAT64 (64:ff9b::/96) embedding {LOOPBACK}"),
    deny(
        "nat64-metadata",
        "http://[64:ff9b::a9fe:a9fe]/",
        f"NAT64 (64:ff9b::/96) embedding {AWS_METADATA}",
    ),
    deny("nat64-local", "http://[64:ff9b:1::a9fe:a9fe]/", "NAT64 local-use (64:ff9b:1::/48)"),
    deny(
        "6to4-metadata", "http://[2002:a9fe:a9fe::]/", f"6to4 (2002::/16) embedding {AWS_METADATA}"
    ),
    deny("6to4-public", "http://[2002:808:808::]/", "6to4 (2002::/16)"),
    deny(
        "teredo",
        "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/",
        f"Teredo (2001::/32) embedding {LOOPBACK}",
    ),
    deny("zone-id", "http://[fe80::1%25eth0]/", "percent sign in host (zone id or encoding)"),
    deny("ula", "http://[fc00::1]/", "unique local (fc00::/7)"),
    deny("site-local", "http://[fec0::1]/", "site-local (deprecated) (fec0::/10)"),
    deny("link-local-v6", "http://[fe80::1]/", "link-local (fe80::/10)"),
    deny("multicast-v6", "http://[ff02::1]/", "multicast (ff00::/8)"),
    deny("documentation-v6", "http://[2001:db8::1]/", "documentation (2001:db8::/32)"),
    deny("bracketed-v4", "http://[127.0.0.1]/", "invalid url*"),
    # --- resolution: ANY bad answer denies, and names the address
    deny("mixed-answers", "https://mixed.test/", "private (10.0.0.0/8)", "10.0.0.1"),
    deny("rebind-in-one-answer", "https://rebind-any.test/", LOOPBACK, "127.0.0.1"),
    deny("cgnat-by-dns", "https://cgnat.test/", "shared address space (CGNAT) (100.64.0.0/10)"),
    deny("ula-by-dns", "https://private6.test/", "unique local (fc00::/7)", "fd12:3456::1"),
    deny(
        "mapped-by-dns",
        "https://mapped.test/",
        "IPv4-mapped (::ffff:0:0/96) embedding private (10.0.0.0/8)",
    ),
    deny("nat64-by-dns", "https://nat64.test/", f"NAT64 (64:ff9b::/96) embedding {AWS_METADATA}"),
    deny("6to4-by-dns", "https://sixtofour.test/", f"6to4 (2002::/16) embedding {AWS_METADATA}"),
    deny("zone-by-dns", "https://zone.test/", "IPv6 zone id (%eth0)", "fe80::1%eth0"),
    deny(
        "garbage-answer", "https://garbage.test/", "unparseable resolver answer", "not-an-address"
    ),
    deny("redirect-to-metadata", "http://redirector.test/", AWS_METADATA, "169.254.169.254"),
    # --- reserved names (refused before DNS)
    deny("localhost", "http://localhost/", "reserved name (localhost)"),
    deny("localhost-upper-dot", "http://LOCALHOST./", "reserved name (localhost)"),
    deny("sub-localhost", "http://a.localhost/", "reserved name (*.localhost)"),
    deny("mdns", "http://printer.local/", "reserved name (*.local)"),
    deny("internal", "http://db.internal/", "reserved name (*.internal)"),
    deny("home-arpa", "http://router.home.arpa/", "reserved name (*.home.arpa)"),
    deny("unicode-digits", "http://①②⑦.0.0.1/", "invalid url*"),
    deny("unicode-letters", "http://ⓛⓞⓒⓐⓛⓗⓞⓢⓣ/", "invalid url*"),
    deny("nul-byte", "http://127.0.0.1\x00.public.test/", "control character or space in url"),
    # --- schemes
    deny("ftp", "ftp://public.test/", "scheme not allowed (ftp)"),
    deny("file", "file:///etc/passwd", "scheme not allowed (file)"),
    deny("gopher", "gopher://public.test:70/_GET", "scheme not allowed (gopher)"),
    deny("javascript", "javascript:alert(1)", "scheme not allowed (javascript)"),
    deny("data", "data:text/plain,hi", "scheme not allowed (data)"),
    deny("no-scheme", "//public.test/", "scheme not allowed (none)"),
    deny(
        "http-when-https-only",
        "http://public.test/",
        "scheme not allowed (http)",
        policy=HTTPS_ONLY,
    ),
    # --- userinfo and parser differentials
    deny("userinfo", "https://user:pass@public.test/", "userinfo not allowed"),
    deny("userinfo-host-confusion", "https://public.test@127.0.0.1/", "userinfo not allowed"),
    deny("empty-userinfo", "https://@public.test/", "userinfo not allowed"),
    deny("backslash", "https://public.test\\@127.0.0.1/", "backslash in authority"),
    deny("leading-space", " https://public.test/", "control character or space in url"),
    deny("tab", "https://public.test/\t", "control character or space in url"),
    deny("percent-host", "https://127.0.0.%31/", "percent sign in host (zone id or encoding)"),
    deny("percent-name", "https://exa%6dple.test/", "percent sign in host (zone id or encoding)"),
    deny("missing-host", "https:///path", "missing host"),
    # --- ports
    deny("port-ssh", "https://public.test:22/", "port not allowed (22)"),
    deny(
        "port-80-https-only", "https://public.test:80/", "port not allowed (80)", policy=HTTPS_ONLY
    ),
    deny("port-zero", "https://public.test:0/", "invalid port (0)"),
    deny("port-plus", "https://public.test:+443/", "invalid port (+443)"),
    deny("port-too-big", "https://public.test:65536/", "invalid port (65536)"),
    deny("port-space", "https://public.test: 443/", "control character or space in url"),
    # --- allowlist: only what is listed
    deny(
        "allowlist-other-loopback",
        "http://127.0.0.2/",
        LOOPBACK,
        "127.0.0.2",
        policy=ALLOWLIST_POLICY,
    ),
    deny(
        "allowlist-not-this-private",
        "https://10.9.9.9/",
        "private (10.0.0.0/8)",
        policy=ALLOWLIST_POLICY,
    ),
    # --- must be ALLOWED (a guard that denies everything fails these)
    allow("google-dns", "https://8.8.8.8/", "8.8.8.8"),
    allow("cloudflare-dns", "https://1.1.1.1/", "1.1.1.1"),
    allow("cloudflare-v6", "https://[2606:4700:4700::1111]/", "2606:4700:4700::1111"),
    allow("public-name", "https://public.test/audience.csv", PUBLIC),
    allow("public-name-http", "http://public.test/", PUBLIC),
    allow("trailing-dot-name", "https://example.test./", PUBLIC),
    allow("upper-case-name", "https://PUBLIC.TEST/", PUBLIC),
    allow("idna-name", "https://例え.テスト/", PUBLIC),
    allow("v6-only-name", "https://v6only.test/", "2606:4700:4700::1111"),
    allow("dual-stack-first-answer", "https://dual.test/", PUBLIC),
    allow("fragment-at", "https://public.test#@127.0.0.1/", PUBLIC),
    allow("query-with-internal-url", "https://public.test/?next=http://127.0.0.1/", PUBLIC),
    allow("extra-port", "https://public.test:8443/", PUBLIC),
    allow("explicit-default-port", "https://public.test:443/", PUBLIC),
    allow("rebind-second-lookup", "https://rebind.test/", PUBLIC),
    allow("below-10", "https://9.255.255.255/", "9.255.255.255"),
    allow("above-10", "https://11.0.0.0/", "11.0.0.0"),
    allow("below-cgnat", "https://100.63.255.255/", "100.63.255.255"),
    allow("above-cgnat", "https://100.128.0.0/", "100.128.0.0"),
    allow("below-loopback", "https://126.255.255.255/", "126.255.255.255"),
    allow("above-loopback", "https://128.0.0.0/", "128.0.0.0"),
    allow("below-link-local", "https://169.253.255.255/", "169.253.255.255"),
    allow("above-link-local", "https://169.255.0.0/", "169.255.0.0"),
    allow("below-172", "https://172.15.255.255/", "172.15.255.255"),
    allow("above-172", "https://172.32.0.0/", "172.32.0.0"),
    allow("below-192-168", "https://192.167.255.255/", "192.167.255.255"),
    allow("above-192-168", "https://192.169.0.0/", "192.169.0.0"),
    allow("below-benchmark", "https://198.17.255.255/", "198.17.255.255"),
    allow("above-benchmark", "https://198.20.0.0/", "198.20.0.0"),
    allow("below-multicast", "https://223.255.255.255/", "223.255.255.255"),
    allow("after-teredo", "https://[2001:200::1]/", "2001:200::1"),
    allow("after-orchid2", "https://[2001:30::1]/", "2001:30::1"),
    allow("after-documentation-v6", "https://[2001:db9::1]/", "2001:db9::1"),
    allow("after-6to4", "https://[2003::1]/", "2003::1"),
    allow("after-3fff-20", "https://[3fff:1000::1]/", "3fff:1000::1"),
    # --- allowlist opens exactly what it names
    allow("allowlisted-cidr", "http://127.0.0.1/", "127.0.0.1", policy=ALLOWLIST_POLICY),
    allow("allowlisted-v6-cidr", "http://[fd12:3456::1]/", "fd12:3456::1", policy=ALLOWLIST_POLICY),
    allow("allowlisted-host", "https://intranet.test/", "10.1.2.3", policy=ALLOWLIST_POLICY),
    allow("allowlisted-reserved-name", "http://localhost/", "127.0.0.1", policy=ALLOWLIST_POLICY),
]


@dataclass
class Outcome:
    backend: RecordingBackend
    resolver: FakeResolver
    error: Exception | None


def _run(case: Case) -> Outcome:
    resolver = FakeResolver(ANSWERS, sequences=SEQUENCES)
    backend = RecordingBackend(REPLIES)

    async def fetch() -> None:
        async with EgressClient(case.policy, resolver=resolver, network_backend=backend) as client:
            status, _headers, body = await client.request("GET", case.url)
            assert (status, body) == (200, b"ok")

    error: Exception | None = None
    try:
        asyncio.run(fetch())
    except (EgressDenied, EgressError) as exc:
        error = exc
    # Whatever happened, the socket never went anywhere the policy denies.
    for connect in backend.connects:
        assert (
            connect.host == case.connect
            or case.policy.verdict_for(ipaddress.ip_address(connect.host), "").allowed
        ), connect
    return Outcome(backend, resolver, error)


def test_corpus_is_big_enough_and_ids_are_unique() -> None:
    assert len(CORPUS) >= 60
    assert len({case.id for case in CORPUS}) == len(CORPUS)
    assert sum(case.connect is not None for case in CORPUS) >= 30


@pytest.mark.parametrize("case", CORPUS, ids=[case.id for case in CORPUS])
def test_corpus(case: Case) -> None:
    outcome = _run(case)
    if case.connect is not None:
        assert outcome.error is None
        assert [connect.host for connect in outcome.backend.connects] == [case.connect]
        assert all(count == 1 for count in outcome.resolver.calls.values())
        return
    assert isinstance(outcome.error, EgressDenied), outcome.error
    assert case.rule is not None
    rule = outcome.error.rule
    if case.rule.endswith("*"):
        assert rule.startswith(case.rule[:-1]), rule
    else:
        assert rule == case.rule
    if case.address is not None:
        assert outcome.error.address == case.address
    assert str(outcome.error).startswith("egress denied: ")
    assert rule in str(outcome.error)
    # Denied before the socket: only the (public) redirector was ever connected to.
    assert all(connect.host == "8.8.4.4" for connect in outcome.backend.connects)


def test_allowed_literal_never_touches_dns() -> None:
    outcome = _run(allow("literal", "https://8.8.8.8/", "8.8.8.8"))
    assert outcome.error is None
    assert outcome.resolver.log == []
    assert outcome.backend.connects[0].port == 443


def test_rebinding_resolver_is_asked_once_and_socket_goes_to_its_first_answer() -> None:
    """rebind.test answers public first and 127.0.0.1 on any later lookup."""
    outcome = _run(allow("rebind", "https://rebind.test/", PUBLIC))
    assert outcome.error is None
    assert outcome.resolver.calls["rebind.test"] == 1
    assert [c.host for c in outcome.backend.connects] == [PUBLIC]


def test_tls_name_stays_the_host_name_while_the_socket_goes_to_the_address() -> None:
    outcome = _run(allow("sni", "https://public.test:8443/", PUBLIC))
    assert outcome.error is None
    assert outcome.backend.connects[0].port == 8443
    assert outcome.backend.sni_names == ["public.test"]


def test_redirect_is_checked_before_any_connect_to_its_target() -> None:
    outcome = _run(deny("r", "http://redirector.test/", AWS_METADATA))
    assert isinstance(outcome.error, EgressDenied)
    assert outcome.error.url == "http://169.254.169.254/latest/meta-data/"
    assert [c.host for c in outcome.backend.connects] == ["8.8.4.4"]


def test_proxy_environment_is_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.setenv(name, "http://10.0.0.99:3128")
    monkeypatch.setenv("NO_PROXY", "")
    outcome = _run(allow("proxy", "https://public.test/", PUBLIC))
    assert outcome.error is None
    assert [(c.host, c.port) for c in outcome.backend.connects] == [(PUBLIC, 443)]


def test_dns_failure_is_an_error_not_a_connect() -> None:
    for host, reason in (("unknown.test", "dns lookup failed"), ("empty.test", "no addresses")):
        outcome = _run(Case(id=host, url=f"https://{host}/"))
        assert isinstance(outcome.error, EgressError)
        assert not isinstance(outcome.error, EgressTimeout)
        assert reason in outcome.error.reason
        assert outcome.backend.connects == []


def test_dns_lookup_has_a_deadline() -> None:
    resolver = FakeResolver(hanging=["slow.test"])
    backend = RecordingBackend()
    policy = EgressPolicy(dns_timeout=0.05)

    async def fetch() -> None:
        async with EgressClient(policy, resolver=resolver, network_backend=backend) as client:
            await client.request("GET", "https://slow.test/")

    with pytest.raises(EgressTimeout, match="dns lookup exceeded"):
        asyncio.run(fetch())
    assert backend.connects == []


@pytest.mark.parametrize(
    ("host", "port", "rule"),
    [
        ("public.test", 22, "port not allowed (22)"),
        ("0x7f.1", 443, NUMERIC),
        ("localhost", 443, "reserved name (localhost)"),
        ("metadata.test", 443, AWS_METADATA),
        ("::1", 443, "loopback (::1/128)"),
    ],
)
def test_backend_refuses_on_its_own_even_if_check_url_were_skipped(
    host: str, port: int, rule: str
) -> None:
    inner = RecordingBackend()
    backend = PinnedNetworkBackend(CORPUS_POLICY, resolver=FakeResolver(ANSWERS), inner=inner)
    with pytest.raises(EgressDenied) as caught:
        asyncio.run(backend.connect_tcp(host, port))
    assert caught.value.rule == rule
    assert inner.connects == []


def test_backend_never_opens_unix_sockets() -> None:
    backend = PinnedNetworkBackend(CORPUS_POLICY, inner=RecordingBackend())
    with pytest.raises(EgressDenied, match="unix sockets not allowed"):
        asyncio.run(backend.connect_unix_socket("/var/run/docker.sock"))


def test_unreachable_first_answer_falls_back_to_the_next_validated_answer() -> None:
    resolver = FakeResolver(ANSWERS)
    inner = RecordingBackend(unreachable=[PUBLIC])

    async def fetch() -> int:
        async with EgressClient(CORPUS_POLICY, resolver=resolver, network_backend=inner) as client:
            return (await client.request("GET", "https://dual.test/"))[0]

    assert asyncio.run(fetch()) == 200
    assert [c.host for c in inner.connects] == [PUBLIC, "2606:4700:4700::1111"]
    assert resolver.calls["dual.test"] == 1


def test_system_resolver_returns_address_strings() -> None:
    # A numeric host is parsed by getaddrinfo itself: no DNS query leaves the machine.
    assert asyncio.run(system_resolver("127.0.0.1", 443)) == ["127.0.0.1"]


# --- check_url on its own, and the operator configuration


def test_check_url_returns_the_parsed_url_it_checked() -> None:
    url = check_url("https://Public.Test:8443/a?b=c", CORPUS_POLICY)
    assert (url.raw_host, url.port, url.raw_path) == (b"public.test", 8443, b"/a?b=c")


def test_denial_message_format() -> None:
    error = EgressDenied(url="http://x.test/", rule="loopback (127.0.0.0/8)", address="127.0.0.1")
    assert str(error) == "egress denied: http://x.test/ -> 127.0.0.1: loopback (127.0.0.0/8)"
    assert str(EgressDenied(url="ftp://x/", rule="r")) == "egress denied: ftp://x/: r"


def test_policy_from_env() -> None:
    policy = EgressPolicy.from_env(
        {
            "HERALD_EGRESS_ALLOW": " 10.0.0.0/8, 127.0.0.1 ,fd00::/8, Intranet.Example., ",
            "HERALD_EGRESS_ALLOW_HTTP": "1",
            "HERALD_EGRESS_PORTS": "8443,9000",
        },
        max_bytes=1024,
    )
    assert policy.allow_cidrs == (
        ipaddress.ip_network("10.0.0.0/8"),
        ipaddress.ip_network("127.0.0.1/32"),
        ipaddress.ip_network("fd00::/8"),
    )
    assert policy.allow_hosts == frozenset({"intranet.example"})
    assert policy.allow_http is True
    assert policy.extra_ports == frozenset({8443, 9000})
    assert policy.allowed_ports == frozenset({80, 443, 8443, 9000})
    assert policy.max_bytes == 1024
    assert policy.verdict_for(ipaddress.ip_address("10.2.3.4"), "x").allowed
    assert policy.verdict_for(ipaddress.ip_address("192.168.1.1"), "intranet.example").allowed
    assert not policy.verdict_for(ipaddress.ip_address("192.168.1.1"), "other.example").allowed


def test_policy_from_empty_env_is_the_strict_default() -> None:
    policy = EgressPolicy.from_env({})
    assert policy == EgressPolicy()
    assert policy.allowed_schemes == frozenset({"https"})
    assert policy.allowed_ports == frozenset({443})


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("HERALD_EGRESS_ALLOW", "10.1.2.3/8"),  # host bits set: a typo, not a network
        ("HERALD_EGRESS_ALLOW", "0x7f.1"),
        ("HERALD_EGRESS_ALLOW", "user@host"),
        ("HERALD_EGRESS_ALLOW", "http://host/"),
        ("HERALD_EGRESS_ALLOW_HTTP", "maybe"),
        ("HERALD_EGRESS_PORTS", "80,abc"),
        ("HERALD_EGRESS_PORTS", "70000"),
    ],
)
def test_policy_from_env_rejects_malformed_values(name: str, value: str) -> None:
    with pytest.raises(ValueError, match=name):
        EgressPolicy.from_env({name: value})


def test_every_corpus_denial_of_a_literal_agrees_with_the_table() -> None:
    for case in CORPUS:
        if case.address not in (None, "not-an-address") and case.policy is CORPUS_POLICY:
            address = ipaddress.ip_address(str(case.address))
            assert classify_address(address).rule == case.rule
