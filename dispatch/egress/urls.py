"""URL and host checks made before any DNS lookup.

``check_url_syntax`` holds the checks that do not depend on the operator's policy, so a campaign
file can be checked where it is written; ``check_url`` adds the policy (schemes, ports, the
address table for IP literals, reserved names) and is what every request goes through.
"""

from __future__ import annotations

import re
from typing import Final

import httpx

from dispatch.egress.errors import EgressDenied
from dispatch.egress.names import HOST_NAME, looks_numeric, normalise_name, parse_literal
from dispatch.egress.policy import EgressPolicy
from dispatch.egress.ranges import IPAddress

DEFAULT_PORTS: Final[dict[str, int]] = {"http": 80, "https": 443}

_UNSAFE_URL_CHARS: Final = re.compile(r"[\x00-\x20\x7f]")
_AUTHORITY: Final = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://(?P<authority>[^/?#]*)")
_PORT_TEXT: Final = re.compile(r"[0-9]{1,5}")
_RESERVED_NAMES: Final = frozenset(
    {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback", "broadcasthost"}
)
_RESERVED_SUFFIXES: Final = (".localhost", ".local", ".internal", ".home.arpa", ".localdomain")
_METADATA_NAMES: Final[dict[str, str]] = {
    "metadata.google.internal": "GCP",
    "metadata.goog": "GCP",
    "metadata": "GCP short name",
    "instance-data": "AWS",
    "instance-data.ec2.internal": "AWS",
}


def check_url_syntax(url: str) -> httpx.URL:
    """The checks no policy can relax: an http(s) URL with a well-formed host and port.

    Refuses control characters, userinfo, a backslash or ``%`` in the authority, a malformed
    port, and non-canonical numeric hosts. No DNS lookup, no address table.
    """

    def deny(rule: str) -> EgressDenied:
        return EgressDenied(url=url, rule=rule)

    # httpx keeps a space in the port; other parsers strip or reinterpret these (CVE-2023-24329),
    # so they are refused rather than left for some later log or hop to read differently.
    if _UNSAFE_URL_CHARS.search(url):
        raise deny("control character or space in url")
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise deny(f"invalid url ({exc})") from None
    if parsed.scheme not in DEFAULT_PORTS:
        raise deny(f"scheme not allowed ({parsed.scheme or 'none'})")
    authority_match = _AUTHORITY.match(url)
    authority = authority_match["authority"] if authority_match else ""
    # WHATWG parsers read "\\" as "/" and would pick a different host than httpx does.
    if "\\" in authority:
        raise deny("backslash in authority")
    if "@" in authority or parsed.userinfo:
        raise deny("userinfo not allowed")
    port_text = _port_text(authority)
    if port_text and (not _PORT_TEXT.fullmatch(port_text) or not 1 <= int(port_text) <= 65535):
        raise deny(f"invalid port ({port_text})")
    _check_host_syntax(parsed.raw_host.decode("ascii"), url=url)
    return parsed


def check_url(url: str, policy: EgressPolicy) -> httpx.URL:
    """Parse ``url`` with the parser that will fetch it, and refuse it before any DNS lookup."""
    parsed = check_url_syntax(url)
    if parsed.scheme not in policy.allowed_schemes:
        raise EgressDenied(url=url, rule=f"scheme not allowed ({parsed.scheme})")
    port = parsed.port if parsed.port is not None else DEFAULT_PORTS[parsed.scheme]
    if port not in policy.allowed_ports:
        raise EgressDenied(url=url, rule=f"port not allowed ({port})")
    check_host(parsed.raw_host.decode("ascii"), policy, url=url)
    return parsed


def _port_text(authority: str) -> str:
    """The raw text after the host's ':' - httpx has already normalised ``:+80`` to 80."""
    if authority.startswith("["):
        rest = authority[authority.find("]") + 1 :]
    else:
        rest = authority[authority.find(":") :] if ":" in authority else ""
    return rest[1:]


def _check_host_syntax(host: str, *, url: str) -> None:
    if not host:
        raise EgressDenied(url=url, rule="missing host")
    if "%" in host:
        raise EgressDenied(url=url, rule="percent sign in host (zone id or encoding)")
    if parse_literal(host) is not None:
        return
    name = normalise_name(host)
    if looks_numeric(name):
        raise EgressDenied(url=url, rule="non-canonical numeric host")
    if not HOST_NAME.fullmatch(name):
        raise EgressDenied(url=url, rule="invalid host name")


def check_host(host: str, policy: EgressPolicy, *, url: str) -> IPAddress | None:
    """Refuse a bad host; return it parsed if it is an IP literal, ``None`` if it is a name.

    ``host`` is httpx's ``raw_host``: ASCII (IDNA already applied), IPv6 without brackets.
    Only ASCII ever reaches ``getaddrinfo``, whose IDNA-2003 codec would read ``①②⑦.0.0.1``.
    """
    _check_host_syntax(host, url=url)
    literal = parse_literal(host)
    if literal is not None:
        verdict = policy.verdict_for(literal, host)
        if not verdict.allowed:
            raise EgressDenied(url=url, rule=verdict.rule, address=str(literal))
        return literal
    name = normalise_name(host)
    if name in policy.allow_hosts:
        return None
    reserved = _reserved_name_rule(name)
    if reserved is not None:
        raise EgressDenied(url=url, rule=reserved)
    return None


def _reserved_name_rule(name: str) -> str | None:
    provider = _METADATA_NAMES.get(name)
    if provider is not None:
        return f"cloud metadata ({name}: {provider})"
    if name in _RESERVED_NAMES:
        return f"reserved name ({name})"
    for suffix in _RESERVED_SUFFIXES:
        if name.endswith(suffix):
            return f"reserved name (*{suffix})"
    return None
