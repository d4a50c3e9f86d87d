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
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import dataclasses
import http.cookiejar
import ipaddress
import re
import socket
import ssl
import urllib.request
import zlib
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
)
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final

import httpcore
import httpx

from dispatch.egress_ranges import IPAddress, Verdict, classify_address

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], Awaitable[list[str]]]

_DEFAULT_PORTS: Final[dict[str, int]] = {"http": 80, "https": 443}
_REDIRECT_STATUSES: Final = frozenset({301, 302, 303, 307, 308})
# Always dropped when a redirect leaves the origin; the policy may name more.
_CREDENTIAL_HEADERS: Final = frozenset({"authorization", "cookie", "proxy-authorization"})
_BODY_HEADERS: Final = ("content-type", "content-length", "transfer-encoding")
_ACCEPT_ENCODING: Final = "gzip, deflate"


# --------------------------------------------------------------------------------------------
# Errors


class EgressDenied(Exception):
    """The policy refused the request; ``rule`` names the rule that fired."""

    def __init__(self, *, url: str, rule: str, address: str | None = None) -> None:
        self.url = url
        self.rule = rule
        self.address = address
        target = url if address is None else f"{url} -> {address}"
        super().__init__(f"egress denied: {target}: {rule}")


class EgressError(Exception):
    """The request was allowed but failed: transport error, timeout or cap exceeded."""

    def __init__(self, *, url: str, reason: str) -> None:
        self.url = url
        self.reason = reason
        super().__init__(f"egress failed: {url}: {reason}")


class EgressTimeout(EgressError):
    """The total deadline (or the DNS deadline) passed."""


class EgressTooLarge(EgressError):
    """The body (declared, raw or decoded) is larger than the policy's byte cap."""


# --------------------------------------------------------------------------------------------
# Policy


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

    def __post_init__(self) -> None:
        # Normalise here so every comparison below can be a plain set lookup, and so a policy
        # built from plain sets or lists stays hashable.
        object.__setattr__(self, "allow_hosts", frozenset(map(_normalise_name, self.allow_hosts)))
        object.__setattr__(self, "extra_ports", frozenset(self.extra_ports))
        object.__setattr__(self, "allow_cidrs", tuple(self.allow_cidrs))
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
        """Read ``HERALD_EGRESS_ALLOW``, ``HERALD_EGRESS_ALLOW_HTTP`` and ``HERALD_EGRESS_PORTS``.

        Raises ``ValueError`` naming the variable on malformed input: a typo in an allowlist must
        stop the process, not silently open or close a path.
        """
        cidrs, hosts = _parse_allowlist(environ.get("HERALD_EGRESS_ALLOW", ""))
        policy = cls(
            allow_http=_parse_flag("HERALD_EGRESS_ALLOW_HTTP", environ),
            extra_ports=_parse_ports(environ.get("HERALD_EGRESS_PORTS", "")),
            allow_cidrs=cidrs,
            allow_hosts=hosts,
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
        """The address table, overridden only by the operator allowlist."""
        if isinstance(address, ipaddress.IPv6Address) and address.scope_id is not None:
            return classify_address(address)  # a zone id is never acceptable, allowlisted or not
        if host in self.allow_hosts:
            return Verdict(allowed=True, rule=f"operator allowlist (host {host})")
        for network in self.allow_cidrs:
            if address in network:
                return Verdict(allowed=True, rule=f"operator allowlist ({network})")
        return classify_address(address)


def _parse_flag(name: str, environ: Mapping[str, str]) -> bool:
    value = environ.get(name, "").strip().lower()
    if value in ("", "0", "false", "no", "off"):
        return False
    if value in ("1", "true", "yes", "on"):
        return True
    raise ValueError(f"{name}: expected 1 or 0, got {value!r}")


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
        name = _normalise_name(httpx.URL(f"https://{item}/").raw_host.decode("ascii"))
    except (httpx.InvalidURL, UnicodeError):
        raise invalid from None
    if _looks_numeric(name) or not _HOST_NAME.fullmatch(name):
        raise invalid
    return name


def _comma_items(text: str) -> Iterator[str]:
    return (item.strip() for item in text.split(",") if item.strip())


# --------------------------------------------------------------------------------------------
# URL and host checks (before any DNS lookup)

_UNSAFE_URL_CHARS: Final = re.compile(r"[\x00-\x20\x7f]")
_AUTHORITY: Final = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://(?P<authority>[^/?#]*)")
_PORT_TEXT: Final = re.compile(r"[0-9]{1,5}")
# Any dotted run of decimal/octal/hex numbers: glibc's inet_aton reads 0x7f.1 and 0177.1 too.
_NUMERIC_HOST: Final = re.compile(r"(0x[0-9a-f]*|[0-9]+)(\.(0x[0-9a-f]*|[0-9]+))*")
_HOST_NAME: Final = re.compile(r"(?=.{1,253}$)[a-z0-9_-]+(\.[a-z0-9_-]+)*")
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


def check_url(url: str, policy: EgressPolicy) -> httpx.URL:
    """Parse ``url`` with the parser that will fetch it, and refuse it before any DNS lookup."""

    def deny(rule: str, address: str | None = None) -> EgressDenied:
        return EgressDenied(url=url, rule=rule, address=address)

    # httpx keeps a space in the port; other parsers strip or reinterpret these (CVE-2023-24329),
    # so they are refused rather than left for some later log or hop to read differently.
    if _UNSAFE_URL_CHARS.search(url):
        raise deny("control character or space in url")
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise deny(f"invalid url ({exc})") from None
    if parsed.scheme not in policy.allowed_schemes:
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
    port = parsed.port if parsed.port is not None else _DEFAULT_PORTS[parsed.scheme]
    if port not in policy.allowed_ports:
        raise deny(f"port not allowed ({port})")
    check_host(parsed.raw_host.decode("ascii"), policy, url=url)
    return parsed


def _port_text(authority: str) -> str:
    """The raw text after the host's ':' - httpx has already normalised ``:+80`` to 80."""
    if authority.startswith("["):
        rest = authority[authority.find("]") + 1 :]
    else:
        rest = authority[authority.find(":") :] if ":" in authority else ""
    return rest[1:]


def check_host(host: str, policy: EgressPolicy, *, url: str) -> IPAddress | None:
    """Refuse a bad host; return it parsed if it is an IP literal, ``None`` if it is a name.

    ``host`` is httpx's ``raw_host``: ASCII (IDNA already applied), IPv6 without brackets.
    Only ASCII ever reaches ``getaddrinfo``, whose IDNA-2003 codec would read ``①②⑦.0.0.1``.
    """
    if not host:
        raise EgressDenied(url=url, rule="missing host")
    if "%" in host:
        raise EgressDenied(url=url, rule="percent sign in host (zone id or encoding)")
    literal = _parse_literal(host)
    if literal is not None:
        verdict = policy.verdict_for(literal, host)
        if not verdict.allowed:
            raise EgressDenied(url=url, rule=verdict.rule, address=str(literal))
        return literal
    name = _normalise_name(host)
    if _looks_numeric(name):
        raise EgressDenied(url=url, rule="non-canonical numeric host")
    if not _HOST_NAME.fullmatch(name):
        raise EgressDenied(url=url, rule="invalid host name")
    if name in policy.allow_hosts:
        return None
    reserved = _reserved_name_rule(name)
    if reserved is not None:
        raise EgressDenied(url=url, rule=reserved)
    return None


def _parse_literal(host: str) -> IPAddress | None:
    try:
        # Strict: rejects leading zeros and short forms (CVE-2021-29921), which we then refuse
        # as non-canonical numbers instead of letting getaddrinfo guess.
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _normalise_name(host: str) -> str:
    # One trailing dot only means "fully qualified"; policy must see the same name either way.
    lowered = host.lower()
    return lowered[:-1] if lowered.endswith(".") else lowered


def _looks_numeric(name: str) -> bool:
    # A numeric last label is never a real top-level domain, but inet_aton may accept it.
    last_label = name.rsplit(".", 1)[-1]
    return bool(_NUMERIC_HOST.fullmatch(name)) or last_label.isdigit()


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


# --------------------------------------------------------------------------------------------
# Resolution: once, with a deadline, every answer validated


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
    name = _normalise_name(host)
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
        address = _parse_literal(answer)
        if address is None:
            raise EgressDenied(url=url, rule="unparseable resolver answer", address=answer)
        verdict = policy.verdict_for(address, name)
        if not verdict.allowed:
            raise EgressDenied(url=url, rule=verdict.rule, address=answer)
        addresses.append(address)
    return addresses


# --------------------------------------------------------------------------------------------
# The pinned network backend and the transport around it


class PinnedNetworkBackend(httpcore.AsyncNetworkBackend):
    """Every TCP connection httpcore opens passes here, and goes only to a validated address.

    ``inner`` opens the actual socket (default: httpcore's anyio backend); tests inject a
    recording fake so no real connection is ever made.
    """

    def __init__(
        self,
        policy: EgressPolicy,
        *,
        resolver: Resolver | None = None,
        inner: httpcore.AsyncNetworkBackend | None = None,
    ) -> None:
        self._policy = policy
        self._resolver = resolver or system_resolver
        self._inner = inner or httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        if port not in self._policy.allowed_ports:
            raise EgressDenied(url=target, rule=f"port not allowed ({port})")
        addresses = await resolve_validated(host, port, self._policy, self._resolver, url=target)
        failure: httpcore.ConnectError | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(
                    str(address),
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except httpcore.ConnectError as exc:
                failure = exc  # every address here passed validation; try the next one
        assert failure is not None  # resolve_validated never returns an empty list
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise EgressDenied(url=path, rule="unix sockets not allowed")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


@contextlib.contextmanager
def _transport_errors(url: str) -> Iterator[None]:
    """Turn httpcore failures into ours; our own exceptions pass through untouched."""
    try:
        yield
    except httpcore.TimeoutException as exc:
        raise EgressTimeout(url=url, reason=f"{type(exc).__name__}: {exc}") from exc
    except (
        httpcore.NetworkError,
        httpcore.ProtocolError,
        httpcore.ProxyError,
        httpcore.UnsupportedProtocol,
    ) as exc:
        raise EgressError(url=url, reason=f"{type(exc).__name__}: {exc}") from exc


class _CoreByteStream(httpx.AsyncByteStream):
    def __init__(self, stream: AsyncIterable[bytes], url: str) -> None:
        self._stream = stream
        self._url = url

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _transport_errors(self._url):
            async for chunk in self._stream:
                yield chunk

    async def aclose(self) -> None:
        closer = getattr(self._stream, "aclose", None)
        if closer is not None:
            await closer()


class _PinnedTransport(httpx.AsyncBaseTransport):
    """An httpx transport over our own httpcore pool.

    Built directly rather than by patching ``AsyncHTTPTransport._pool`` (a private attribute),
    and it never constructs a proxy pool.
    """

    def __init__(self, backend: PinnedNetworkBackend, ssl_context: ssl.SSLContext) -> None:
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context,
            network_backend=backend,
            max_connections=100,
            max_keepalive_connections=20,
            keepalive_expiry=5.0,
            retries=0,  # a retry is a new connection; the caller decides, under its deadline
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.AsyncByteStream)
        url = str(request.url)
        core_request = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        with _transport_errors(url):
            core_response = await self._pool.handle_async_request(core_request)
        assert isinstance(core_response.stream, AsyncIterable)
        return httpx.Response(
            status_code=core_response.status,
            headers=core_response.headers,
            stream=_CoreByteStream(core_response.stream, url),
            extensions=core_response.extensions,
        )

    async def aclose(self) -> None:
        await self._pool.aclose()


# --------------------------------------------------------------------------------------------
# Body decoding with bounded output

_DECODE_STEP: Final = 64 * 1024
_GZIP_WBITS: Final = 16 + zlib.MAX_WBITS


class _BodyDecoder:
    """Undo one ``gzip``/``deflate`` coding, yielding at most ``_DECODE_STEP`` bytes at a time.

    Bounded steps mean a compression bomb is counted, and stopped, before it is ever whole in
    memory.
    """

    def __init__(self, coding: str) -> None:
        self._identity = coding in ("", "identity")
        self._gzip = coding in ("gzip", "x-gzip")
        # RFC 9110 says zlib-wrapped, but servers send raw deflate too; try zlib first.
        self._raw_deflate_fallback = coding == "deflate"
        self._started = False
        self._inflater = zlib.decompressobj(_GZIP_WBITS if self._gzip else zlib.MAX_WBITS)

    @staticmethod
    def coding_of(headers: httpx.Headers) -> str | None:
        """The single coding we can decode, or ``None`` if we cannot."""
        header: str = headers.get("content-encoding", "")
        codings = [
            coding
            for coding in (part.strip().lower() for part in header.split(","))
            if coding not in ("", "identity")
        ]
        if not codings:
            return ""
        if len(codings) == 1 and codings[0] in ("gzip", "x-gzip", "deflate"):
            return codings[0]
        return None

    def decode(self, data: bytes) -> Iterator[bytes]:
        if self._identity:
            if data:
                yield data
            return
        if not self._started and self._raw_deflate_fallback:
            self._started = True
            try:
                first = self._inflater.decompress(data, _DECODE_STEP)
            except zlib.error:
                self._inflater = zlib.decompressobj(-zlib.MAX_WBITS)
                first = self._inflater.decompress(data, _DECODE_STEP)
            if first:
                yield first
            data = self._inflater.unconsumed_tail
        yield from self._inflate(data)

    def _inflate(self, pending: bytes) -> Iterator[bytes]:
        while True:
            if self._inflater.eof:
                # A gzip body may hold several members (RFC 1952 §2.2); bytes after a deflate
                # stream are junk and ignored.
                rest = self._inflater.unused_data + pending
                if not (self._gzip and rest):
                    return
                self._inflater = zlib.decompressobj(_GZIP_WBITS)
                pending = rest
            out = self._inflater.decompress(pending, _DECODE_STEP)
            pending = self._inflater.unconsumed_tail
            if out:
                yield out
            elif not pending:
                return


# --------------------------------------------------------------------------------------------
# The response handed to callers

_LINE_BREAK: Final = re.compile(r"\r\n|\r|\n")


class GuardedResponse:
    """A response whose body is decoded, capped and read under the request's total deadline."""

    def __init__(self, response: httpx.Response, *, policy: EgressPolicy, deadline: float) -> None:
        self._response = response
        self._policy = policy
        self._deadline = deadline
        self._consumed = False

    @property
    def status_code(self) -> int:
        return self._response.status_code

    @property
    def headers(self) -> httpx.Headers:
        return self._response.headers

    @property
    def url(self) -> httpx.URL:
        """The final URL, after any redirects."""
        return self._response.url

    @property
    def encoding(self) -> str:
        declared = self._response.charset_encoding
        if declared:
            try:
                return codecs.lookup(declared).name
            except LookupError:
                pass
        return "utf-8"

    async def iter_bytes(self) -> AsyncIterator[bytes]:
        """Decoded body chunks; raises ``EgressTooLarge`` / ``EgressTimeout`` at the caps."""
        if self._consumed:
            raise RuntimeError("the response body can be read only once")
        self._consumed = True
        url = str(self.url)
        cap = self._policy.max_bytes
        self._refuse_declared_length(url, cap)
        coding = _BodyDecoder.coding_of(self.headers)
        if coding is None:
            encoding = self.headers.get("content-encoding")
            raise EgressError(url=url, reason=f"unsupported content-encoding ({encoding})")
        decoder = _BodyDecoder(coding)
        raw = self._response.aiter_raw()
        raw_total = decoded_total = 0
        try:
            while (chunk := await self._next_raw(raw, url)) is not None:
                # Raw bytes count too: empty gzip members would otherwise stream forever.
                raw_total += len(chunk)
                if raw_total > cap:
                    raise EgressTooLarge(url=url, reason=f"body exceeds {cap} bytes")
                for piece in _decoded(decoder, chunk, url, coding):
                    decoded_total += len(piece)
                    if decoded_total > cap:
                        raise EgressTooLarge(url=url, reason=f"decoded body exceeds {cap} bytes")
                    yield piece
        finally:
            if isinstance(raw, AsyncGenerator):
                await raw.aclose()

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self.iter_bytes()])

    async def iter_lines(self) -> AsyncIterator[str]:
        """Decoded text lines without their terminators (``\\n``, ``\\r\\n`` or ``\\r``).

        Undecodable text raises ``UnicodeDecodeError`` rather than being replaced: silently
        mangled addresses in an audience list are worse than a failed import.
        """
        decoder = codecs.getincrementaldecoder(self.encoding)(errors="strict")
        buffered = ""
        async for chunk in self.iter_bytes():
            text = buffered + decoder.decode(chunk)
            # A trailing "\r" may be the first half of "\r\n" split across two chunks.
            held_cr = text.endswith("\r")
            *complete, buffered = _LINE_BREAK.split(text[:-1] if held_cr else text)
            if held_cr:
                buffered += "\r"
            for line in complete:
                yield line
        rest = _LINE_BREAK.split(buffered + decoder.decode(b"", final=True))
        if rest[-1] == "":
            rest.pop()
        for line in rest:
            yield line

    def _refuse_declared_length(self, url: str, cap: int) -> None:
        if self._response.request.method == "HEAD":
            return  # the length describes a body that is not coming
        declared: str = self.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > cap:
            raise EgressTooLarge(url=url, reason=f"declared length {declared} exceeds {cap} bytes")

    async def _next_raw(self, raw: AsyncIterator[bytes], url: str) -> bytes | None:
        try:
            async with asyncio.timeout_at(self._deadline):
                return await anext(raw)
        except StopAsyncIteration:
            return None
        except TimeoutError:
            raise _deadline_passed(url, self._policy) from None
        except httpx.HTTPError as exc:
            raise EgressError(url=url, reason=f"{type(exc).__name__}: {exc}") from exc


def _decoded(decoder: _BodyDecoder, chunk: bytes, url: str, coding: str) -> Iterator[bytes]:
    try:
        yield from decoder.decode(chunk)
    except zlib.error as exc:
        raise EgressError(url=url, reason=f"corrupt {coding} body: {exc}") from exc


def _deadline_passed(url: str, policy: EgressPolicy) -> EgressTimeout:
    return EgressTimeout(url=url, reason=f"total deadline of {policy.total_timeout}s passed")


# --------------------------------------------------------------------------------------------
# The client


class _RefuseAllCookies(http.cookiejar.DefaultCookiePolicy):
    def set_ok(self, cookie: http.cookiejar.Cookie, request: urllib.request.Request) -> bool:
        return False

    def return_ok(self, cookie: http.cookiejar.Cookie, request: urllib.request.Request) -> bool:
        return False


class EgressClient:
    """The guarded HTTP client. One per process is fine: it keeps no cookies.

    ``ssl_context`` replaces the default (certifi roots, verification on) - tests pass one that
    trusts a local CA. ``network_backend`` replaces the socket opener below the guard - tests
    pass a recording fake. Neither can weaken the address checks.
    """

    def __init__(
        self,
        policy: EgressPolicy,
        *,
        resolver: Resolver | None = None,
        ssl_context: ssl.SSLContext | None = None,
        network_backend: httpcore.AsyncNetworkBackend | None = None,
    ) -> None:
        self._policy = policy
        backend = PinnedNetworkBackend(policy, resolver=resolver, inner=network_backend)
        context = ssl_context or httpx.create_ssl_context(trust_env=False)
        self._client = httpx.AsyncClient(
            transport=_PinnedTransport(backend, context),
            trust_env=False,  # no *_PROXY, no SSL_CERT_FILE, no .netrc
            follow_redirects=False,  # every hop is re-checked in _follow below
            timeout=httpx.Timeout(policy.total_timeout),  # the real bound is our total deadline
            cookies=http.cookiejar.CookieJar(policy=_RefuseAllCookies()),
            headers={"User-Agent": "Herald", "Accept-Encoding": _ACCEPT_ENCODING},
        )

    async def __aenter__(self) -> EgressClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._client.aclose()

    def stream(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        content: bytes | None = None,
        max_redirects: int | None = None,
    ) -> contextlib.AbstractAsyncContextManager[GuardedResponse]:
        """Open the final response after following (and re-checking) up to ``max_redirects``.

        ``max_redirects=0`` (webhooks) turns any redirect into ``EgressDenied`` with rule
        "redirect not allowed".
        """
        hops = self._policy.max_redirects if max_redirects is None else max_redirects
        return self._open(method, url, headers or {}, content, hops)

    async def request(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        content: bytes | None = None,
        max_redirects: int | None = None,
    ) -> tuple[int, httpx.Headers, bytes]:
        """Status, headers and the whole (capped) body."""
        async with self.stream(
            method, url, headers=headers, content=content, max_redirects=max_redirects
        ) as response:
            body = await response.read()
            return response.status_code, response.headers, body

    @contextlib.asynccontextmanager
    async def _open(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        content: bytes | None,
        max_redirects: int,
    ) -> AsyncIterator[GuardedResponse]:
        deadline = asyncio.get_running_loop().time() + self._policy.total_timeout
        response = await self._follow(method, url, headers, content, max_redirects, deadline)
        try:
            yield GuardedResponse(response, policy=self._policy, deadline=deadline)
        finally:
            await response.aclose()

    async def _follow(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        content: bytes | None,
        max_redirects: int,
        deadline: float,
    ) -> httpx.Response:
        current = check_url(url, self._policy)
        method = method.upper()
        request_headers = httpx.Headers(headers)
        request_headers.pop("host", None)  # the Host header always comes from the checked URL
        body = content
        hop = 0
        while True:
            request = self._client.build_request(
                method, current, headers=request_headers, content=body
            )
            response = await self._send(request, deadline)
            location = response.headers.get("location")
            if response.status_code not in _REDIRECT_STATUSES or location is None:
                return response
            await response.aclose()
            if hop >= max_redirects:
                rule = (
                    "redirect not allowed"
                    if max_redirects == 0
                    else f"too many redirects (limit {max_redirects})"
                )
                raise EgressDenied(url=str(current), rule=rule)
            hop += 1
            target = _redirect_target(current, location)
            following = check_url(str(target), self._policy)
            method, body, request_headers = self._redirected_request(
                response.status_code, method, body, request_headers, current, following
            )
            current = following

    def _redirected_request(
        self,
        status: int,
        method: str,
        body: bytes | None,
        headers: httpx.Headers,
        source: httpx.URL,
        target: httpx.URL,
    ) -> tuple[str, bytes | None, httpx.Headers]:
        headers = httpx.Headers(headers)
        # What browsers (and httpx) do: 303 and 302 become GET, and so does POST after a 301.
        becomes_get = (status in (302, 303) and method != "HEAD") or (
            status == 301 and method == "POST"
        )
        if becomes_get:
            method, body = "GET", None
            for name in _BODY_HEADERS:
                headers.pop(name, None)
        if _origin(source) != _origin(target):
            for name in _CREDENTIAL_HEADERS | self._policy.secret_headers:
                headers.pop(name, None)
        return method, body, headers

    async def _send(self, request: httpx.Request, deadline: float) -> httpx.Response:
        url = str(request.url)
        try:
            async with asyncio.timeout_at(deadline):
                return await self._client.send(request, stream=True)
        except TimeoutError:
            raise _deadline_passed(url, self._policy) from None
        except EgressDenied as exc:
            # Raised in the backend, which only knew host:port; name the URL being fetched.
            raise EgressDenied(url=url, rule=exc.rule, address=exc.address) from exc
        except EgressError as exc:
            raise type(exc)(url=url, reason=exc.reason) from exc
        except httpx.HTTPError as exc:
            raise EgressError(url=url, reason=f"{type(exc).__name__}: {exc}") from exc


def _redirect_target(source: httpx.URL, location: str) -> httpx.URL:
    try:
        return source.join(location)
    except httpx.InvalidURL:
        raise EgressDenied(url=location, rule="invalid redirect location") from None


def _origin(url: httpx.URL) -> tuple[str, bytes, int | None]:
    return url.scheme, url.raw_host, url.port
