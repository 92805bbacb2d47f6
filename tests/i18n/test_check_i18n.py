"""scripts/check_i18n.py, the CI check: it fails on a user-visible string left outside the
translate tags, on an untranslated or fuzzy catalogue entry and on a stale .mo, and it
passes on the project's own templates."""

import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("check_i18n", ROOT / "scripts" / "check_i18n.py")
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)

needs_gettext = pytest.mark.skipif(not shutil.which("msgfmt"), reason="gettext is not installed")


def _template(tmp_path, text: str) -> Path:
    path = tmp_path / "page.html"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_bare_sentence_fails_naming_the_file_line_and_text(tmp_path):
    path = _template(
        tmp_path, '{% load i18n %}<h1>{% translate "Fine" %}</h1>\n<p>Add credit now</p>'
    )
    problems = check.untranslated_texts(path)
    assert len(problems) == 1
    assert "page.html:2" in problems[0] and "'Add credit now'" in problems[0]
    assert check.main(["--templates-only", str(path)]) == 1


@pytest.mark.parametrize(
    "text",
    [
        '<button title="Delete it">{% translate "Delete" %}</button>',
        '<input type="submit" value="Save">',
        '<form data-confirm="Stop {{ name }}?"></form>',
        "{% if x %}Running{% endif %}",
        "Hello {{ name }},",  # plain-text e-mail
    ],
)
def test_visible_attributes_branches_and_plain_text_are_checked(tmp_path, text):
    assert check.untranslated_texts(_template(tmp_path, text)), text


@pytest.mark.parametrize(
    "text",
    [
        "{% load i18n %}<p>{% blocktranslate %}Hi {{ name }}, <b>welcome</b>{% endblocktranslate %}</p>",
        '<a class="brand" href="/">gpurental</a> <code>ssh -p 2222 root@host</code>',
        "<script>const words = 'not prose';</script><style>.a { color: red }</style>",
        "{% comment %}Notes for developers{% endcomment %}{# a note #}<p>{{ value }} — 12 %</p>",
        '<p>{{ start }} UTC</p><div class="muted" hidden data-when="running stopped"></div>',
    ],
)
def test_translated_code_markup_and_comments_pass(tmp_path, text):
    assert check.untranslated_texts(_template(tmp_path, text)) == []


def test_the_projects_templates_are_all_marked():
    assert check.main(["--templates-only"]) == 0


def _catalogue(tmp_path, entries: str) -> Path:
    po = tmp_path / "locale" / "zh_Hans" / "LC_MESSAGES" / "django.po"
    po.parent.mkdir(parents=True)
    po.write_text(
        'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n\n' + entries,
        encoding="utf-8",
    )
    return po


def _compiled(po: Path) -> Path:
    subprocess.run(["msgfmt", "-o", str(po.with_suffix(".mo")), str(po)], check=True)  # noqa: S603, S607
    return po


@needs_gettext
def test_a_complete_catalogue_with_its_mo_passes(tmp_path, monkeypatch):
    monkeypatch.setattr(check, "ROOT", tmp_path)
    po = _compiled(_catalogue(tmp_path, 'msgid "Balance"\nmsgstr "余额"\n'))
    assert check.catalogue_problems(po) == []


@needs_gettext
@pytest.mark.parametrize(
    ("entries", "says"),
    [
        ('msgid "Balance"\nmsgstr ""\n', "untranslated"),
        ('#, fuzzy\nmsgid "Balance"\nmsgstr "余额"\n', "fuzzy"),
        ('msgid "%(n)s GPUs"\nmsgstr "GPU"\n', "msgfmt failed"),  # a placeholder lost
    ],
)
def test_an_incomplete_or_broken_catalogue_fails(tmp_path, monkeypatch, entries, says):
    monkeypatch.setattr(check, "ROOT", tmp_path)
    po = _catalogue(tmp_path, "#, python-format\n" + entries if "%(" in entries else entries)
    if says != "msgfmt failed":
        subprocess.run(["msgfmt", "-o", str(po.with_suffix(".mo")), str(po)], check=True)  # noqa: S603, S607
    problems = check.catalogue_problems(po)
    assert problems and says in problems[0]


@needs_gettext
def test_a_stale_mo_fails(tmp_path, monkeypatch):
    monkeypatch.setattr(check, "ROOT", tmp_path)
    po = _compiled(_catalogue(tmp_path, 'msgid "Balance"\nmsgstr "余额"\n'))
    po.write_text(po.read_text(encoding="utf-8").replace("余额", "结余"), encoding="utf-8")
    (problem,) = check.catalogue_problems(po)
    assert "is not what django.po compiles to" in problem
