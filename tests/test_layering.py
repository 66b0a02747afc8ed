"""The package's layering (README "Layout"): every ``bench`` import points to the importing
module's own layer or a lower one, the top-level units import each other without a circle, and
no module imports another that (through the imports that run when a module loads) imports it
back. Imports are read from the source (inside functions and ``TYPE_CHECKING`` blocks too, for
the layers; the imports that run at load, for the circles between modules)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "bench"

#: lowest first; a module may import from its own layer and the layers before it
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("config", ("bench.errors", "bench.strict_yaml", "bench.console", "bench.determinism", "bench.registry",
                "bench.experiments", "bench.parallel", "bench.allocator", "bench.distributed", "bench.validation")),
    ("records", ("bench.records",)),
    ("data", ("bench.datasets", "bench.sampling", "bench.contracts")),
    ("model/loss", ("bench.evaluation", "bench.models", "bench.thresholds", "bench.losses")),
    ("step", ("bench.step",)),
    ("task", ("bench.tasks",)),
    ("report", ("bench.report",)),
    ("run", ("bench.loggers", "bench.resolvers", "bench.composition", "bench.run", "bench.training", "bench.sweep",
             "bench.resumable", "bench.collect")),
    ("analysis", ("bench.analysis", "bench.export", "bench.study", "bench.site", "bench.tune")),
    ("command line", ("bench.app", "bench.help", "bench", "bench.__main__")),
]
#: inside the model/loss layer, the order of its parts (losses use estimators and ranks)
SUBLAYERS = ("bench.evaluation", "bench.models", "bench.thresholds", "bench.losses")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _unit(module: str) -> str:
    """The top-level unit of a module: ``bench.losses.slk`` -> ``bench.losses``."""
    return ".".join(module.split(".")[:2])


def _rank(module: str) -> tuple[int, int]:
    if module.endswith(".__main__"):  # entry points sit on top of everything
        return len(LAYERS) - 1, 0
    unit = _unit(module)
    for i, (_, units) in enumerate(LAYERS):
        if unit in units:
            return i, SUBLAYERS.index(unit) if unit in SUBLAYERS else 0
    raise AssertionError(f"{module} is in no layer; add it to LAYERS (and to docs/reproducibility.md's layout)")


def _imports(path: Path) -> set[str]:
    """The ``bench`` modules imported by the file (absolute imports only: the project uses none other)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "bench"}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import; use bench.<...>"
            if node.module and node.module.split(".")[0] == "bench":
                out.add(node.module)
    return out


SOURCES = sorted(PACKAGE.rglob("*.py"))


def test_every_module_is_in_a_layer():
    for path in SOURCES:
        _rank(_module_name(path))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE.parent)))
def test_no_upward_import(path):
    module = _module_name(path)
    own = _rank(module)
    for target in _imports(path):
        if _unit(target) == _unit(module):
            continue
        assert _rank(target) <= own, (f"{module} ({LAYERS[own[0]][0]}) imports {target} "
                                      f"({LAYERS[_rank(target)[0]][0]}), a higher layer")


def test_no_import_circle_between_units():
    graph: dict[str, set[str]] = {}
    for path in SOURCES:
        module = _module_name(path)
        if module.endswith(".__main__") or module == "bench":
            continue
        graph.setdefault(_unit(module), set()).update(
            _unit(t) for t in _imports(path) if _unit(t) != _unit(module) and _unit(t) != "bench")
    state: dict[str, int] = {}

    def visit(unit: str, trail: list[str]) -> None:
        if state.get(unit) == 1:
            raise AssertionError("import circle: " + " -> ".join([*trail, unit]))
        if state.get(unit) == 2:
            return
        state[unit] = 1
        for nxt in sorted(graph.get(unit, ())):
            visit(nxt, [*trail, unit])
        state[unit] = 2

    for unit in sorted(graph):
        visit(unit, [])


def test_models_and_losses_meet_only_in_the_contracts():
    for path in SOURCES:
        module = _module_name(path)
        targets = {_unit(t) for t in _imports(path)}
        if _unit(module) == "bench.models":
            assert not targets & {"bench.losses", "bench.thresholds"}, module
        if _unit(module) in ("bench.losses", "bench.thresholds"):
            assert "bench.models" not in targets, module


def _module_level_imports(path: Path) -> set[str]:
    """The ``bench`` modules a file imports when it loads (top-level statements, ``TYPE_CHECKING``
    blocks left out), each resolved to the module itself where ``from package import module``."""
    out = set()
    tree = ast.parse(path.read_text(), str(path))
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for sub in ast.walk(node) if isinstance(node, (ast.If, ast.Try)) else [node]:
            if isinstance(sub, ast.Import):
                out |= {a.name for a in sub.names if a.name.split(".")[0] == "bench"}
            elif isinstance(sub, ast.ImportFrom) and sub.module and sub.module.split(".")[0] == "bench":
                for alias in sub.names:
                    candidate = f"{sub.module}.{alias.name}"
                    is_module = any(_module_name(p) == candidate for p in SOURCES)
                    out.add(candidate if is_module else sub.module)
    return out


def test_no_import_circle_between_modules():
    """Module by module, not only unit by unit: a circle inside a unit (the lock and the schema
    importing each other) makes the import order decide what exists when."""
    graph = {_module_name(p): _module_level_imports(p) - {_module_name(p)} for p in SOURCES}
    state: dict[str, int] = {}

    def visit(module: str, trail: list[str]) -> None:
        if state.get(module) == 1:
            raise AssertionError("import circle: " + " -> ".join([*trail[trail.index(module):], module]))
        if state.get(module) == 2 or module not in graph:
            return
        state[module] = 1
        for nxt in sorted(graph[module]):
            visit(nxt, [*trail, module])
        state[module] = 2

    for module in sorted(graph):
        visit(module, [])


def test_the_report_reads_records_and_never_a_checkpoint():
    """The report reads records (results, ledgers, per-user files); whatever loads a checkpoint or
    builds data sits above it (bench.analysis)."""
    for path in sorted((PACKAGE / "report").rglob("*.py")):
        if path.name == "__main__.py":
            continue
        units = {_unit(t) for t in _imports(path)}
        assert not units & {"bench.run", "bench.training", "bench.tasks", "bench.models", "bench.datasets",
                            "bench.composition", "bench.analysis"}, (path, units)


def test_a_refused_command_never_imports_lightning(tmp_path):
    """What ``python -m bench`` does before a run owns its folder (the settings' checks, the folder's
    lock, a resume's checks) imports no Lightning, PyG or plots: a refused command costs ~2 s, not ~6."""
    import subprocess
    import sys

    used = tmp_path / "used"
    used.mkdir()
    (used / "results.json").write_text('{"status": "completed"}')
    tiny = ["dataset.n_users=60", "dataset.n_items=40", "trainer.max_epochs=1"]
    for args, said in ((["resume=nowhere"], "resume=nowhere: no such run folder"),
                       ([*tiny, "optimizer.lr=-1", "hydra.run.dir=new"], "optimizer.lr=-1 is out of range"),
                       ([*tiny, "hydra.run.dir=used"], "already holds a completed run")):
        proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "bench", *args], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2 and said in proc.stderr, (args, proc.stderr[-2000:])
        imported = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines()
                    if line.startswith("import time:")}
        assert "bench.app" in imported and "bench.run" in imported, sorted(imported)[:20]
        heavy = sorted(m for m in imported if m.split(".")[0] in ("lightning", "torch_geometric", "matplotlib"))
        assert heavy == [], (args, heavy[:10])


@pytest.mark.parametrize("module, args, said", [
    ("bench.thresholds", ["run", "--ks", "0"], "argument --ks: 0 is out of range"),
    ("bench.thresholds", ["run", "--estimators", "nope"], "unknown threshold estimator 'nope'; known:"),
    ("bench.thresholds", ["run", "--out", "file.txt"], "--out file.txt is a file"),
    ("bench.export", ["run", "--k", "0"], "k=0: the list length must be a whole number >= 1"),
    ("bench.export", ["run", "--out", "file.txt"], "--out file.txt is a file"),
    ("bench.report", ["run", "--confidence", "-1"], "--confidence -1.0 is out of range: use a share in (0, 1)"),
    ("bench.report", ["run", "--out", "file.txt"], "--out file.txt is a file"),
])
def test_the_reading_commands_answer_a_bad_option_before_the_analysis_stack(tmp_path, module, args, said):
    """``bench.thresholds``, ``bench.export`` and ``bench.report`` check their options before they
    import what reads a run (Lightning, the data modules, the plots): a mistyped option costs ~0.2-2 s, not 3.5-5."""
    import subprocess
    import sys

    (tmp_path / "run").mkdir()
    (tmp_path / "file.txt").write_text("not a folder")
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", module, *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and said in proc.stderr, (module, args, proc.stderr[-2000:])
    imported = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert module in imported, sorted(imported)[:20]
    # the report's whole stack is pandas, scipy and the losses (torch); the others' is Lightning and the data
    forbidden = ("lightning", "torch_geometric", "matplotlib", "hydra") + (
        ("pandas", "scipy", "torch") if module == "bench.report" else ())
    heavy = sorted(m for m in imported if m.split(".")[0] in forbidden
                   or m.startswith(("bench.training", "bench.analysis", "bench.tasks")))
    assert heavy == [], (module, args, heavy[:10])
