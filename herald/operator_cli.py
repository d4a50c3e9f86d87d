"""Compatibility alias: the operator commands live in ``herald.cli.operator`` now, and are
registered whenever ``herald.cli`` is imported. Importing this module is no longer needed."""

from herald.cli import operator as operator
