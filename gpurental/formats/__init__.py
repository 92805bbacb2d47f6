"""Date formats per language (settings.FORMAT_MODULE_PATH), over Django's own.

Templates name formats (``|date:"SHORT_DATETIME_FORMAT"``), never patterns, so that each
language writes dates its way: English keeps the console's ISO style (2026-10-01 14:00),
Simplified Chinese uses Django's zh_Hans formats (2026年10月1日 14:00).
"""
