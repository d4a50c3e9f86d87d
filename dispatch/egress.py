"""The egress guard (DESIGN §8): the one way Herald makes an outbound HTTP request.

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
the IPv4 address they carry; every other IPv4-in-IPv6 form is denied (``egress_ranges`` says why).

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

The guard is split into modules with one job each, all re-exported here: ``egress_policy``
(what is allowed), ``egress_urls`` (checks before DNS), ``egress_resolve`` (one validated
lookup), ``egress_backend`` (pinned sockets under httpcore), ``egress_body`` (bounded decoding),
``egress_client`` (redirects and the deadline), ``egress_blocking`` (a response body as a
blocking stream for synchronous callers), ``egress_ranges`` (the address table).
"""

from __future__ import annotations

from dispatch.egress_backend import PinnedNetworkBackend
from dispatch.egress_blocking import BlockingResponse, open_blocking
from dispatch.egress_body import GuardedResponse
from dispatch.egress_client import EgressClient
from dispatch.egress_errors import EgressDenied, EgressError, EgressTimeout, EgressTooLarge
from dispatch.egress_policy import EgressPolicy, IPNetwork
from dispatch.egress_resolve import Resolver, resolve_validated, system_resolver
from dispatch.egress_urls import check_host, check_url, check_url_syntax

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
    "Resolver",
    "check_host",
    "check_url",
    "check_url_syntax",
    "open_blocking",
    "resolve_validated",
    "system_resolver",
]
