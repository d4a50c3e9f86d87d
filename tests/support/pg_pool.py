"""Fresh PostgreSQL test databases without a CREATE DATABASE per test.

Cloning the migrated template costs the server about 0.4 s of CPU per database (PostgreSQL 15
copies its ~8 MB, system catalogues included, through the WAL) and 1 to 2 s of wall time on a
busy two-core machine: with about 1,500 PostgreSQL tests, the largest single cost of the suite.
So each xdist worker keeps the databases its tests are done with and hands them out again,
returned to the template's state first:

- every other session on it is ended and it is renamed to a new random name, so a leftover
  process still holding the old URL can no longer reach it (as after a DROP DATABASE);
- it is reused only if its schema is still exactly the template's (tables, columns, defaults,
  constraints, indexes, triggers, functions, types, sequences' settings, privileges, database
  settings, the Alembic revision) and it has no planner statistics (a test that ran ANALYZE,
  or autovacuum did: plans must start from the same state as in a clone). Anything else, and
  it is dropped as before;
- then the tables that have rows are truncated, the sequences that were used restarted and
  the statistics counters reset (so autovacuum decides as on a fresh clone).

A test therefore still gets an empty, migrated database under a name of its own.
"""

from __future__ import annotations

import uuid

import sqlalchemy as sa
from sqlalchemy.engine import Engine

# Everything a test could change about a database besides its rows; NULLs are spelt out so a
# changed ACL or option changes the text. One row of text, compared with the template's.
FINGERPRINT = """
select md5(string_agg(item, E'\n' order by item)) from (
  select 'class ' || n.nspname || '.' || c.relname || ' ' || c.relkind::text || ' '
         || c.relpersistence::text || ' ' || coalesce(c.relacl::text, '-') || ' '
         || coalesce(c.reloptions::text, '-') || ' ' || c.relrowsecurity::text as item
    from pg_class c join pg_namespace n on n.oid = c.relnamespace
   where n.nspname not in ('pg_catalog', 'information_schema', 'pg_toast')
     and n.nspname not like 'pg_temp%' and n.nspname not like 'pg_toast_temp%'
  union all
  select 'column ' || a.attrelid::regclass::text || '.' || a.attname || ' '
         || format_type(a.atttypid, a.atttypmod) || ' ' || a.attnotnull::text || ' '
         || a.attnum || ' ' || coalesce(pg_get_expr(d.adbin, d.adrelid), '-')
    from pg_attribute a
    join pg_class c on c.oid = a.attrelid
    join pg_namespace n on n.oid = c.relnamespace
    left join pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum
   where n.nspname not in ('pg_catalog', 'information_schema', 'pg_toast')
     and n.nspname not like 'pg_temp%' and a.attnum > 0 and not a.attisdropped
  union all
  select 'constraint ' || conrelid::regclass::text || ' ' || conname || ' '
         || pg_get_constraintdef(oid) || ' ' || convalidated::text
    from pg_constraint
   where connamespace not in ('pg_catalog'::regnamespace, 'information_schema'::regnamespace)
  union all
  select 'index ' || pg_get_indexdef(indexrelid) || ' ' || indisvalid::text
    from pg_index i join pg_class c on c.oid = i.indrelid
   where c.relnamespace not in ('pg_catalog'::regnamespace, 'information_schema'::regnamespace,
                                'pg_toast'::regnamespace)
  union all
  select 'trigger ' || tgrelid::regclass::text || ' ' || tgname || ' ' || tgenabled::text
         || ' ' || pg_get_triggerdef(oid)
    from pg_trigger
  union all
  select 'rule ' || ev_class::regclass::text || ' ' || rulename || ' ' || ev_enabled::text
    from pg_rewrite where ev_class >= 16384
  union all
  select 'policy ' || polrelid::regclass::text || ' ' || polname from pg_policy
  union all
  select 'function ' || p.oid::regprocedure::text || ' ' || md5(pg_get_functiondef(p.oid))
         || ' ' || coalesce(p.proconfig::text, '-') || ' ' || coalesce(p.proacl::text, '-')
    from pg_proc p join pg_namespace n on n.oid = p.pronamespace
   where n.nspname not in ('pg_catalog', 'information_schema') and p.prokind in ('f', 'p')
  union all
  select 'type ' || n.nspname || '.' || t.typname || ' ' || t.typtype::text
    from pg_type t join pg_namespace n on n.oid = t.typnamespace
   where n.nspname not in ('pg_catalog', 'information_schema', 'pg_toast')
     and n.nspname not like 'pg_temp%' and n.nspname not like 'pg_toast_temp%'
  union all
  select 'enum ' || enumtypid::regtype::text || ' ' || enumlabel || ' ' || enumsortorder
    from pg_enum
  union all
  select 'namespace ' || nspname || ' ' || coalesce(nspacl::text, '-') from pg_namespace
   where nspname not like 'pg_temp%' and nspname not like 'pg_toast_temp%'  -- stay once made
  union all
  select 'extension ' || extname || ' ' || extversion from pg_extension
  union all
  select 'event trigger ' || evtname || ' ' || evtenabled::text from pg_event_trigger
  union all
  select 'sequence ' || seqrelid::regclass::text || ' ' || seqtypid::regtype::text || ' '
         || seqstart || ' ' || seqincrement || ' ' || seqmin || ' ' || seqmax || ' '
         || seqcache || ' ' || seqcycle::text
    from pg_sequence
  union all
  select 'setting ' || coalesce(setconfig::text, '-') || ' ' || setrole
    from pg_db_role_setting s join pg_database d on d.oid = s.setdatabase
   where d.datname = current_database()
  union all
  select 'database ' || datconnlimit || ' ' || datallowconn::text || ' '
         || datistemplate::text || ' ' || datdba || ' ' || coalesce(datacl::text, '-')
    from pg_database where datname = current_database()
  union all
  select 'large objects ' || count(*) from pg_largeobject_metadata
  union all
  select 'publication ' || pubname from pg_publication
  union all
  select 'revision ' || version_num from public.alembic_version
) as everything
"""

# Rows the reset cannot undo the way a clone would start: planner statistics (pg_statistic
# belongs to the whole database and survives TRUNCATE) and prepared transactions.
LEFTOVERS = """
select (select count(*) from pg_statistic s join pg_class c on c.oid = s.starelid
         where c.relnamespace = 'public'::regnamespace)
     + (select count(*) from pg_statistic_ext_data)
     + (select count(*) from pg_prepared_xacts where database = current_database())
"""

TABLES = """
select quote_ident(relname) from pg_class
 where relnamespace = 'public'::regnamespace and relkind in ('r', 'p')
   and relname <> 'alembic_version'
 order by relname
"""
USED_SEQUENCES = """
select quote_ident(schemaname) || '.' || quote_ident(sequencename) from pg_sequences
 where last_value is not null
"""


class DatabasePool:
    """One xdist worker's migrated PostgreSQL databases; ``url(name)`` makes their URLs."""

    def __init__(self, admin: Engine, template: str, base_url: str) -> None:
        self.admin, self.template, self.base_url = admin, template, base_url
        self.free: list[str] = []
        self.fingerprint = self._fingerprint(template)

    def url(self, name: str) -> str:
        return f"{self.base_url}/{name}"

    def take(self) -> str:
        """The name of an empty, migrated database for one test's use."""
        if self.free:
            return self.free.pop()
        name = _new_name()
        with self.admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}" TEMPLATE "{self.template}"')
        return name

    def give_back(self, name: str) -> None:
        """The test is done with ``name``: reset it for the next test, or drop it."""
        renamed = self._rename(name)
        if renamed is None:
            self.drop(name)
        elif self._reset(renamed):
            self.free.append(renamed)
        else:
            self.drop(renamed)

    def drop(self, name: str) -> None:
        with self.admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def close(self) -> None:
        while self.free:
            self.drop(self.free.pop())

    def _rename(self, name: str) -> str | None:
        """End every session on ``name`` and rename it; None if a session came back."""
        new = _new_name()
        with self.admin.connect() as conn:
            conn.execute(
                sa.text(
                    "select pg_terminate_backend(pid, 10000) from pg_stat_activity"
                    " where datname = :name and pid <> pg_backend_pid()"
                ),
                {"name": name},
            )
            try:
                conn.exec_driver_sql(f'ALTER DATABASE "{name}" RENAME TO "{new}"')
            except sa.exc.DBAPIError:  # in use again (a process reconnected): drop it instead
                return None
        return new

    def _fingerprint(self, name: str) -> str:
        engine = self._engine(name)
        try:
            with engine.connect() as conn:
                return str(conn.execute(sa.text(FINGERPRINT)).scalar_one())
        finally:
            engine.dispose()

    def _reset(self, name: str) -> bool:
        engine = self._engine(name)
        try:
            with engine.connect() as conn:
                conn.exec_driver_sql("set lock_timeout = '10s'")
                if str(conn.execute(sa.text(FINGERPRINT)).scalar_one()) != self.fingerprint:
                    return False
                if conn.execute(sa.text(LEFTOVERS)).scalar_one() != 0:
                    return False
                tables = list(conn.exec_driver_sql(TABLES).scalars())
                filled = conn.exec_driver_sql(
                    "select " + ", ".join(f"exists (select from {t})" for t in tables)
                ).one()
                truncate = [t for t, has_rows in zip(tables, filled, strict=True) if has_rows]
                if truncate:
                    conn.exec_driver_sql(f"TRUNCATE {', '.join(truncate)} CASCADE")
                for sequence in list(conn.exec_driver_sql(USED_SEQUENCES).scalars()):
                    conn.exec_driver_sql(f"ALTER SEQUENCE {sequence} RESTART")
                conn.exec_driver_sql("select pg_stat_reset()")
            return True
        except sa.exc.DBAPIError:  # e.g. a test dropped alembic_version: not the template's
            return False
        finally:
            engine.dispose()

    def _engine(self, name: str) -> Engine:
        return sa.create_engine(
            self.url(name).replace("postgresql://", "postgresql+psycopg://"),
            isolation_level="AUTOCOMMIT",
            poolclass=sa.pool.NullPool,
        )


def _new_name() -> str:
    return f"herald_t_{uuid.uuid4().hex[:12]}"
