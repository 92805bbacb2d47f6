# The console's English dates: ISO order, 24-hour clock (Django's en would say
# "10/01/2026 2 p.m."). Formats not named here are Django's.
SHORT_DATE_FORMAT = "Y-m-d"
SHORT_DATETIME_FORMAT = "Y-m-d H:i"
YEAR_MONTH_FORMAT = "Y-m"
