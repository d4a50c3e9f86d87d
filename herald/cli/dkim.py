"""``herald dkim keygen``: a new DKIM key and the DNS record that publishes it."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from herald.cli.base import JsonFlag, app, errors_mapped, fail
from herald.output import out

dkim_app = typer.Typer(help="DKIM signing keys.", no_args_is_help=True)
app.add_typer(dkim_app, name="dkim")


class Algorithm(StrEnum):
    rsa = "rsa"
    ed25519 = "ed25519"


@dkim_app.command("keygen")
def keygen(
    selector: Annotated[str, typer.Option(help="The selector (s=), e.g. herald2026.")],
    domain: Annotated[str, typer.Option(help="The signing domain (d=): your From domain.")],
    out_file: Annotated[
        Path, typer.Option("--out", help="Where to write the private key (created, mode 600).")
    ],
    algorithm: Annotated[Algorithm, typer.Option(help="rsa (rsa-sha256) or ed25519.")] = (
        Algorithm.rsa
    ),
    bits: Annotated[int, typer.Option(min=1024, max=4096, help="RSA key size.")] = 2048,
    as_json: JsonFlag = False,
) -> None:
    """Write a new private key to --out and print the TXT record to publish."""
    from dispatch.dkim_signing import ED25519, RSA, DkimKeyError, DkimSigningKey, txt_strings
    from herald.dkim_keys import generate_private_key, write_private_key

    name = RSA if algorithm is Algorithm.rsa else ED25519
    with errors_mapped():
        data = generate_private_key(name, bits)
        try:
            key = DkimSigningKey.load(selector=selector, domain=domain, algorithm=name, data=data)
        except DkimKeyError as exc:
            fail(str(exc), code=2)
        try:
            write_private_key(out_file, data)
        except FileExistsError:
            fail(f"{out_file} exists; not overwriting a key", hint="choose another --out", code=2)
        except OSError as exc:
            fail(f"cannot write {out_file}: {exc.strerror or type(exc).__name__}", code=1)
        strings = txt_strings(key.dns_record)
        prefix = "HERALD_DKIM" if name == RSA else "HERALD_DKIM_ED25519"
        if as_json:
            doc = {"name": key.dns_name, "type": "TXT", "strings": strings, "file": str(out_file)}
            out.print_json(json.dumps(doc))
            return
        quoted = " ".join(f'"{s}"' for s in strings)
        out.print(f"wrote the private key to {out_file} (mode 600; keep it secret)")
        out.print("publish this DNS record (one TXT record; the strings are joined):")
        out.print(f"{key.dns_name}. IN TXT ( {quoted} )", soft_wrap=True)
        out.print("then give the worker:")
        out.print(f"  {prefix}_SELECTOR={selector}", soft_wrap=True)
        out.print(f"  {prefix}_KEY_FILE={out_file.resolve()}", soft_wrap=True)
        out.print(f"  HERALD_DKIM_DOMAIN={key.domain}", soft_wrap=True)
