"""Resolution: once, with a deadline, every answer validated."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable

from dispatch.egress.errors import EgressDenied, EgressError, EgressTimeout
from dispatch.egress.names import normalise_name, parse_literal
from dispatch.egress.policy import EgressPolicy
from dispatch.egress.ranges import IPAddress
from dispatch.egress.urls import check_host

Resolver = Callable[[str, int], Awaitable[list[str]]]


async def system_resolver(host: str, port: int) -> list[str]:
    """The production resolver: the OS's ``getaddrinfo`` (honours /etc/hosts and nsswitch)."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    answers: list[str] = []
    for family, _type, _proto, _canonical, sockaddr in infos:
        if family not in (socket.AF_INET, socket.AF_INET6):
            continue
        answer = str(sockaddr[0])
        scope = sockaddr[3] if len(sockaddr) == 4 else 0
        if scope and "%" not in answer:
            answer = f"{answer}%{scope}"  # keep the zone id so the guard can refuse it
        if answer not in answers:
            answers.append(answer)
    return answers


async def resolve_validated(
    host: str, port: int, policy: EgressPolicy, resolver: Resolver, *, url: str
) -> list[IPAddress]:
    """Check ``host``, resolve it exactly once, and return the answers only if ALL are allowed."""
    literal = check_host(host, policy, url=url)
    if literal is not None:
        return [literal]
    name = normalise_name(host)
    try:
        # getaddrinfo has no timeout of its own; on expiry its worker thread runs on, unawaited.
        answers = await asyncio.wait_for(resolver(host, port), timeout=policy.dns_timeout)
    except TimeoutError:
        raise EgressTimeout(url=url, reason=f"dns lookup exceeded {policy.dns_timeout}s") from None
    except OSError as exc:
        raise EgressError(url=url, reason=f"dns lookup failed: {exc}") from exc
    if not answers:
        raise EgressError(url=url, reason="dns lookup returned no addresses")
    addresses: list[IPAddress] = []
    for answer in answers:
        address = parse_literal(answer)
        if address is None:
            raise EgressDenied(url=url, rule="unparseable resolver answer", address=answer)
        verdict = policy.verdict_for(address, name)
        if not verdict.allowed:
            raise EgressDenied(url=url, rule=verdict.rule, address=answer)
        addresses.append(address)
    return addresses
