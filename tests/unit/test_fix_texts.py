"""Every fix gpuroom prints is a command the user can paste: no HOST or JOB where the code
knows them, no verb the CLI does not have.

The fix texts are found in the source, not in a list kept by hand: the second argument of a
``...Error(message, fix)``, any ``fix=`` keyword, a ``Finding``'s sixth, the values of the
``FIX``/``*_FIX`` tables, and whatever follows "Fix:" in a string. Every ``gpuroom VERB [SUB]``
in any string a user sees (help and docstrings aside) must name a verb of the parser
``gpuroom.tui.cli.main.build_parser`` builds.
"""

from __future__ import annotations

import argparse
import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from paths import ROOT

from gpuroom.tui.cli.main import build_parser

SOURCES = sorted(p for d in ("tui", "remote", "profiles", "widgets")
                 for p in (ROOT / d).rglob("*.py"))
FIELD = "{}"  # an f-string's {value}: the code fills it in, so it is never a placeholder
PLACEHOLDER = re.compile(r"(?<![\w{-])(?:HOST|JOB|<[a-z][a-z _-]*>)(?![\w}])")
# A phrase ending in ":" is a program's prefix on its own message ("gpuroom queue logs: ...").
COMMAND = re.compile(r"(?<![\w./-])gpuroom((?: [a-z][a-z0-9-]*)+)(?![\w:-])")
# Words that follow "gpuroom" in a sentence about it, never a verb of the CLI.
PROSE = {"and", "can", "checkpoint", "config", "did", "does", "edits", "expects", "for", "has",
         "is", "keys", "job", "jobs", "keeps", "lists", "never", "replaced", "restarts", "runs",
         "says", "sees", "shows", "starts", "uses", "was", "will", "writes"}
# Keywords whose text is usage or a program's name, written for every host at once.
GENERIC_KEYWORDS = {"help", "description", "epilog", "metavar", "prog", "usage"}
# Fix texts whose HOST or <...> is generic on purpose: (file, words in the fix). Each says why.
ALLOWED = {
    # A placeholder the user fills from the Slurm docs: squeue's reason for THEIR job id.
    ("tui/present/slurm.py", "scontrol show job ID"),
}


@dataclass(frozen=True)
class Text:
    """One string as the code builds it: literal parts kept, f-string fields as {}."""

    path: str
    line: int
    text: str


def _flatten(node: ast.AST) -> str | None:
    """The string ``node`` builds, fields as {}; None when it is not built from literals."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) and isinstance(v.value, str)
                       else FIELD for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _flatten(node.left), _flatten(node.right)
        if left is None and right is None:
            return None
        return (left if left is not None else FIELD) + (right if right is not None else FIELD)
    if isinstance(node, ast.IfExp):
        parts = [t for t in (_flatten(node.body), _flatten(node.orelse)) if t is not None]
        return " | ".join(parts) if parts else None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            and node.func.attr in ("format", "join"):
        return _flatten(node.func.value)
    return None


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def _generic(tree: ast.AST) -> set[int]:
    """Nodes under a help=, metavar=, prog= ... keyword or a docstring: usage, not a fix."""
    ids = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg in GENERIC_KEYWORDS:
            ids.update(id(n) for n in ast.walk(node.value))
    return ids


def _fix_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = _name(node.func)
            if name.endswith("Error") and len(node.args) >= 2:
                yield node.args[1]
            if name == "Finding" and len(node.args) >= 6:
                yield node.args[5]
            yield from (k.value for k in node.keywords if k.arg == "fix")
        elif isinstance(node, ast.Dict):  # a box's answer: {"ok": False, ..., "fix": ...}
            yield from (v for k, v in zip(node.keys, node.values, strict=True)
                        if isinstance(k, ast.Constant) and k.value == "fix")
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if node.value is not None and any(_name(t) == "FIX" or _name(t).endswith("_FIX")
                                              for t in targets):
                values = node.value.values if isinstance(node.value, ast.Dict) \
                    else [node.value]
                yield from (v for v in values if v is not None)


def fix_texts() -> list[Text]:
    """Every fix text in the source, each once."""
    out: dict[tuple[str, int, str], Text] = {}
    for path in SOURCES:
        rel = str(path.relative_to(ROOT))
        tree = ast.parse(path.read_text(), str(path))
        generic = _generic(tree)
        for node in _fix_nodes(tree):
            text = _flatten(node)
            if text is not None:
                out[(rel, node.lineno, text)] = Text(rel, node.lineno, text)
        for node in ast.walk(tree):
            if id(node) in generic or not isinstance(node, (ast.Constant, ast.JoinedStr)):
                continue
            text = _flatten(node)
            if text is not None and "Fix:" in text:
                fix = text.split("Fix:", 1)[1]
                out[(rel, node.lineno, fix)] = Text(rel, node.lineno, fix)
    return list(out.values())


def user_strings() -> list[Text]:
    """Every string literal a user may see: docstrings and help texts aside."""
    out = []
    for path in SOURCES:
        rel = str(path.relative_to(ROOT))
        tree = ast.parse(path.read_text(), str(path))
        generic = _generic(tree)
        for node in ast.walk(tree):
            if id(node) in generic or not isinstance(node, (ast.Constant, ast.JoinedStr)):
                continue
            text = _flatten(node)
            if text is not None:
                out.append(Text(rel, node.lineno, text))
    return out


def _verbs(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def unknown_verbs(text: str, parser: argparse.ArgumentParser) -> list[str]:
    """The ``gpuroom VERB [SUB]`` phrases of ``text`` the parser would refuse."""
    bad = []
    for match in COMMAND.finditer(text):
        words = match.group(1).split()
        verbs = _verbs(parser)
        if words[0] in PROSE:
            continue
        if words[0] not in verbs:
            bad.append(f"gpuroom {words[0]}")
            continue
        subs = _verbs(verbs[words[0]])
        if subs and len(words) > 1 and words[1] not in subs and words[1] not in PROSE:
            bad.append(f"gpuroom {words[0]} {words[1]}")
    return bad


def placeholders(text: Text) -> list[str]:
    if any(text.path == path and words in text.text for path, words in ALLOWED):
        return []
    return PLACEHOLDER.findall(text.text)


# -- the scanner itself: it finds what it must, so an empty answer means something ----------

def test_the_scanner_finds_fixes_in_every_form_they_are_written() -> None:
    source = '''
class E(Exception): ...
def f(host):
    raise ConfigError(f"no host {host}", f"gpuroom pull HOST first")
    x = LinkError(host, "gone", fix="gpuroom queue start JOB")
    y = f"{host}: bad. Fix: gpuroom frobnicate {host}"
    BOOT_FIX = "gpuroom queue boot-hook <host> now"
    emit({"ok": False, "fix": "gpuroom queue ls HOST lists the jobs"})
'''
    tree = ast.parse(source)
    texts = [_flatten(n) for n in _fix_nodes(tree)]
    assert "gpuroom pull HOST first" in texts and "gpuroom queue start JOB" in texts
    assert "gpuroom queue boot-hook <host> now" in texts
    assert "gpuroom queue ls HOST lists the jobs" in texts
    parser = build_parser()
    assert unknown_verbs("run gpuroom frobnicate {} now", parser) == ["gpuroom frobnicate"]
    assert unknown_verbs("gpuroom queue florp x; gpuroom pull box", parser) == [
        "gpuroom queue florp"]
    assert unknown_verbs("gpuroom-remote queue x, gpuroom queue ls {}", parser) == []
    assert unknown_verbs("gpuroom keeps retrying; gpuroom profiles lists them", parser) == []
    assert PLACEHOLDER.findall("gpuroom pull HOST first; logs HOST JOB; <host>") == [
        "HOST", "HOST", "JOB", "<host>"]
    assert PLACEHOLDER.findall("gpuroom pull {} first; HOST2 _HOST {HOST}") == []


def test_fix_texts_are_found_in_the_real_source() -> None:
    texts = fix_texts()
    assert len(texts) > 100
    files = {t.path for t in texts}
    assert {"tui/rules/doctor.py", "tui/config.py", "tui/transport/link.py",
            "tui/rules/money.py", "remote/secrets.py"} <= files


# -- the rules ------------------------------------------------------------------------------

def test_no_fix_says_host_or_job_where_the_code_knows_them() -> None:
    found = [f"{t.path}:{t.line}: {', '.join(placeholders(t))} in {t.text!r}"
             for t in fix_texts() if placeholders(t)]
    assert found == [], "\n".join(found)


def test_no_gpuroom_command_in_any_message_says_host_or_job() -> None:
    """A suggestion inside a message or a gate item's detail is a fix too."""
    command = re.compile(r"(?<![\w./-])gpuroom(?: [a-z][a-z0-9-]*)+ (?:HOST|JOB)\b")
    found = [f"{t.path}:{t.line}: {t.text!r}" for t in user_strings()
             if command.search(t.text)]
    assert found == [], "\n".join(found)


def test_every_gpuroom_command_in_the_source_is_a_verb_of_the_cli() -> None:
    parser = build_parser()
    found = [f"{t.path}:{t.line}: {', '.join(unknown_verbs(t.text, parser))} in {t.text!r}"
             for t in user_strings() if unknown_verbs(t.text, parser)]
    assert found == [], "\n".join(found)


def test_no_fix_names_a_program_the_user_does_not_have() -> None:
    """The box's helper is remote-<sha12>.pyz under ~/.gpuroom/bin: no `gpuroom-remote`
    command exists on either side for a fix to name."""
    found = [f"{t.path}:{t.line}: {t.text!r}" for t in fix_texts()
             if "gpuroom-remote" in t.text]
    assert found == [], "\n".join(found)


@pytest.mark.parametrize("path", ["README.md", "docs/ARCHITECTURE.md"])
def test_every_gpuroom_command_in_the_docs_is_a_verb_of_the_cli(path: str) -> None:
    parser = build_parser()
    text = (ROOT / path).read_text()
    found = [f"{path}: {phrase}" for phrase in unknown_verbs(text, parser)]
    assert found == [], "\n".join(found)
