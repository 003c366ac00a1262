"""The package's own shape: every module documented, exported and listed; every public name
documented. (Unit tests of each concept live in the test file of its module.)"""

import importlib
import inspect
import pkgutil

import pytest

import mlbook

# flash_triton: importing it may set TRITON_INTERPRET; assign: a command (`python -m
# mlbook.teaching.assign`), which runpy warns about when the package has already imported it.
EXPLICIT_ONLY = {"flash_triton", "assign"}
MODULES = sorted(
    m.name for m in pkgutil.iter_modules(mlbook.__path__) if not m.name.startswith("_")
)  # _validation: private argument checks


def test_every_module_is_listed_and_exported():
    for name in MODULES:
        assert f"mlbook.{name}" in mlbook.__doc__, f"mlbook.{name} not in the package docstring"
        if name not in EXPLICIT_ONLY:
            assert hasattr(mlbook, name) and name in mlbook.__all__, f"mlbook.{name} not exported"


@pytest.mark.parametrize("name", MODULES)
def test_every_public_name_has_a_docstring(name):
    mod = importlib.import_module(f"mlbook.{name}")
    assert mod.__doc__ and mod.__doc__.strip(), f"mlbook.{name} has no module docstring"
    public = getattr(mod, "__all__", None) or [n for n in dir(mod) if not n.startswith("_")]
    undocumented = [
        n
        for n in public
        if (inspect.isfunction(obj := getattr(mod, n, None)) or inspect.isclass(obj))
        and obj.__module__ == mod.__name__
        and not (obj.__doc__ or "").strip()
    ]
    assert not undocumented, f"mlbook.{name}: no docstring for {undocumented}"
