"""The application layer: Herald's use cases, called by the CLI, the tests and the benchmarks.

Each use case is a plain function in one of these modules: it takes an engine (or the settings
it needs), a clock where time matters, and returns a result dataclass. It never prints and never
exits; it raises our errors (``herald.errors``, ``campaigns.errors``, ``templates.errors``),
which the CLI maps to one line and an exit code.

- ``herald.app.engine``: ``open_engine`` (schema ensured), ``upgrade_database``
- ``herald.app.launch``: ``validate``, ``launch``
- ``herald.app.worker``: ``build_worker``, ``run_worker``
- ``herald.app.operator``: ``change_status`` (pause/resume/cancel), ``recover``, ``list_jobs``,
  ``resolve_in_doubt``, ``retry_dead``
- ``herald.app.status``: ``status``
- ``herald.app.audience``: ``check_audience``

This package imports nothing heavy itself, so ``herald --help`` stays fast: the CLI imports a
use case's module only inside the command that runs it.
"""
