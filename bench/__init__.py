"""Benchmarks for Herald: figures and ratios measured in one run (``make bench``).

Speed and memory targets are checked here, never by timed unit tests. See ``bench/README.md``.
"""
