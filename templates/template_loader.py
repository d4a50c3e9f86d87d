"""Where a step's templates come from: the campaign folder, and built-in layouts under herald/.

Files are read through the shared resolver (templates/files.py): confined to the campaign
folder, regular files only, size-capped.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from jinja2 import BaseLoader, Environment, FileSystemLoader
from jinja2.exceptions import TemplateNotFound

from templates.files import FileRefused, read_text_inside

LAYOUT_PREFIX = "herald/"
LAYOUTS_DIR = Path(__file__).parent / "layouts"

MAX_TEMPLATE_BYTES = 16 * 1024 * 1024


class _HeraldLoader(BaseLoader):
    """Files from the campaign folder, and built-in layouts under ``herald/``.

    ``herald/`` always means the built-in layouts, even if the campaign folder has a
    ``herald`` subfolder, so a layout reference can never silently change meaning.
    """

    def __init__(self, base_dir: Path) -> None:
        self.base_dir = base_dir
        self._layouts = FileSystemLoader(LAYOUTS_DIR)
        # Rendering errors point at a file by its path; operators know it by its name.
        self.names_by_filename: dict[str, str] = {}

    def get_source(
        self, environment: Environment, template: str
    ) -> tuple[str, str | None, Callable[[], bool] | None]:
        if template.startswith(LAYOUT_PREFIX):
            source, filename, uptodate = self._layouts.get_source(
                environment, template[len(LAYOUT_PREFIX) :]
            )
        else:
            # The shared resolver: confined, regular files only, checked before reading.
            source, filename = _campaign_source(self.base_dir, template)
            uptodate = _always_current
            if not _is_inside(filename, self.base_dir):
                raise TemplateNotFound(template)
        if filename is not None:
            self.names_by_filename[filename] = template
        return source, filename, uptodate

    def describe(self, name: str) -> str:
        """Where ``name`` was looked for, for 'not found' messages."""
        if name.startswith(LAYOUT_PREFIX):
            return f"built-in layout {name}"
        path = PurePosixPath(name)
        if path.is_absolute() or ".." in path.parts:
            return f"{name} (only files inside {self.base_dir} can be loaded)"
        return str(self.base_dir / name)


def _campaign_source(base_dir: Path, name: str) -> tuple[str, str]:
    try:
        return read_text_inside(base_dir, name, max_bytes=MAX_TEMPLATE_BYTES)
    except FileRefused as exc:
        if exc.reason == "no such file" or exc.outside:
            # As Jinja's own loaders do: the message then says where templates may live.
            raise TemplateNotFound(name) from None
        raise


def _always_current() -> bool:
    return True  # an environment lives for one command; files are hashed at load anyway


def _is_inside(filename: str | None, directory: Path) -> bool:
    if filename is None:
        return False
    real_file = os.path.realpath(filename)
    real_dir = os.path.realpath(directory)
    return os.path.commonpath([real_file, real_dir]) == real_dir
