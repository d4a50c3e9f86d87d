"""The egress policy: caps, allowed schemes and ports, and the operator allowlist."""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from dispatch.egress.names import HOST_NAME, looks_numeric, normalise_name
from dispatch.egress.ranges import (
    WELL_KNOWN_NAT64,
    IPAddress,
    NAT64Prefixes,
    Verdict,
    classify_address,
    embedded_destination,
)

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class EgressPolicy:
    allow_http: bool = False
    extra_ports: frozenset[int] = frozenset()
    allow_cidrs: tuple[IPNetwork, ...] = ()
    # Names whose answers are trusted whatever they are (lower-case, no trailing dot).
    allow_hosts: frozenset[str] = frozenset()
    max_bytes: int = 50 * 1024 * 1024
    total_timeout: float = 60.0
    dns_timeout: float = 5.0
    max_redirects: int = 5
    # Extra request headers that carry secrets: stripped, like Authorization, on cross-origin hops.
    secret_headers: frozenset[str] = frozenset()
    # NAT64 /96 prefixes of the network we run in: addresses in them are judged by their IPv4.
    nat64_prefixes: NAT64Prefixes = ()

    def __post_init__(self) -> None:
        # Normalise here so every comparison below can be a plain set lookup, and so a policy
        # built from plain sets or lists stays hashable.
        object.__setattr__(self, "allow_hosts", frozenset(map(normalise_name, self.allow_hosts)))
        object.__setattr__(self, "extra_ports", frozenset(self.extra_ports))
        object.__setattr__(self, "allow_cidrs", tuple(self.allow_cidrs))
        object.__setattr__(self, "nat64_prefixes", tuple(self.nat64_prefixes))
        for prefix in self.nat64_prefixes:
            # RFC 6052 also allows /32../64 layouts split around the u-octet; we decode only the
            # /96 one (the low 32 bits) rather than guess at a layout we cannot verify.
            if not isinstance(prefix, ipaddress.IPv6Network) or prefix.prefixlen != 96:
                raise ValueError(f"NAT64 prefix must be an IPv6 /96: {prefix}")
        object.__setattr__(
            self, "secret_headers", frozenset(h.lower() for h in self.secret_headers)
        )
        for port in self.extra_ports:
            if not 1 <= port <= 65535:
                raise ValueError(f"egress port out of range: {port}")
        if self.max_bytes < 0 or self.max_redirects < 0:
            raise ValueError("egress caps must not be negative")
        if self.total_timeout <= 0 or self.dns_timeout <= 0:
            raise ValueError("egress timeouts must be positive")

    @classmethod
    def from_env(cls, environ: Mapping[str, str], **overrides: Any) -> EgressPolicy:
        """Read ``HERALD_EGRESS_ALLOW``, ``_ALLOW_HTTP``, ``_PORTS`` and ``_NAT64``.

        Raises ``ValueError`` naming the variable on malformed input: a typo in an allowlist must
        stop the process, not silently open or close a path.
        """
        cidrs, hosts = _parse_allowlist(environ.get("HERALD_EGRESS_ALLOW", ""))
        policy = cls(
            allow_http=_parse_flag("HERALD_EGRESS_ALLOW_HTTP", environ),
            extra_ports=_parse_ports(environ.get("HERALD_EGRESS_PORTS", "")),
            allow_cidrs=cidrs,
            allow_hosts=hosts,
            nat64_prefixes=_parse_nat64(environ.get("HERALD_EGRESS_NAT64", "")),
        )
        return dataclasses.replace(policy, **overrides)

    @property
    def allowed_schemes(self) -> frozenset[str]:
        return frozenset({"https", "http"} if self.allow_http else {"https"})

    @property
    def allowed_ports(self) -> frozenset[int]:
        defaults = {443, 80} if self.allow_http else {443}
        return frozenset(defaults) | self.extra_ports

    def verdict_for(self, address: IPAddress, host: str) -> Verdict:
        """The address table, overridden only by the operator allowlist.

        An IPv4-mapped address, or one in a declared NAT64 prefix, reaches the IPv4 address it
        carries, so the allowlist is consulted for that address too: ``10.0.0.0/8`` admits
        ``::ffff:10.0.0.1`` exactly as it admits ``10.0.0.1``.
        """
        if isinstance(address, ipaddress.IPv6Address) and address.scope_id is not None:
            return classify_address(address)  # a zone id is never acceptable, allowlisted or not
        if host in self.allow_hosts:
            return Verdict(allowed=True, rule=f"operator allowlist (host {host})")
        listed = self._allowlisted(address)
        if listed is not None:
            return listed
        if isinstance(address, ipaddress.IPv6Address):
            carried = embedded_destination(address, self.nat64_prefixes)
            if carried is not None:
                form, embedded = carried
                listed = self._allowlisted(embedded)
                if listed is not None:
                    return Verdict(allowed=True, rule=f"{listed.rule} via {form}")
        return classify_address(address, self.nat64_prefixes)

    def _allowlisted(self, address: IPAddress) -> Verdict | None:
        for network in self.allow_cidrs:
            if address in network:
                return Verdict(allowed=True, rule=f"operator allowlist ({network})")
        return None


def _parse_flag(name: str, environ: Mapping[str, str]) -> bool:
    value = environ.get(name, "").strip().lower()
    if value in ("", "0", "false", "no", "off"):
        return False
    if value in ("1", "true", "yes", "on"):
        return True
    raise ValueError(f"{name}: expected 1 or 0, got {value!r}")


def _parse_nat64(text: str) -> NAT64Prefixes:
    """``1`` means the well-known ``64:ff9b::/96``; otherwise a comma list of /96 prefixes.

    The local-use ``64:ff9b:1::/48`` (RFC 8215) is never implied: an operator who translates
    through a /96 inside it names that /96.
    """
    value = text.strip().lower()
    if value in ("", "0", "false", "no", "off"):
        return ()
    if value in ("1", "true", "yes", "on"):
        return (WELL_KNOWN_NAT64,)
    prefixes: list[ipaddress.IPv6Network] = []
    for item in _comma_items(text):
        try:
            prefix = ipaddress.IPv6Network(item, strict=True)
        except ValueError:
            prefix = None
        if prefix is None or prefix.prefixlen != 96:
            raise ValueError(
                f"HERALD_EGRESS_NAT64: {item!r} is not 1, 0 or an IPv6 /96 prefix"
                " such as 64:ff9b::/96"
            )
        prefixes.append(prefix)
    return tuple(prefixes)


def _parse_ports(text: str) -> frozenset[int]:
    ports: set[int] = set()
    for item in _comma_items(text):
        if not item.isdigit() or not 1 <= int(item) <= 65535:
            raise ValueError(f"HERALD_EGRESS_PORTS: {item!r} is not a port number")
        ports.add(int(item))
    return frozenset(ports)


def _parse_allowlist(text: str) -> tuple[tuple[IPNetwork, ...], frozenset[str]]:
    cidrs: list[IPNetwork] = []
    hosts: set[str] = set()
    for item in _comma_items(text):
        try:
            # strict: "10.1.2.3/8" is a typo for something, and guessing would widen the hole.
            cidrs.append(ipaddress.ip_network(item, strict=True))
            continue
        except ValueError:
            pass
        hosts.add(_allowlisted_name(item))
    return tuple(cidrs), frozenset(hosts)


def _allowlisted_name(item: str) -> str:
    invalid = ValueError(f"HERALD_EGRESS_ALLOW: {item!r} is neither a CIDR nor a host name")
    if any(char in item for char in ":/@?#[]%\\"):
        raise invalid
    try:
        # The same IDNA encoding the fetch path applies, so the entry matches what we resolve.
        name = normalise_name(httpx.URL(f"https://{item}/").raw_host.decode("ascii"))
    except (httpx.InvalidURL, UnicodeError):
        raise invalid from None
    if looks_numeric(name) or not HOST_NAME.fullmatch(name):
        raise invalid
    return name


def _comma_items(text: str) -> Iterator[str]:
    return (item.strip() for item in text.split(",") if item.strip())
