"""The package shows the course: every module names its lesson and is on the lesson map."""

import importlib
import pkgutil
import re

import pytest

import rlgpu_helpers


def package_modules():
    return [info for info in pkgutil.walk_packages(rlgpu_helpers.__path__, "rlgpu_helpers.")
            if not info.name.endswith("__main__")]


@pytest.mark.parametrize("info", [i for i in package_modules() if not i.ispkg], ids=lambda info: info.name)
def test_every_module_docstring_names_the_notebook_that_introduces_it(info):
    doc = importlib.import_module(info.name).__doc__ or ""
    assert re.search(r"notebooks? \d\d", doc), f"{info.name}: its docstring names no notebook"


def test_every_module_is_on_its_package_list_and_the_lesson_map():
    for info in package_modules():
        if info.ispkg or info.name == "rlgpu_helpers.cli":
            continue
        package, module = info.name.removeprefix("rlgpu_helpers.").rsplit(".", 1)
        listed = importlib.import_module(f"rlgpu_helpers.{package}").__doc__
        assert re.search(rf"``{module}``: .*\(\d\d", listed), f"{info.name} missing from {package}/__init__"
        assert f"{package}.{module}" in rlgpu_helpers.__doc__, f"{info.name} missing from the lesson map"
