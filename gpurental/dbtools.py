"""Database-side rules that Django's constraints cannot express."""

from django.db import migrations


def append_only(table: str) -> migrations.RunSQL:
    """Make ``table`` append-only: the database itself refuses UPDATE and DELETE."""
    function = f"{table}_append_only"
    return migrations.RunSQL(
        sql=f"""
        CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            RAISE EXCEPTION '{table} is append-only: % refused', TG_OP
                USING ERRCODE = 'integrity_constraint_violation';
        END $$;
        CREATE TRIGGER {function} BEFORE UPDATE OR DELETE ON {table}
            FOR EACH ROW EXECUTE FUNCTION {function}();
        """,
        reverse_sql=f"DROP TRIGGER {function} ON {table}; DROP FUNCTION {function}();",
    )
