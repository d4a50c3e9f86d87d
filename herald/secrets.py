"""The credentials this process has parsed, so that whatever the CLI prints is scrubbed of them.

Apart from ``herald.settings`` (which parses the URLs) so that printing an error does not import
the database and SMTP libraries.
"""

from __future__ import annotations

from dispatch.egress.redact import Redactor


class SecretBook:
    """The credentials of the settings this process has parsed, for scrubbing what it prints.

    The CLI forgets them when a command ends (``forget``), so tests that run many commands in
    one process do not scrub one command's output with another's secrets.
    """

    def __init__(self) -> None:
        self._redactor = Redactor()

    def learn(self, secrets: list[str]) -> None:
        self._redactor = self._redactor.with_secrets(secrets)

    def forget(self) -> None:
        self._redactor = Redactor()

    def scrub(self, text: str) -> str:
        return self._redactor(text)


known_secrets = SecretBook()
