"""The egress guard (docs/design.md §8): the one way Herald makes an outbound HTTP request.

Audience URLs and webhook targets are chosen by users, so every request could be aimed at the
inside of our own network (server-side request forgery). The guard works in three layers:

1. ``check_url`` refuses a URL before any DNS lookup: scheme and port allowlists, userinfo,
   ``%`` in the host, non-canonical numeric hosts (``2130706433``, ``0x7f.1``, ``127.1``, which
   ``getaddrinfo`` would happily turn into 127.0.0.1), reserved names, and IP literals that the
   address table denies.
2. ``PinnedNetworkBackend`` sits under httpcore's connection pool. Every new TCP connection -
   first request, redirect hop, keep-alive replacement - goes through its ``connect_tcp``, which
   resolves the name ONCE (with a deadline), denies if ANY answer is not public unicast, and opens
   the socket to a validated IP literal. Host header, SNI and certificate checks keep the host
   name, because httpcore takes those from the URL, not from the socket. A rebinding DNS server
   gets no second chance to answer.
3. ``EgressClient`` follows redirects itself (each hop goes through layer 1 again and strips
   credentials when the origin changes), caps the decoded body, and enforces one total deadline
   over connect, redirects, headers and body: httpx timeouts are per operation, so a server that
   drips a byte a second would otherwise never time out (encode/httpx#1450).

Proxy environment variables are ignored (``trust_env=False`` and an explicit transport): a proxy
would receive the socket instead of the validated address, which makes pinning meaningless.

The only way to reach a non-public address is the operator allowlist (``HERALD_EGRESS_ALLOW``).
IPv4-mapped answers, and NAT64 ones under a declared prefix (``HERALD_EGRESS_NAT64``), are judged by
the IPv4 address they carry; every other IPv4-in-IPv6 form is denied (``ranges`` says why).

Decisions not dictated by the issue:
- DNS failures, empty answers and a DNS timeout are ``EgressError``/``EgressTimeout``, not
  denials: nothing was refused by policy, and the request fails closed either way.
- If the socket to the first validated address cannot be opened, the other validated answers of
  the SAME lookup are tried in order (there is no happy-eyeballs once we connect to literals).
- A caller-supplied ``Host`` header is dropped: the Host always comes from the validated URL.
- Only ``gzip``/``deflate`` (one coding) are decoded, by our own bounded decoder: httpx inflates a
  whole network chunk at once and stacks codings, so ``Content-Encoding: gzip, gzip`` could expand
  a small body into gigabytes before any counter sees it.
- Cookies are never stored or sent back: one client serves many unrelated targets.

The guard is a subpackage of modules with one job each, the main names re-exported here:
``policy`` (what is allowed), ``urls`` (checks before DNS), ``resolve`` (one validated lookup),
``backend`` (pinned sockets under httpcore), ``body`` (bounded decoding), ``client`` (redirects
and the deadline), ``blocking`` (a response body as a blocking stream for synchronous callers),
``ranges`` (the address table), ``names`` (host name and literal helpers), ``errors`` and
``redact`` (credentials kept out of its messages, and out of everything else Herald prints).

It sits at the bottom of the layering, beside ``templates``: it imports nothing else of ours (a
contract in ``[tool.importlinter]`` checks it), so the rules about what may leave the machine can
be read, and tested, without the outbox, the campaigns or the CLI.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dispatch.egress.backend import PinnedNetworkBackend
    from dispatch.egress.blocking import BlockingResponse, open_blocking
    from dispatch.egress.body import GuardedResponse
    from dispatch.egress.client import EgressClient
    from dispatch.egress.errors import EgressDenied, EgressError, EgressTimeout, EgressTooLarge
    from dispatch.egress.policy import EgressPolicy, IPNetwork
    from dispatch.egress.redact import Redactor, redact_setting, redact_url, url_secrets
    from dispatch.egress.resolve import Resolver, resolve_validated, system_resolver
    from dispatch.egress.urls import check_host, check_url, check_url_syntax

# Public name -> the module defining it. Loaded on first use (PEP 562), not here: importing any
# module of the guard runs this file first, and ``redact`` or ``ranges`` (standard library only)
# must not make the SMTP path or ``herald --help`` pay for httpx and httpcore.
_EXPORTS: dict[str, str] = {
    "BlockingResponse": "blocking",
    "EgressClient": "client",
    "EgressDenied": "errors",
    "EgressError": "errors",
    "EgressPolicy": "policy",
    "EgressTimeout": "errors",
    "EgressTooLarge": "errors",
    "GuardedResponse": "body",
    "IPNetwork": "policy",
    "PinnedNetworkBackend": "backend",
    "Redactor": "redact",
    "Resolver": "resolve",
    "check_host": "urls",
    "check_url": "urls",
    "check_url_syntax": "urls",
    "open_blocking": "blocking",
    "redact_setting": "redact",
    "redact_url": "redact",
    "resolve_validated": "resolve",
    "system_resolver": "resolve",
    "url_secrets": "redact",
}

__all__ = [
    "BlockingResponse",
    "EgressClient",
    "EgressDenied",
    "EgressError",
    "EgressPolicy",
    "EgressTimeout",
    "EgressTooLarge",
    "GuardedResponse",
    "IPNetwork",
    "PinnedNetworkBackend",
    "Redactor",
    "Resolver",
    "check_host",
    "check_url",
    "check_url_syntax",
    "open_blocking",
    "redact_setting",
    "redact_url",
    "resolve_validated",
    "system_resolver",
    "url_secrets",
]


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
