"""The package's own shape: one subpackage per part of the book, every module listed in its
subpackage's docstring, every public name documented. (Unit tests of each concept live in the
test file of its module.)"""

import importlib
import inspect
import pkgutil

import pytest

import mlbook

# flash_triton: importing it may set TRITON_INTERPRET; assign: a command (`python -m
# mlbook.teaching.assign`), which runpy warns about when the package has already imported it.
EXPLICIT_ONLY = {"mlbook.attention.flash_triton", "mlbook.teaching.assign"}
SUBPACKAGES = sorted(m.name for m in pkgutil.iter_modules(mlbook.__path__) if m.ispkg)
MODULES = sorted(
    m.name
    for m in pkgutil.walk_packages(mlbook.__path__, "mlbook.")
    if not m.ispkg and m.name not in EXPLICIT_ONLY and ".exercises." not in m.name
) + sorted(EXPLICIT_ONLY)


def test_every_subpackage_and_module_is_listed():
    assert len(SUBPACKAGES) >= 5
    for sub in SUBPACKAGES:
        assert f"mlbook.{sub}" in mlbook.__doc__, f"mlbook.{sub} not in the package docstring"
        assert sub in mlbook.__all__
    for name in MODULES:
        parent, _, leaf = name.rpartition(".")
        doc = importlib.import_module(parent).__doc__ or ""
        assert leaf in doc, f"{name} is not listed in the docstring of {parent}"


@pytest.mark.parametrize("name", MODULES)
def test_every_public_name_has_a_docstring(name):
    mod = importlib.import_module(name)
    assert mod.__doc__ and mod.__doc__.strip(), f"{name} has no module docstring"
    public = getattr(mod, "__all__", None) or [n for n in dir(mod) if not n.startswith("_")]
    undocumented = [
        n
        for n in public
        if (inspect.isfunction(obj := getattr(mod, n, None)) or inspect.isclass(obj))
        and obj.__module__ == mod.__name__
        and not (obj.__doc__ or "").strip()
    ]
    assert not undocumented, f"{name}: no docstring for {undocumented}"


def test_show_source_shows_the_mathematics_without_checks():
    from mlbook.attention import dot_product
    from mlbook.teaching.notebook import source_path, teaching_source

    full = inspect.getsource(dot_product.causal_mask)
    short = teaching_source(dot_product.causal_mask)
    assert 'positive_int(T_q, "T_q")' in full and "T_q = positive_int" not in short
    assert '"""' in full and '"""' not in short
    assert "return j <= i + (T_k - T_q)" in short
    # a decorated function is found in its own file, not in the decorator's
    from mlbook.nn import optim

    step = optim.Optimizer.step  # a @torch.no_grad() method
    assert source_path(step) == "src/mlbook/nn/optim.py"
    assert "def step" in teaching_source(step)
