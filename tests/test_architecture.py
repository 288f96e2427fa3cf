"""The package's shape: layers import downwards only, no cycle between subpackages, no import
circle between modules when the entry points run, and a wheel built from the checkout works on
its own (configs inside, nothing generic installed)."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "scarce_ltr"
# Bottom to top (docs/architecture.md): a module imports from its own layer or below.
LAYERS = (
    "core", "search", "data", "losses", "pretrain", "finetune", "trees", "baselines", "models",
    "ensembles", "families", "serving", "reports", "sweeps", "api", "cli",
)  # fmt: skip
NOT_PACKAGE = ("tests", "benchmarks", "docs", "configs", ".venv", "runs", "build", ".git")


def package_modules() -> dict[str, Path]:
    """``scarce_ltr.<dotted name>`` -> file, for every module of the package in the checkout."""
    modules = {}
    for path in sorted(ROOT.rglob("*.py")):
        relative = path.relative_to(ROOT)
        if relative.parts[0] in NOT_PACKAGE or relative.parts[0].startswith("."):
            continue
        parts = list(relative.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join([PACKAGE, *parts])] = path
    return modules


def imports_of(path: Path, module: str, *, prefix: str = PACKAGE) -> set[str]:
    """Every ``<prefix>.*`` module that ``path`` imports, at any depth (lazy imports too)."""
    found = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the importing package
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            found.add(name)
            found |= {f"{name}.{alias.name}" for alias in node.names}
    return {name for name in found if name == prefix or name.startswith(f"{prefix}.")}


def layer_of(module: str) -> str | None:
    """The layer of ``scarce_ltr.<layer>...``; None for the package itself and ``__main__``."""
    parts = module.split(".")
    if len(parts) > 1 and parts[1].startswith("cli_"):  # cli.py's own modules: cli_compose ...
        return "cli"
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else None


def import_graph() -> dict[str, set[str]]:
    modules = package_modules()
    return {
        module: {m for m in imports_of(path, module) if m in modules}
        for module, path in modules.items()
    }


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """``a -> b`` for every import of a higher layer's module from a lower layer's."""
    bad = []
    for module, targets in graph.items():
        here = layer_of(module)
        if here is None:
            continue
        for target in sorted(targets):
            there = layer_of(target)
            if there is not None and LAYERS.index(there) > LAYERS.index(here):
                bad.append(f"{module} -> {target}")
    return bad


def package_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Cycles between top-level subpackages (a depth-first search over their graph)."""
    edges: dict[str, set[str]] = {}
    for module, targets in graph.items():
        source = layer_of(module)
        for target in targets:
            sink = layer_of(target)
            if source and sink and source != sink:
                edges.setdefault(source, set()).add(sink)
    cycles, state = [], {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                cycles.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = "closed"

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    return cycles


def test_every_layer_imports_downwards_only() -> None:
    graph = import_graph()
    assert len(graph) > 60 and all(layer_of(m) for m in graph if m.count(".") > 1)
    assert upward_imports(graph) == []


def test_nothing_is_imported_by_its_bare_name() -> None:
    """``import data.x`` would pick up whatever ``data`` the working directory holds."""
    bare = [
        f"{module}: {name}"
        for module, path in package_modules().items()
        for layer in LAYERS
        for name in imports_of(path, module, prefix=layer)
    ]
    for test in sorted((ROOT / "tests").glob("*.py")) + sorted((ROOT / "benchmarks").glob("*.py")):
        bare += [
            f"{test.name}: {n}" for layer in LAYERS for n in imports_of(test, "", prefix=layer)
        ]
    assert bare == []


def test_no_cycle_between_subpackages() -> None:
    assert package_cycles(import_graph()) == []


def test_reports_load_no_sweeps_module_at_run_time() -> None:
    """``reports`` reads what a sweep wrote, as files: importing each of its modules in a fresh
    interpreter loads no ``sweeps`` module (``sweeps`` calls ``reports``, never the reverse)."""
    modules = sorted(m for m in package_modules() if m.startswith(f"{PACKAGE}.reports"))
    script = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        f"print(sorted(m for m in sys.modules if m.startswith('{PACKAGE}.sweeps')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    assert len(modules) > 5 and done.stdout.strip() == "[]"


def test_the_checks_catch_what_they_look_for() -> None:
    """The two checks above fail on a graph that breaks their rule."""
    graph = {
        "scarce_ltr.core.metrics": {"scarce_ltr.data.pipeline"},  # core reaching up into data
        "scarce_ltr.data.pipeline": {"scarce_ltr.core.metrics"},
        "scarce_ltr.finetune.train": {"scarce_ltr.pretrain.encoders"},
    }
    assert upward_imports(graph) == ["scarce_ltr.core.metrics -> scarce_ltr.data.pipeline"]
    assert package_cycles(graph) == [["core", "data", "core"]]


def module_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The import circles between modules: each strongly connected set of two or more modules
    (Tarjan), sorted. A module importing its own package (``a.b.c -> a.b``, which Python does
    before it imports ``a.b.c``) is no circle and is left out."""
    graph = {
        source: {t for t in targets if t != source and not source.startswith(f"{t}.")}
        for source, targets in edges.items()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            members = stack[stack.index(node) :]
            del stack[stack.index(node) :]
            if len(members) > 1:
                cycles.append(sorted(members))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(cycles)


# Run in a child process: every ``scarce_ltr`` import executed (at the top of a module or inside
# a function) while the entry points are imported and every named config of every stage is
# composed (a config's checks import what they check against: `trees.tuning` the strategies).
TRACE_IMPORTS = """
import builtins, json, sys
edges = {}
real_import = builtins.__import__

def traced(name, globals=None, locals=None, fromlist=(), level=0):
    module = real_import(name, globals, locals, fromlist, level)
    source = (globals or {}).get("__name__") or ""
    if level:
        package = (globals or {}).get("__package__") or source
        base = package.rsplit(".", level - 1)[0] if level > 1 else package
        name = f"{base}.{name}" if name else base
    if source.startswith("scarce_ltr") and name.startswith("scarce_ltr"):
        found = edges.setdefault(source, set())
        found.add(name)
        found |= {f"{name}.{item}" for item in fromlist or () if f"{name}.{item}" in sys.modules}
    return module

builtins.__import__ = traced
import scarce_ltr.api.estimators
from scarce_ltr import cli, cli_compose
from scarce_ltr.core.config import available
for stage in cli.STAGES.values():
    stage.entry()
    for name in available(stage.config_folder) if stage.config_folder else ():
        try:
            cli_compose.compose_named(stage, name)
        except Exception:  # a config that needs a key (a path) still ran its imports
            pass
print(json.dumps({source: sorted(targets) for source, targets in edges.items()}))
"""


def test_no_import_circle_when_the_entry_points_run() -> None:
    """No two modules import each other, directly or through others, when the command line, the
    estimators and every stage are imported and every named config is composed; imports inside
    functions count (`baselines.searches` <-> `baselines.tuning` was such a circle)."""
    env = {**os.environ, "WANDB_MODE": "disabled"}
    done = subprocess.run(
        [sys.executable, "-c", TRACE_IMPORTS], capture_output=True, text=True, env=env,
        timeout=300, check=True,
    )  # fmt: skip
    edges = {k: set(v) for k, v in json.loads(done.stdout.splitlines()[-1]).items()}
    seen = {"scarce_ltr.cli", "scarce_ltr.trees.tuning", "scarce_ltr.search.trials"}
    assert seen <= set(edges)  # the trace saw the stages run their imports
    assert module_cycles(edges) == []


def test_the_search_room_is_in_no_import_circle() -> None:
    """Read from the files (lazy and ``TYPE_CHECKING`` imports too): no circle passes through
    `search` or the tree pipeline that uses it."""
    tied = ("scarce_ltr.search", "scarce_ltr.trees.tree_run", "scarce_ltr.trees.tuning")
    cycles = module_cycles(import_graph())
    assert [c for c in cycles if any(m.startswith(tied) for m in c)] == []


# Import circles allowed, read from the files: none. Each one a module's functions or annotations
# closed was broken by moving the shared piece down or typing against a base (issue 50): the
# formats type the data section as `data.formats.base.DataKeys`, the CatBoost and XGBoost
# `main`s take a `trees.tree_run.TreeRunConfig` (`section_of`), teacher and loop share
# `LabelSetting.trained_groups`, the executors type the sweep config as `ExecutorChoice`, the
# report's number texts live in `reports.number_text` and its figures take keyword options. A
# circle added here needs its reason beside it.
ALLOWED_CYCLES: list[list[str]] = []


def test_no_import_circle_in_the_package_files() -> None:
    """Every module of the package, read from its file with its lazy (function-level) and
    ``TYPE_CHECKING`` imports: no two import each other, directly or through others, beyond
    `ALLOWED_CYCLES`. The traced test above sees only what the entry points run; this one also
    sees an import inside a function no entry point calls, and an annotation's."""
    graph = import_graph()
    assert len(graph) > 100 and "scarce_ltr.data.formats.table" in graph
    assert module_cycles(graph) == ALLOWED_CYCLES


def test_module_cycles_finds_circles_and_only_them() -> None:
    edges = {
        "scarce_ltr.a.x": {"scarce_ltr.a", "scarce_ltr.a.y"},  # its own package: no circle
        "scarce_ltr.a.y": {"scarce_ltr.b.z"},
        "scarce_ltr.b.z": {"scarce_ltr.a.x"},
        "scarce_ltr.a": {"scarce_ltr.a.x"},
        "scarce_ltr.c": {"scarce_ltr.a.x"},
    }
    assert module_cycles(edges) == [["scarce_ltr.a.x", "scarce_ltr.a.y", "scarce_ltr.b.z"]]
    del edges["scarce_ltr.b.z"]
    assert module_cycles(edges) == []


def test_lazy_and_relative_imports_are_seen(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        "def f():\n    from scarce_ltr.sweeps import report\n\nfrom . import metrics\n"
    )
    found = imports_of(source, "scarce_ltr.core.m")
    assert {"scarce_ltr.sweeps.report", "scarce_ltr.core.metrics"} <= found


def test_no_generic_top_level_names_are_installed() -> None:
    top_level = {p.name for p in Path(sysconfig.get_paths()["purelib"]).iterdir()}
    assert not {"core", "data", "pretrain", "finetune", "baselines", "experiments"} & top_level


@pytest.mark.skipif(os.name != "posix", reason="venv layout")
def test_a_wheel_installs_and_runs_from_a_folder_holding_core_and_data(tmp_path: Path) -> None:
    """``pip install`` of a wheel (not editable) into a fresh virtual environment gives a
    ``scarce-ltr`` that finds its configs, even run from a folder with ``core/`` and ``data/``."""
    source = tmp_path / "source"  # a copy: building in place would leave build/ in the checkout
    skip = shutil.ignore_patterns(".venv", ".git", "runs", ".cache", "build", "*.egg-info", "wandb")
    shutil.copytree(ROOT, source, ignore=skip)
    wheels = tmp_path / "wheels"
    build = [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation"]
    subprocess.run([*build, "-w", str(wheels), "-q"], check=True, capture_output=True, timeout=300)
    (wheel,) = wheels.glob("scarce_ltr-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "scarce_ltr/configs/data/synthetic.yaml" in names
    assert "scarce_ltr/reports/interactive.js" in names  # the dashboard's script, package data
    assert not [n for n in names if n.split("/")[0] not in (PACKAGE,) and ".dist-info" not in n]

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    # The dependencies (torch, lightgbm, ...) come from this environment's site-packages through
    # a path entry; its .pth files (the checkout's editable install) are not processed there.
    (site,) = venv.glob("lib/python*/site-packages")
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    install = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install"]
    subprocess.run([*install, "--no-deps", "-q", str(wheel)], check=True, timeout=300)

    work = tmp_path / "work"
    for shadow in ("core", "data"):  # a user's own folders, named like the old top-level names
        (work / shadow).mkdir(parents=True)
        (work / shadow / "__init__.py").write_text("raise ImportError('shadowed')\n")
    env = {
        **os.environ,
        "PYTHONPATH": "",
        "LTR_RUNS_DIR": str(work / "runs"),
        "LTR_CACHE_DIR": str(work / "cache"),
        "WANDB_MODE": "disabled",
    }

    def cli(*args: str) -> subprocess.CompletedProcess:
        command = [str(venv / "bin" / "scarce-ltr"), *args]
        return subprocess.run(command, cwd=work, env=env, capture_output=True, text=True)

    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import scarce_ltr; print(scarce_ltr.__file__)"],
        cwd=work, env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert str(site) in where.stdout

    info = cli("data-info", "data.synthetic.n_train_groups=30", "data.synthetic.n_features=8")
    assert info.returncode == 0, info.stderr
    assert "train" in info.stdout
    tiny = ["data.synthetic.n_train_groups=30", "data.synthetic.n_features=8", "logger=none"]
    pretrain = cli("pretrain", "simclr-rank", "epochs=1", "item_budget=200", *tiny)
    assert pretrain.returncode == 0, pretrain.stderr
    runs = list((work / "runs").rglob("encoder.pt"))
    assert len(runs) == 1 and (runs[0].parent / "DONE").is_file()
    report = (runs[0].parent / "report.json").read_text()
    assert '"git": null' in report  # an installed package is not a git checkout


def test_every_subpackage_ships_in_the_wheel() -> None:
    """pyproject.toml lists the packages one by one (the root is the package): a new folder
    left out of the list would be missing from an installed package."""
    listed = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    found = [name for name, path in package_modules().items() if path.name == "__init__.py"]
    assert sorted(found) == sorted(listed)
