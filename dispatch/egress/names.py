"""Host name and IP literal helpers shared by the URL checks, the policy and the resolver."""

from __future__ import annotations

import ipaddress
import re
from typing import Final

from dispatch.egress.ranges import IPAddress

# Any dotted run of decimal/octal/hex numbers: glibc's inet_aton reads 0x7f.1 and 0177.1 too.
NUMERIC_HOST: Final = re.compile(r"(0x[0-9a-f]*|[0-9]+)(\.(0x[0-9a-f]*|[0-9]+))*")
HOST_NAME: Final = re.compile(r"(?=.{1,253}$)[a-z0-9_-]+(\.[a-z0-9_-]+)*")


def parse_literal(host: str) -> IPAddress | None:
    try:
        # Strict: rejects leading zeros and short forms (CVE-2021-29921), which we then refuse
        # as non-canonical numbers instead of letting getaddrinfo guess.
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def normalise_name(host: str) -> str:
    # One trailing dot only means "fully qualified"; policy must see the same name either way.
    lowered = host.lower()
    return lowered[:-1] if lowered.endswith(".") else lowered


def looks_numeric(name: str) -> bool:
    # A numeric last label is never a real top-level domain, but inet_aton may accept it.
    last_label = name.rsplit(".", 1)[-1]
    return bool(NUMERIC_HOST.fullmatch(name)) or last_label.isdigit()
