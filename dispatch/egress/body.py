"""Response bodies: decoded with bounded output, capped, read under the total deadline."""

from __future__ import annotations

import asyncio
import codecs
import re
import zlib
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from typing import Final

import httpx

from dispatch.egress.errors import EgressError, EgressTooLarge, deadline_passed
from dispatch.egress.policy import EgressPolicy

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
            raise deadline_passed(url, self._policy.total_timeout) from None
        except httpx.HTTPError as exc:
            raise EgressError(url=url, reason=f"{type(exc).__name__}: {exc}") from exc


def _decoded(decoder: _BodyDecoder, chunk: bytes, url: str, coding: str) -> Iterator[bytes]:
    try:
        yield from decoder.decode(chunk)
    except zlib.error as exc:
        raise EgressError(url=url, reason=f"corrupt {coding} body: {exc}") from exc
