"""Issued invoices never change: the database refuses it, whatever the code does.

- billing_invoice: a draft may change freely; it may become issued only with a total
  equal to the sum of its lines. Once issued, a row may only move issued → paid
  (setting paid_at) or issued → void (setting voided_at); every other column stays
  as it was (compared as a whole row, so columns added later are covered too). Only
  drafts may be deleted.
- billing_invoiceline: no INSERT, UPDATE or DELETE of a line whose invoice is not a
  draft. The invoice row is read FOR SHARE, so a line written while the invoice is
  being issued waits for that transaction and then sees the new status.
"""

from django.db import migrations

INVOICE = r"""
CREATE FUNCTION billing_invoice_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    lines_total numeric;
BEGIN
    IF TG_OP = 'DELETE' THEN
        IF OLD.status <> 'draft' THEN
            RAISE EXCEPTION 'invoice % is %: it cannot be deleted', OLD.number, OLD.status
                USING ERRCODE = 'integrity_constraint_violation';
        END IF;
        RETURN OLD;
    END IF;
    IF OLD.status = 'draft' THEN
        IF NEW.status <> 'draft' THEN
            SELECT coalesce(sum(amount), 0) INTO lines_total
                FROM billing_invoiceline WHERE invoice_id = NEW.id;
            IF NEW.status <> 'issued' OR NEW.total <> lines_total THEN
                RAISE EXCEPTION 'a draft becomes issued with a total equal to its lines (% <> %)',
                    NEW.total, lines_total USING ERRCODE = 'integrity_constraint_violation';
            END IF;
        END IF;
        RETURN NEW;
    END IF;
    IF to_jsonb(NEW) - 'status' - 'paid_at' - 'voided_at'
            IS DISTINCT FROM to_jsonb(OLD) - 'status' - 'paid_at' - 'voided_at' THEN
        RAISE EXCEPTION 'invoice % is %: it cannot be changed (issue a credit note)',
            OLD.number, OLD.status USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    IF NEW.status = OLD.status THEN
        IF NEW.paid_at IS DISTINCT FROM OLD.paid_at
                OR NEW.voided_at IS DISTINCT FROM OLD.voided_at THEN
            RAISE EXCEPTION 'invoice % is %: its timestamps cannot change', OLD.number, OLD.status
                USING ERRCODE = 'integrity_constraint_violation';
        END IF;
    ELSIF NOT (
        (OLD.status = 'issued' AND NEW.status = 'paid'
            AND NEW.paid_at IS NOT NULL AND NEW.voided_at IS NULL)
        OR (OLD.status = 'issued' AND NEW.status = 'void'
            AND NEW.voided_at IS NOT NULL AND NEW.paid_at IS NULL)
    ) THEN
        RAISE EXCEPTION 'invoice %: % → % is not allowed', OLD.number, OLD.status, NEW.status
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER billing_invoice_immutable BEFORE UPDATE OR DELETE ON billing_invoice
    FOR EACH ROW EXECUTE FUNCTION billing_invoice_immutable();
"""

LINES = r"""
CREATE FUNCTION billing_invoiceline_frozen() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    invoice_status text;
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        SELECT status INTO invoice_status FROM billing_invoice WHERE id = OLD.invoice_id FOR SHARE;
        IF invoice_status IS DISTINCT FROM 'draft' THEN
            RAISE EXCEPTION 'the lines of an invoice that is % cannot change', invoice_status
                USING ERRCODE = 'integrity_constraint_violation';
        END IF;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        SELECT status INTO invoice_status FROM billing_invoice WHERE id = NEW.invoice_id FOR SHARE;
        IF invoice_status IS DISTINCT FROM 'draft' THEN
            RAISE EXCEPTION 'the lines of an invoice that is % cannot change', invoice_status
                USING ERRCODE = 'integrity_constraint_violation';
        END IF;
        RETURN NEW;
    END IF;
    RETURN OLD;
END $$;
CREATE TRIGGER billing_invoiceline_frozen BEFORE INSERT OR UPDATE OR DELETE ON billing_invoiceline
    FOR EACH ROW EXECUTE FUNCTION billing_invoiceline_frozen();
"""


class Migration(migrations.Migration):
    dependencies = [("billing", "0003_invoice_void_counter_exact_rate")]
    operations = [
        migrations.RunSQL(
            sql=INVOICE,
            reverse_sql="DROP TRIGGER billing_invoice_immutable ON billing_invoice; "
            "DROP FUNCTION billing_invoice_immutable();",
        ),
        migrations.RunSQL(
            sql=LINES,
            reverse_sql="DROP TRIGGER billing_invoiceline_frozen ON billing_invoiceline; "
            "DROP FUNCTION billing_invoiceline_frozen();",
        ),
    ]
