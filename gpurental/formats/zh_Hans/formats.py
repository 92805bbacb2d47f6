# The console's Chinese money and counts: thousands grouped by three with commas, as
# Chinese invoices and bank statements write amounts (¥1,234.50). Django's zh_Hans has no
# separator (¥1234.50). Dates stay Django's (2026年10月1日).
THOUSAND_SEPARATOR = ","
NUMBER_GROUPING = 3
