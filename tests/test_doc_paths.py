"""Every repository path the docs name exists, and every link between them lands (issue 63).

A doc that names a moved or deleted file sends its reader nowhere, and nothing else notices:
the code's tests pass and the doc stays wrong. Scanned: README.md, BENCHMARKS.md, docs/*.md and
benchmarks/*.md, outside fenced code blocks. Checked:

- links `[text](target)` to a file or folder, resolved against the doc's own folder (as GitHub
  renders them), and their `#anchor` against the headings of the doc they point to;
- paths in inline code (`core/runs.py`, `configs/sweep/quick.yaml`, `benchmarks/`), resolved
  against the repository root when they start with one of its top-level entries; a path with a
  suffix of `SUFFIXES` that starts elsewhere (`objectives/base.py`, `gbdt/search.py`, a bare
  `loop.py`) must end some file of the repository, since the docs name modules by their tail
  inside a package's paragraph.

Not repository paths, and left alone: run folders (`runs/...`), absolute and home paths,
`../shared/...` (the data beside the checkout), URLs, placeholders (`<name>`), globs and shell
(`*`, `$`, `{...}`), options (`--out`), the files a run writes (`config.yaml`) and the user's
own in examples (`my.yaml`, `path/to/...`).
"""

from __future__ import annotations

import os
import re
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Folders of the checkout that hold no repository files (a run's output, environments, caches).
NOT_TRACKED = {
    ".git",
    ".venv",
    "runs",
    "build",
    "dist",
    "wandb",
    "__pycache__",
    ".pytest_cache",
    ".ruff_cache",
    ".mypy_cache",
    "scarce_ltr.egg-info",
}
SUFFIXES = (".py", ".yaml", ".yml", ".md", ".sh", ".toml")
# Files a run or a sweep writes, named in inline code like a module but never in the repository.
RUN_FILES = {"config.yaml"}
NOT_A_PATH = re.compile(r"[<>*?$|{}]|\.\.\.|://")
NOT_A_PATH_START = (
    "/",
    "~",
    "-",
    "runs/",
    ".venv/",
    "../shared",
    "shared/",
    "http:",
    "https:",
    "path/to/",
)
# The user's own files in examples (`--config my.yaml`, `path/to/my-sweep.yaml`).
USERS_FILE = ("my.", "my-", "my_")
LINK = re.compile(r"\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE_SPAN = re.compile(r"(`+)(.+?)(?<!`)\1(?!`)", re.S)


def docs() -> list[Path]:
    found = [ROOT / "README.md", ROOT / "BENCHMARKS.md"]
    found += sorted((ROOT / "docs").glob("*.md")) + sorted((ROOT / "benchmarks").glob("*.md"))
    return [path for path in found if path.is_file()]


def repository_files() -> list[str]:
    """Every file and folder under the root, as '/'-joined paths, the untracked folders pruned."""
    out: list[str] = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in NOT_TRACKED and not d.startswith(".")]
        rel = Path(folder).relative_to(ROOT).as_posix()
        prefix = "" if rel == "." else rel + "/"
        out += [prefix + name for name in files] + [prefix + name + "/" for name in dirs]
    return out


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped (not - or _), spaces to -."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    kept = (
        ch for ch in text if ch in "-_ " or ch.isalnum() or unicodedata.category(ch).startswith("M")
    )
    return "".join(kept).replace(" ", "-")


def prose_lines(text: str) -> list[str]:
    """The doc's lines with fenced code blocks blanked (line numbers kept)."""
    lines = text.split("\n")
    fence = None
    for i, line in enumerate(lines):
        mark = re.match(r"\s*(```+|~~~+)", line)
        if fence is None and mark:
            fence, lines[i] = mark.group(1)[:3], ""
        elif fence is not None:
            if line.strip().startswith(fence):
                fence = None
            lines[i] = ""
    return lines


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in prose_lines(path.read_text(encoding="utf-8")):
        heading = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            base = slug(heading.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def paragraphs(text: str) -> list[tuple[int, str]]:
    """(first line number, text) of each paragraph: a code span never crosses a blank line."""
    out, start, block = [], 1, []
    for number, line in enumerate(prose_lines(text) + [""], 1):
        if line.strip():
            if not block:
                start = number
            block.append(line)
        elif block:
            out.append((start, "\n".join(block)))
            block = []
    return out


def code_paths(span: str) -> list[tuple[int, str]]:
    """(line offset in the span, token) of each path-like token of an inline code span."""
    out = []
    for offset, line in enumerate(span.split("\n")):
        for word in line.split():
            for token in word.split("="):
                token = token.strip("\"'()[],;:").split("::")[0]
                if token.endswith(".") and not token.endswith(".."):
                    token = token[:-1]
                if not token or NOT_A_PATH.search(token) or token.startswith(NOT_A_PATH_START):
                    continue
                if token.rsplit("/", 1)[-1].startswith(USERS_FILE):
                    continue
                if "/" in token or token.endswith(SUFFIXES):
                    out.append((offset, token))
    return out


class Checker:
    def __init__(self) -> None:
        self.files = repository_files()
        self.top = {path.split("/")[0] for path in self.files}
        self.anchor_cache: dict[Path, set[str]] = {}

    def code_path_problem(self, token: str) -> str | None:
        first = token.split("/")[0]
        if first in self.top:
            path = ROOT / token
            if path.exists():
                return None
            # `tests/tiny.fork_or_skip`: an attribute of a module, named by its module's path.
            module, _, attribute = token.rpartition(".")
            if attribute and "/" not in attribute and (ROOT / f"{module}.py").is_file():
                return None
            return "does not exist"
        if not token.endswith(SUFFIXES) or token in RUN_FILES or token.startswith("."):
            return None
        tail = token.rstrip("/")
        if any(path == tail or path.endswith("/" + tail) for path in self.files):
            return None
        return "is no file of the repository"

    def link_problem(self, doc: Path, target: str) -> str | None:
        if "://" in target or target.startswith(("mailto:", "http:", "https:")):
            return None
        path_part, _, fragment = target.partition("#")
        path = (doc.parent / path_part).resolve() if path_part else doc
        if path_part and ROOT not in path.parents and path != ROOT:
            return None  # beside the checkout (../shared): not the repository's to check
        if not path.exists():
            return "does not exist"
        if fragment and path.suffix == ".md":
            if path not in self.anchor_cache:
                self.anchor_cache[path] = anchors(path)
            if fragment.lower() not in self.anchor_cache[path]:
                return f"has no heading for #{fragment}"
        return None

    def problems(self, doc: Path, name: str | None = None) -> list[str]:
        """'<doc>:<line>: <what>' for each stale path or link of the doc."""
        name = name or doc.relative_to(ROOT).as_posix()
        out = []
        for start, block in paragraphs(doc.read_text(encoding="utf-8")):
            prose = block
            for span in CODE_SPAN.finditer(block):
                line = start + block.count("\n", 0, span.start(2))
                for offset, token in code_paths(span.group(2)):
                    problem = self.code_path_problem(token)
                    if problem:
                        out.append(f"{name}:{line + offset}: `{token}` {problem}")
                # A link's target inside code is no link.
                prose = prose.replace(span.group(0), " " * len(span.group(0)), 1)
            for link in LINK.finditer(prose):
                line = start + prose.count("\n", 0, link.start())
                problem = self.link_problem(doc, link.group(1))
                if problem:
                    out.append(f"{name}:{line}: link ({link.group(1)}) {problem}")
        return out


def test_every_path_and_link_a_doc_names_exists() -> None:
    checker = Checker()
    problems = [problem for doc in docs() for problem in checker.problems(doc)]
    assert not problems, "stale paths in the docs:\n" + "\n".join(problems)


def test_the_scan_reads_code_spans_links_and_anchors(tmp_path: Path) -> None:
    """The rules on a made-up doc: what is a path, what is not, and an anchor that is missing."""
    doc = tmp_path / "x.md"
    doc.write_text(
        "# A heading, with `code` (and 2026-11-27)\n\n"
        "`core/runs.py` and `core/nothing_here.py`, `runs/synthetic/seed=0`, `configs/<x>.yaml`,\n"
        "`configs/baseline/*.yaml`, `data.path=../shared/data/x`, `objectives/base.py`,\n"
        "`gone.py`, `config.yaml`, `tests/tiny.fork_or_skip`, `./run.sh sweep quick`,\n"
        "`--config my.yaml`.\n\n"
        "```bash\n`core/fenced_away.py`\n```\n"
        "[up](#a-heading-with-code-and-2026-11-27) [down](#no-such-heading) [web](https://x.org)\n",
        encoding="utf-8",
    )
    problems = [p.split(": ", 1)[1] for p in Checker().problems(doc, name="x.md")]
    assert problems == [
        "`core/nothing_here.py` does not exist",
        "`gone.py` is no file of the repository",
        "link (#no-such-heading) has no heading for #no-such-heading",
    ], problems
