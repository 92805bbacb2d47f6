#!/usr/bin/env python
"""The translation check (`make lint`, CI): fails when the console could show a string
that no translator saw.

1. Templates: every text a person reads (HTML text, the visible attributes, the plain
   text of e-mails) is inside {% translate %} or {% blocktranslate %}. Walks every
   template with Django's own Lexer, so that what it reads is what Django renders.
2. Catalogues: every zh_Hans catalogue (locale/ and gpurental/*/locale/, django and
   djangojs) compiles with msgfmt --check and has no untranslated or fuzzy entry.
3. The committed .mo of each catalogue is what its .po compiles to (a fresh machine
   without gettext uses it as committed).

Usage: python scripts/check_i18n.py [--templates-only] [template dirs or files ...]
Exit status 1 and one line per problem (file:line: text) when something is wrong.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from html.parser import HTMLParser
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LANGUAGE_DIR = "zh_Hans"

# Texts that are the same in every language. Keep this tiny: each entry needs a reason.
ALLOWED_TEXTS = {
    "gpurental",  # the brand name
    "UTC",  # the time zone's name; the times beside it are not localised either
}
# Elements whose text is not prose: scripts, styles, and code a user types as it is.
UNREAD_ELEMENTS = {"script", "style", "code", "kbd", "samp"}
# Attributes whose values a person reads (tooltips, placeholders, confirm dialogs).
VISIBLE_ATTRIBUTES = {"title", "placeholder", "alt", "aria-label", "data-confirm", "label"}
ALLOWED = "|".join(re.escape(text) for text in sorted(ALLOWED_TEXTS))
LETTER = re.compile(r"[^\W\d_]")
# What an untranslated marker stands in for, in the text that the HTML parser reads: it
# has no letters, so it is never reported, and it keeps the HTML around it well formed.
MARK = "0"
# What any other tag becomes: the texts on either side of {% if %} are separate strings.
SEPARATOR = "\x01"


def _template_text(source: str) -> tuple[str, list[str]]:
    """The template as the HTML parser should read it: translated parts and variables
    become MARK, other tags and comments disappear, line numbers are kept. Also returns
    the problems found at the tag level (an unbalanced block)."""
    from django.template.base import Lexer, TokenType

    out: list[str] = []
    problems: list[str] = []
    skip_until: str | None = None  # an end tag: inside translate/comment/verbatim blocks
    for token in Lexer(source).tokenize():
        newlines = "\n" * token.contents.count("\n")
        if token.token_type == TokenType.BLOCK:
            name = token.contents.split()[0] if token.contents.split() else ""
            if skip_until is not None:
                if name == skip_until:
                    skip_until = None
                    if name == "endblocktranslate":
                        out.append(MARK)
                out.append(newlines)
                continue
            if name in {"blocktranslate", "blocktrans"}:
                skip_until = "endblocktranslate" if name == "blocktranslate" else "endblocktrans"
            elif name in {"comment", "verbatim"}:
                skip_until = "end" + name
            elif name in {"translate", "trans"} and " as " not in token.contents:
                out.append(MARK)
            out.append(SEPARATOR + newlines)
        elif skip_until is not None:
            out.append(newlines)
        elif token.token_type == TokenType.VAR:
            out.append(MARK + newlines)
        elif token.token_type == TokenType.COMMENT:
            out.append(newlines)
        else:
            out.append(token.contents)
    if skip_until is not None:
        problems.append(f"unclosed block, expected {{% {skip_until} %}}")
    return "".join(out), problems


class _VisibleText(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.found: list[tuple[int, str]] = []
        self._hidden = 0  # inside <script>, <style>, or <code> (commands and keys stay as typed)

    def handle_starttag(self, tag, attrs):
        if tag in UNREAD_ELEMENTS:
            self._hidden += 1
        attributes = dict(attrs)
        for name, value in attrs:
            visible = name in VISIBLE_ATTRIBUTES or (
                name == "value" and attributes.get("type") in {"submit", "button", "reset"}
            )
            if visible and value:
                self._report(value)

    def handle_endtag(self, tag):
        if tag in UNREAD_ELEMENTS and self._hidden:
            self._hidden -= 1

    def handle_data(self, data):
        if not self._hidden:
            self._report(data)

    def _report(self, text: str) -> None:
        for part in text.split(SEPARATOR):
            stripped = " ".join(part.split())
            if LETTER.search(re.sub(ALLOWED, "", stripped)):
                self.found.append((self.getpos()[0], stripped))


def untranslated_texts(path: Path) -> list[str]:
    """``path:line: text`` for each user-visible text outside translate tags."""
    source = path.read_text(encoding="utf-8")
    text, problems = _template_text(source)
    parser = _VisibleText()
    parser.feed(text)
    parser.close()
    try:
        name = path.relative_to(ROOT)
    except ValueError:
        name = path
    return [f"{name}: {p}" for p in problems] + [
        f"{name}:{line}: not marked for translation: {found!r}" for line, found in parser.found
    ]


def templates_in(paths: list[Path]) -> list[Path]:
    files: list[Path] = []
    for p in paths:
        if p.is_dir():
            files += sorted(f for f in p.rglob("*") if f.suffix in {".html", ".txt"})
        else:
            files.append(p)
    return files


def catalogues() -> list[Path]:
    """Every zh_Hans catalogue: Django's (templates, Python) and djangojs (static/js)."""
    found = sorted((ROOT / "locale" / LANGUAGE_DIR / "LC_MESSAGES").glob("django*.po"))
    found += sorted((ROOT / "gpurental").glob(f"*/locale/{LANGUAGE_DIR}/LC_MESSAGES/django*.po"))
    return found


def catalogue_problems(po: Path) -> list[str]:
    """msgfmt --check must pass, every entry be translated and none fuzzy, and the
    committed .mo be byte for byte what the .po compiles to."""
    name = po.relative_to(ROOT)
    with tempfile.TemporaryDirectory() as tmp:
        compiled = Path(tmp) / "django.mo"
        result = subprocess.run(  # noqa: S603 - a fixed program on our own files
            ["msgfmt", "--check", "--statistics", "-o", str(compiled), str(po)],  # noqa: S607
            capture_output=True,
            text=True,
            env={"LC_ALL": "C", "PATH": "/usr/bin:/bin:/usr/local/bin"},
        )
        if result.returncode != 0:
            return [f"{name}: msgfmt failed: {result.stderr.strip()}"]
        problems = []
        stats = result.stderr.strip().splitlines()[-1] if result.stderr.strip() else ""
        if "fuzzy" in stats or "untranslated" in stats:
            problems.append(f"{name}: {stats}")
        mo = po.with_suffix(".mo")
        if not mo.exists():
            problems.append(f"{name}: no compiled {mo.name} committed beside it")
        elif mo.read_bytes() != compiled.read_bytes():
            problems.append(
                f"{mo.relative_to(ROOT)} is not what {po.name} compiles to: run make messages"
            )
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--templates-only", action="store_true")
    parser.add_argument("paths", nargs="*", type=Path)
    args = parser.parse_args(argv)

    problems: list[str] = []
    for template in templates_in(args.paths or [ROOT / "templates"]):
        problems += untranslated_texts(template)
    if not args.templates_only:
        for po in catalogues():
            problems += catalogue_problems(po)
    for problem in problems:
        print(problem)
    if problems:
        print(f"check_i18n: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
