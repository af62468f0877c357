"""`python tests/house_figures.py [REV]`: the house plan's figures, for the working tree or a git revision (quoted
in docs/results/2026-12-05-patch-table.md): rftkit's import floors (the longest chain of imports inside it) and
arrows (imports between its modules), the RFTKIT_* switches and the files that read one, and, for the working
tree, the table of runtime patches."""

import ast
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from rftkit.example import REPO


def figures(root: Path) -> dict:
    files = {p: ast.parse(p.read_text()) for p in (root / "rftkit").rglob("*.py")}

    def name(path: Path) -> str:
        parts = path.relative_to(root).with_suffix("").parts
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    modules = {name(p): p for p in files}
    graph = {}
    for path, tree in files.items():
        found = set()
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [f"{node.module}.{a.name}" for a in node.names] if isinstance(node, ast.ImportFrom) and node.module \
                else []
            for imported in names:
                while imported and imported not in modules:
                    imported = imported.rpartition(".")[0]
                if imported and imported != name(path):
                    found.add(imported)
        graph[name(path)] = found
    depth: dict[str, int] = {}

    def floors(module: str, seen=()) -> int:
        if module not in depth:
            depth[module] = 1 + max((floors(m, seen + (module,)) for m in graph[module] if m not in seen), default=0)
        return depth[module]

    code = "\n".join(p.read_text() for folder in ("rftkit", "runkit", "experiments")
                     for p in (root / folder).rglob("*.py"))
    return {"rftkit modules": len(graph), "import floors": max(map(floors, graph)),
            "import arrows": sum(map(len, graph.values())),
            "RFTKIT_ switches": len(set(re.findall(r"RFTKIT_[A-Z_]+", code))),
            "files reading a switch": sum("os.environ" in p.read_text() and "RFTKIT_" in p.read_text()
                                          for folder in ("rftkit", "runkit") for p in (root / folder).rglob("*.py"))}


def patch_figures() -> dict:
    """The table's own count (this tree only): patches, attributes replaced, guard texts, the installers' files."""
    from rftkit.patches import PATCHES

    return {"patches": len(PATCHES), "attributes replaced": sum(len(p.replaces) for p in PATCHES.values()),
            "guard texts": sum(len(texts) for p in PATCHES.values() for guards in (p.replaces, p.requires)
                               for texts in guards.values()),
            "installer files": len({t.partition(":")[0] for p in PATCHES.values() for t in p.install.values()})}


if __name__ == "__main__":
    if len(sys.argv) > 1:
        with tempfile.TemporaryDirectory() as tmp:
            archive = subprocess.run(["git", "archive", sys.argv[1], "rftkit", "runkit", "experiments"], cwd=REPO,
                                     capture_output=True, check=True).stdout
            subprocess.run(["tar", "x", "-C", tmp], input=archive, check=True)
            print(figures(Path(tmp)))
    else:
        print(figures(REPO) | patch_figures())
