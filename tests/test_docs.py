"""The docs' pointers into code still point at something.

The project's own code is cited as `path.py::name` (a function, a class, or `Class.method`, nested names
dotted), which survives edits that line numbers do not. Installed packages are cited by file and line, for the
versions a page says it was read against: those must be the versions installed.
"""

import ast
import re
from importlib.metadata import version

import pytest

from conftest import REPO

PAGES = sorted([*REPO.glob("*.md"), *REPO.glob("*/README.md"), *(REPO / "docs").rglob("*.md")])
CITATION = re.compile(r"`([\w/]+\.py)::([\w.]+)`")


def defined_names(path) -> set[str]:
    """Every function and class in a module, nested ones dotted below their parent."""
    names = set()

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(prefix + child.name)
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(path.read_text()), "")
    return names


def citations() -> list[tuple]:
    """(page, path, name) for every `path.py::name` in the docs."""
    return [(page.relative_to(REPO), *match.groups())
            for page in PAGES for match in CITATION.finditer(page.read_text())]


def test_the_run_files_page_cites_the_project_by_name_only():
    """No `rftkit/...py:LINE`: such a pointer drifts with the next edit above it."""
    text = (REPO / "docs" / "run-files.md").read_text()
    assert not re.findall(r"`(?:rftkit|runkit|scripts|experiments)/[\w/]+\.py:\d", text)
    assert len([c for c in citations() if str(c[0]) == "docs/run-files.md"]) >= 30


@pytest.mark.parametrize("page,path,name", citations(), ids=lambda value: str(value))
def test_each_citation_names_a_function_or_class_in_its_file(page, path, name):
    assert (REPO / path).is_file(), f"{page}: {path} does not exist"
    assert name in defined_names(REPO / path), f"{page}: {path} defines no {name}"


def test_the_installed_packages_are_those_the_run_files_page_was_read_against():
    text = (REPO / "docs" / "run-files.md").read_text()
    for package, label in (("trinity-rft", "Trinity-RFT"), ("verl", "verl"), ("transformers", "transformers"),
                           ("ray", "ray")):
        read = re.search(rf"{label} (\d+\.\d+\.\d+)", text)
        assert read, f"docs/run-files.md names no {label} version"
        assert version(package) == read.group(1), (
            f"docs/run-files.md was read against {label} {read.group(1)}, {version(package)} is installed: "
            "check its file:line citations against the new version, then update the version it names")
