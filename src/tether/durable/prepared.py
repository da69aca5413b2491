"""DBOS's "prepared" statements compiled once on SQLite too.

DBOS 3.4 runs its hot inserts (a workflow's status row and its inputs, at every enqueue
and start, in a worker and in a client alike) through ``SystemDatabase._execute_prepared``,
which on PostgreSQL compiles each statement once per set of columns and afterwards sends
the SQL text, but on SQLite builds and compiles the SQLAlchemy statement on every call.
:func:`install` replaces that method on a SQLite system database by DBOS's own PostgreSQL
logic for the engine's SQLite dialect: the engine's own compilation, every value through
its type's bind processor, the statement's constants kept with the SQL, the parameters in
the compiled order (SQLite's ``?`` style). The statement, its transaction and its errors
are the ones DBOS's call made; a caller's connection on another engine, or a statement
that renders per call (an expanding ``IN``), still goes DBOS's way.

The method's source is checked against the DBOS this was written for: :func:`install`
raises :class:`ConfigError`, naming the installed DBOS, if a release changed it
(``tests/durable/test_prepared.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tether.durable.fence import require_known, source_digest

_EXPECTED_DIGEST = "ad865125d57bd1dd"
"""Digest of ``SystemDatabase._execute_prepared`` in the DBOS this reproduces (3.4.0)."""


def _source_digest() -> str:
    from dbos._sys_db import SystemDatabase

    return source_digest(SystemDatabase._execute_prepared)


def _verify() -> None:
    require_known(_source_digest(), _EXPECTED_DIGEST, "its prepared statements")


_Prepared = tuple[str, tuple[str, ...], dict[str, Callable[[Any], Any]], dict[str, Any]]


def install(sys_db: Any) -> bool:
    """Compile ``sys_db``'s prepared statements once if it is a plain SQLite system
    database (PostgreSQL's are compiled once by DBOS already); whether it did."""
    from dbos._sys_db_sqlite import SQLiteSystemDatabase

    if type(sys_db) is not SQLiteSystemDatabase:
        return False
    _verify()
    setattr(sys_db, "_execute_prepared", _compiled_once(sys_db))  # noqa: B010
    return True


def _compile(sys_db: Any, build: Callable[[], Any], columns: list[str] | None) -> _Prepared | None:
    from dbos._schemas import SCHEMA_PLACEHOLDER

    dialect = sys_db.engine.dialect
    compiled = build().compile(
        dialect=dialect,
        column_keys=columns,
        schema_translate_map={SCHEMA_PLACEHOLDER: sys_db.schema},
        render_schema_translate=True,
    )
    order = compiled.positiontup
    if order is None or compiled.literal_execute_params or compiled.post_compile_params:
        return None  # rendered per call: left to DBOS
    processors: dict[str, Callable[[Any], Any]] = {}
    constants: dict[str, Any] = {}
    for name, bind in compiled.binds.items():
        processor = bind.type.dialect_impl(dialect).bind_processor(dialect)
        if processor is not None:
            processors[name] = processor
        constants[name] = bind.value
    return str(compiled), tuple(order), processors, constants


def _compiled_once(sys_db: Any) -> Callable[..., Any]:
    from sqlalchemy.orm import Session

    stock = type(sys_db)._execute_prepared.__get__(sys_db)
    cache: dict[tuple[str, tuple[str, ...]], _Prepared | None] = {}

    def _execute_prepared(
        conn: Any,
        name: str,
        values: dict[str, Any],
        build: Callable[[], Any],
        *,
        insert_columns: bool = True,
    ) -> Any:
        connection = conn.connection() if isinstance(conn, Session) else conn
        if connection.dialect is not sys_db.engine.dialect:
            return stock(conn, name, values, build, insert_columns=insert_columns)
        key = (name, tuple(values))
        if key not in cache:
            cache[key] = _compile(sys_db, build, list(values) if insert_columns else None)
        prepared = cache[key]
        if prepared is None:
            return stock(conn, name, values, build, insert_columns=insert_columns)
        sql, order, processors, constants = prepared
        given = {**constants, **values}
        params = tuple(processors[k](given[k]) if k in processors else given[k] for k in order)
        return connection.exec_driver_sql(sql, params)

    return _execute_prepared
