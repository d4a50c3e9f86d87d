"""The guard against real sockets: local servers on 127.0.0.1 only.

127.0.0.1 is reachable here only because each test puts it (or a test host name) on the
operator allowlist; the first test shows it is refused otherwise. DNS is always the fake resolver.
"""

from __future__ import annotations

import asyncio
import gzip
import ipaddress
import socket
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Iterator
from typing import Any, TypeVar

import httpx
import pytest
import trustme

from dispatch.egress import (
    EgressClient,
    EgressDenied,
    EgressError,
    EgressPolicy,
    EgressTimeout,
    EgressTooLarge,
    GuardedResponse,
)
from tests.egress_support.resolver import FakeResolver
from tests.egress_support.servers import (
    ConnectionRecorder,
    LocalHTTPServer,
    Reply,
    drip,
    endless,
    redirect,
    tls_pair,
)

T = TypeVar("T")
LOCAL_ONLY = (ipaddress.ip_network("127.0.0.1/32"),)
NAMES = FakeResolver({"a.test": ["127.0.0.1"], "b.test": ["127.0.0.1"]})


def run(coroutine: Awaitable[T]) -> T:
    async def main() -> T:
        return await coroutine

    return asyncio.run(main())


def local_policy(server: LocalHTTPServer, **overrides: Any) -> EgressPolicy:
    settings: dict[str, Any] = {
        "allow_http": True,
        "extra_ports": frozenset({server.port}),
        "allow_cidrs": LOCAL_ONLY,
    }
    settings.update(overrides)
    return EgressPolicy(**settings)


async def fetch(
    policy: EgressPolicy,
    url: str,
    *,
    resolver: FakeResolver = NAMES,
    **kwargs: Any,
) -> tuple[int, httpx.Headers, bytes]:
    async with EgressClient(policy, resolver=resolver, **kwargs) as client:
        return await client.request("GET", url)


@pytest.fixture
def hello() -> Iterator[LocalHTTPServer]:
    with LocalHTTPServer({"/": Reply(body=b"hello")}) as server:
        yield server


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


# --- the allowlist is the only way in


def test_local_server_is_refused_without_the_allowlist(hello: LocalHTTPServer) -> None:
    policy = local_policy(hello, allow_cidrs=())
    with pytest.raises(EgressDenied) as by_literal:
        run(fetch(policy, hello.url("/")))
    assert by_literal.value.rule == "loopback (127.0.0.0/8)"
    with pytest.raises(EgressDenied) as by_name:
        run(fetch(policy, hello.url("/", host="a.test")))
    assert (by_name.value.rule, by_name.value.address) == ("loopback (127.0.0.0/8)", "127.0.0.1")
    assert by_name.value.url == hello.url("/", host="a.test")
    assert hello.requests == []


def test_allowlisted_local_server_is_fetched(hello: LocalHTTPServer) -> None:
    status, headers, body = run(fetch(local_policy(hello), hello.url("/")))
    assert (status, body) == (200, b"hello")
    assert headers["content-length"] == "5"
    assert hello.requests[0].headers["host"] == f"127.0.0.1:{hello.port}"


def test_allowlisted_name_reaches_whatever_it_resolves_to(hello: LocalHTTPServer) -> None:
    policy = local_policy(hello, allow_cidrs=(), allow_hosts=frozenset({"a.test"}))
    assert run(fetch(policy, hello.url("/", host="a.test")))[2] == b"hello"
    with pytest.raises(EgressDenied):
        run(fetch(policy, hello.url("/", host="b.test")))  # same address, name not listed


# --- TLS: the socket goes to the pinned address, the certificate is checked for the name


def test_tls_verifies_the_host_name_while_connecting_to_the_pinned_address(
    ca: trustme.CA,
) -> None:
    tls = tls_pair(ca, "audience.test")
    # A rebinding resolver: any second lookup would say 127.0.0.2, where nothing listens.
    resolver = FakeResolver(sequences={"audience.test": [["127.0.0.1"], ["127.0.0.2"]]})
    with LocalHTTPServer({"/list.csv": Reply(body=b"email\n")}, tls=tls.server) as server:
        policy = EgressPolicy(
            extra_ports=frozenset({server.port}), allow_hosts=frozenset({"audience.test"})
        )

        async def twice() -> list[bytes]:
            async with EgressClient(policy, resolver=resolver, ssl_context=tls.client) as client:
                url = server.url("/list.csv", host="audience.test")
                return [(await client.request("GET", url))[2] for _ in range(2)]

        assert run(twice()) == [b"email\n", b"email\n"]
        assert server.sni_names == ["audience.test"]
        assert [r.headers["host"] for r in server.requests] == [f"audience.test:{server.port}"] * 2
        assert {r.peer for r in server.requests} == {"127.0.0.1"}
    assert resolver.calls["audience.test"] == 1  # one connection, one lookup


def test_tls_certificate_for_another_name_fails(ca: trustme.CA) -> None:
    tls = tls_pair(ca, "other.test")
    resolver = FakeResolver({"audience.test": ["127.0.0.1"]})
    with LocalHTTPServer({"/": Reply(body=b"secret")}, tls=tls.server) as server:
        policy = EgressPolicy(
            extra_ports=frozenset({server.port}), allow_hosts=frozenset({"audience.test"})
        )
        url = server.url("/", host="audience.test")
        with pytest.raises(EgressError) as caught:
            run(fetch(policy, url, resolver=resolver, ssl_context=tls.client))
        assert "CERTIFICATE_VERIFY_FAILED" in caught.value.reason
        assert server.requests == []


def test_tls_to_an_untrusted_ca_fails_with_the_default_context(ca: trustme.CA) -> None:
    tls = tls_pair(ca, "audience.test")
    resolver = FakeResolver({"audience.test": ["127.0.0.1"]})
    with LocalHTTPServer({"/": Reply(body=b"x")}, tls=tls.server) as server:
        policy = EgressPolicy(
            extra_ports=frozenset({server.port}), allow_hosts=frozenset({"audience.test"})
        )
        with pytest.raises(EgressError, match="CERTIFICATE_VERIFY_FAILED"):
            run(fetch(policy, server.url("/", host="audience.test"), resolver=resolver))


# --- redirects: every hop re-checked


def test_redirect_to_an_address_outside_the_allowlist_is_refused() -> None:
    with LocalHTTPServer({}) as server:
        server.routes["/"] = redirect(f"http://127.0.0.2:{server.port}/")
        with pytest.raises(EgressDenied) as caught:
            run(fetch(local_policy(server), server.url("/")))
        assert (caught.value.rule, caught.value.address) == ("loopback (127.0.0.0/8)", "127.0.0.2")
        assert caught.value.url == f"http://127.0.0.2:{server.port}/"
        assert len(server.requests) == 1


def test_redirect_to_a_name_resolving_outside_the_allowlist_is_refused() -> None:
    resolver = FakeResolver({"a.test": ["127.0.0.1"], "sneaky.test": ["127.0.0.2"]})
    with LocalHTTPServer({}) as server:
        server.routes["/"] = redirect(f"http://sneaky.test:{server.port}/")
        with pytest.raises(EgressDenied) as caught:
            run(fetch(local_policy(server), server.url("/", host="a.test"), resolver=resolver))
        assert (caught.value.rule, caught.value.address) == ("loopback (127.0.0.0/8)", "127.0.0.2")
        assert caught.value.url == f"http://sneaky.test:{server.port}/"


SECRETS = {
    "Authorization": "Bearer s3cret",
    "Cookie": "session=abc",
    "X-Api-Key": "k3y",
    "X-Trace": "keep-me",
}


def test_credentials_are_stripped_on_a_cross_origin_redirect() -> None:
    with LocalHTTPServer({"/landing": Reply(body=b"done")}) as server:
        server.routes["/start"] = redirect(server.url("/landing", host="b.test"))
        policy = local_policy(server, secret_headers=frozenset({"X-Api-Key"}))

        async def go() -> tuple[int, httpx.Headers, bytes]:
            async with EgressClient(policy, resolver=NAMES) as client:
                url = server.url("/start", host="a.test")
                return await client.request("GET", url, headers=SECRETS)

        assert run(go())[2] == b"done"
        first, second = server.requests
        assert first.headers["authorization"] == "Bearer s3cret"
        assert first.headers["x-api-key"] == "k3y"
        for name in ("authorization", "cookie", "x-api-key"):
            assert name not in second.headers
        assert second.headers["x-trace"] == "keep-me"
        assert second.headers["host"] == f"b.test:{server.port}"


def test_credentials_survive_a_same_origin_redirect() -> None:
    with LocalHTTPServer({"/start": redirect("/landing"), "/landing": Reply()}) as server:

        async def go() -> int:
            async with EgressClient(local_policy(server), resolver=NAMES) as client:
                url = server.url("/start", host="a.test")
                return (await client.request("GET", url, headers=SECRETS))[0]

        assert run(go()) == 200
        assert server.requests[1].headers["authorization"] == "Bearer s3cret"


def test_webhooks_refuse_any_redirect() -> None:
    with LocalHTTPServer({"/hook": redirect("/elsewhere", status=307)}) as server:

        async def post() -> None:
            async with EgressClient(local_policy(server), resolver=NAMES) as client:
                url = server.url("/hook")
                await client.request("POST", url, content=b"{}", max_redirects=0)

        with pytest.raises(EgressDenied) as caught:
            run(post())
        assert caught.value.rule == "redirect not allowed"
        assert [r.path for r in server.requests] == ["/hook"]


def test_redirect_hops_are_capped() -> None:
    with LocalHTTPServer({"/loop": redirect("/loop")}) as server:
        with pytest.raises(EgressDenied) as caught:
            run(fetch(local_policy(server, max_redirects=3), server.url("/loop")))
        assert caught.value.rule == "too many redirects (limit 3)"
        assert len(server.requests) == 4


def test_post_becomes_get_after_303_and_drops_its_body() -> None:
    with LocalHTTPServer({"/form": redirect("/done", status=303), "/done": Reply()}) as server:

        async def post() -> int:
            async with EgressClient(local_policy(server), resolver=NAMES) as client:
                headers = {"Content-Type": "application/json"}
                return (
                    await client.request(
                        "POST", server.url("/form"), headers=headers, content=b"{}"
                    )
                )[0]

        assert run(post()) == 200
        form, done = server.requests
        assert (form.method, form.body) == ("POST", b"{}")
        assert (done.method, done.body) == ("GET", b"")
        assert "content-type" not in done.headers


# --- caps


def test_endless_body_is_cut_at_the_byte_cap() -> None:
    with (
        LocalHTTPServer({"/": Reply(stream=endless)}) as server,
        pytest.raises(EgressTooLarge, match="exceeds 262144 bytes"),
    ):
        run(fetch(local_policy(server, max_bytes=256 * 1024), server.url("/")))


def test_declared_length_over_the_cap_is_refused_before_reading() -> None:
    big = Reply(headers={"Content-Length": str(10**9)}, stream=endless)
    with (
        LocalHTTPServer({"/": big}) as server,
        pytest.raises(EgressTooLarge, match="declared length"),
    ):
        run(fetch(local_policy(server, max_bytes=1024), server.url("/")))


def test_gzip_bomb_is_cut_on_decoded_size() -> None:
    bomb = gzip.compress(b"\0" * (8 * 1024 * 1024))
    assert len(bomb) < 64 * 1024  # the wire size alone would pass the cap
    reply = Reply(headers={"Content-Encoding": "gzip"}, body=bomb)
    with (
        LocalHTTPServer({"/": reply}) as server,
        pytest.raises(EgressTooLarge, match="decoded body exceeds"),
    ):
        run(fetch(local_policy(server, max_bytes=1024 * 1024), server.url("/")))


def test_gzip_body_within_the_cap_is_decoded() -> None:
    text = b"email,name\r\na@example.test,A\r\nb@example.test,B\r\n" * 100
    encoded = gzip.compress(text[:2000]) + gzip.compress(text[2000:])  # two gzip members
    reply = Reply(headers={"Content-Encoding": "gzip"}, body=encoded)
    with LocalHTTPServer({"/": reply}) as server:
        assert run(fetch(local_policy(server), server.url("/")))[2] == text


def test_stacked_encodings_are_refused() -> None:
    body = gzip.compress(gzip.compress(b"x" * 1000))
    reply = Reply(headers={"Content-Encoding": "gzip, gzip"}, body=body)
    with (
        LocalHTTPServer({"/": reply}) as server,
        pytest.raises(EgressError, match="unsupported content-encoding"),
    ):
        run(fetch(local_policy(server), server.url("/")))


def test_drip_is_cut_at_the_total_deadline() -> None:
    slow = Reply(headers={"Content-Length": "1000"}, stream=drip)
    with LocalHTTPServer({"/": slow}) as server:
        policy = local_policy(server, total_timeout=1.5)
        started = time.monotonic()
        with pytest.raises(EgressTimeout, match="total deadline"):
            run(fetch(policy, server.url("/")))
        elapsed = time.monotonic() - started
    assert 1.5 <= elapsed < 2.5


def test_stalled_headers_are_cut_at_the_total_deadline() -> None:
    with LocalHTTPServer({"/": Reply(stall=True)}) as server:
        started = time.monotonic()
        with pytest.raises(EgressTimeout):
            run(fetch(local_policy(server, total_timeout=0.5), server.url("/")))
        assert 0.5 <= time.monotonic() - started < 1.5


# --- proxies


def test_proxy_environment_variables_are_ignored(
    hello: LocalHTTPServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    with ConnectionRecorder() as proxy:
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
            monkeypatch.setenv(name, proxy.url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        assert run(fetch(local_policy(hello), hello.url("/")))[2] == b"hello"
        assert proxy.connection_count() == 0
        # The recorder does notice a connection, so the zero above means something.
        with socket.create_connection(("127.0.0.1", proxy.port)):
            pass
        assert proxy.connection_count() == 1


# --- streaming API


def test_stream_exposes_status_headers_final_url_and_lines() -> None:
    body = b"first\r\nsecond\nthird\rfourth"
    with LocalHTTPServer({"/old": redirect("/new"), "/new": Reply(body=body)}) as server:

        async def lines() -> tuple[int, str, list[str]]:
            async with (
                EgressClient(local_policy(server), resolver=NAMES) as client,
                client.stream("GET", server.url("/old")) as response,
            ):
                collected = [line async for line in response.iter_lines()]
                return response.status_code, str(response.url), collected

        status, final_url, collected = run(lines())
    assert status == 200
    assert final_url == server.url("/new")
    assert collected == ["first", "second", "third", "fourth"]


class _ChunkStream(httpx.AsyncByteStream):
    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk


def _guarded(chunks: list[bytes], headers: dict[str, str] | None = None) -> GuardedResponse:
    request = httpx.Request("GET", "https://unit.test/")
    response = httpx.Response(200, headers=headers, stream=_ChunkStream(chunks), request=request)
    return GuardedResponse(response, policy=EgressPolicy(), deadline=float("inf"))


@pytest.mark.parametrize(
    ("chunks", "expected"),
    [
        ([b"a\r", b"\nb\r\n"], ["a", "b"]),  # CRLF split across chunks: one break, not two
        ([b"a\r", b"\r", b"b"], ["a", "", "b"]),
        ([b"a\n\n", b"b"], ["a", "", "b"]),
        ([b"caf\xc3", b"\xa9\n"], ["café"]),  # a UTF-8 character split across chunks
        ([b""], []),
    ],
)
def test_iter_lines_splits_across_chunk_boundaries(
    chunks: list[bytes], expected: list[str]
) -> None:
    async def collect() -> list[str]:
        return [line async for line in _guarded(chunks).iter_lines()]

    assert run(collect()) == expected


def test_iter_lines_uses_the_declared_charset() -> None:
    response = _guarded([b"caf\xe9\n"], {"Content-Type": "text/csv; charset=latin-1"})

    async def collect() -> list[str]:
        return [line async for line in response.iter_lines()]

    assert run(collect()) == ["café"]


def test_body_can_be_read_only_once() -> None:
    response = _guarded([b"x"])

    async def twice() -> None:
        await response.read()
        await response.read()

    with pytest.raises(RuntimeError, match="only once"):
        run(twice())


def test_deflate_raw_and_zlib_wrapped_are_both_decoded() -> None:
    text = b"hello deflate" * 50
    raw_deflate = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    raw_body = raw_deflate.compress(text) + raw_deflate.flush()
    for body in (zlib.compress(text), raw_body):
        response = _guarded([body[:7], body[7:]], {"Content-Encoding": "deflate"})
        assert run(response.read()) == text
