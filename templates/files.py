"""Files a campaign names, confined to the campaign's folder: the one resolver every reader uses.

A campaign file is data someone else may have written, run by an operator whose environment
holds secrets. So every file it names (audience CSV, template, anything a template includes) is
opened here and nowhere else, and only if it is a regular file inside the campaign's folder:

- the path is written relative to the folder (no absolute path);
- it is resolved with every symlink followed, and the *resolved* path must lie inside the
  *resolved* folder (so ``..``, a symlink to ``/etc/passwd`` and a symlinked parent directory
  pointing elsewhere are all refused the same way);
- it must be a regular file: a FIFO would hang the reader, a device (``/dev/zero``) never ends,
  and ``/proc`` files are not regular either;
- after opening (``O_NOFOLLOW | O_NONBLOCK``, so a FIFO swapped in cannot block us), the open
  descriptor itself is checked again: still a regular file, and on Linux its real path (from
  ``/proc/self/fd``) still inside the folder. What is read is what was checked, whatever was
  renamed in between.

This module sits at the bottom (templates imports nothing of ours), so both the template loader
and the campaign layer above can use it. Errors carry the path as written and a reason, never
any of the file's content.
"""

from __future__ import annotations

import os
import stat
from io import BufferedReader
from pathlib import Path, PurePath

from templates.errors import TemplateError

_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
_OPEN_FLAGS |= getattr(os, "O_CLOEXEC", 0)
OUTSIDE_HINT = "files a campaign names must be inside its folder (symlinks are followed)"


class FileRefused(TemplateError):
    """A file a campaign names cannot be used; ``reason`` says why, never what it holds."""

    def __init__(self, written: str, reason: str, *, outside: bool = False) -> None:
        super().__init__(f"{written!r}: {reason}")
        self.written = written
        self.reason = reason
        self.outside = outside  # refused for where it is, not for what it is


def resolve_inside(base_dir: Path, written: str) -> Path:
    """The real path of ``written`` (relative to ``base_dir``) if it is a regular file inside.

    Raises FileRefused: absolute, outside the folder once resolved, missing, or not a regular
    file.
    """
    if not written or "\x00" in written:
        raise FileRefused(written, "not a usable file name")
    if PurePath(written).is_absolute():
        raise FileRefused(written, "an absolute path is not allowed", outside=True)
    try:
        folder = base_dir.resolve(strict=True)
        target = (folder / written).resolve()  # every existing symlink followed
    except (OSError, RuntimeError) as error:  # RuntimeError: a symlink loop on older Pythons
        raise FileRefused(written, f"cannot resolve the path: {_reason(error)}") from None
    if not target.is_relative_to(folder):
        raise FileRefused(written, "it is outside the campaign folder", outside=True)
    try:
        mode = target.stat().st_mode
    except FileNotFoundError:
        raise FileRefused(written, "no such file") from None
    except OSError as error:
        raise FileRefused(written, _reason(error)) from None
    if not stat.S_ISREG(mode):
        raise FileRefused(written, "it is not a regular file")
    return target


def open_inside(base_dir: Path, written: str) -> BufferedReader:
    """``written`` opened for reading in binary, after resolve_inside and a re-check of the
    open descriptor (see the module docstring). Raises FileRefused."""
    target = resolve_inside(base_dir, written)
    try:
        descriptor = os.open(target, _OPEN_FLAGS)
    except OSError as error:
        raise FileRefused(written, _reason(error)) from None
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise FileRefused(written, "it is not a regular file")
        real = _descriptor_path(descriptor)
        if real is not None and not real.is_relative_to(base_dir.resolve()):
            raise FileRefused(written, "it is outside the campaign folder", outside=True)
        # Regular files never block; clearing O_NONBLOCK keeps later reads ordinary.
        os.set_blocking(descriptor, True)
        return open(descriptor, "rb", closefd=True)
    except BaseException:
        os.close(descriptor)
        raise


def read_text_inside(base_dir: Path, written: str, *, max_bytes: int) -> tuple[str, str]:
    """(UTF-8 text, real path) of ``written`` (see open_inside), refusing a file larger than
    ``max_bytes`` or not valid UTF-8."""
    with open_inside(base_dir, written) as stream:
        data = stream.read(max_bytes + 1)
        real = _descriptor_path(stream.fileno()) or resolve_inside(base_dir, written)
    if len(data) > max_bytes:
        raise FileRefused(written, f"it is larger than {max_bytes // (1024 * 1024)} MiB")
    try:
        return data.decode("utf-8"), str(real)
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise FileRefused(written, f"not valid UTF-8 (line {line})") from None


def _descriptor_path(descriptor: int) -> Path | None:
    """The real path of an open descriptor where the OS can tell (Linux), else None."""
    try:
        link = os.readlink(f"/proc/self/fd/{descriptor}")
    except OSError:
        return None
    # Anything else ("pipe:[…]", "anon_inode:…") is not a file path and fails S_ISREG anyway.
    return Path(link) if link.startswith("/") else None


def _reason(error: BaseException) -> str:
    if isinstance(error, OSError) and error.strerror:
        return error.strerror.lower()
    return type(error).__name__
