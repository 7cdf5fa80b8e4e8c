"""The project's packaging, CI and documentation agree with each other."""

import os
import re
import subprocess
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
CONDA_NAMES = {"pytorch": "torch"}  # conda-forge package name -> PyPI name


@pytest.fixture(scope="module")
def pyproject() -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        tomllib = pytest.importorskip("tomli", reason="reading pyproject.toml on Python 3.10 needs tomli (a dependency there)")
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


@pytest.fixture(scope="module")
def environment() -> dict:
    yaml = pytest.importorskip("yaml", reason="reading environment.yml needs PyYAML (dev extras)")
    return yaml.safe_load((ROOT / "environment.yml").read_text())


def requirements(specs) -> dict[str, str]:
    parsed = [Requirement(spec) for spec in specs]
    return {CONDA_NAMES.get(r.name, r.name).lower(): str(r.specifier) for r in parsed}


def test_environment_yml_names_the_pyproject_dependencies(pyproject, environment):
    project = pyproject["project"]
    conda = [spec for spec in environment["dependencies"] if isinstance(spec, str) and spec != "pip"]
    expected = requirements(project["dependencies"] + project["optional-dependencies"]["dev"])
    expected["python"] = project["requires-python"]
    assert requirements(conda) == expected


def test_environment_yml_installs_this_checkout_with_dev_extras(environment):
    assert environment["name"] == "rlgpu"
    pip_sections = [spec["pip"] for spec in environment["dependencies"] if isinstance(spec, dict)]
    assert pip_sections == [["-e .[dev]"]]


def test_dependencies_have_lower_bounds_only(pyproject):
    project = pyproject["project"]
    for spec in project["dependencies"] + project["optional-dependencies"]["dev"]:
        operators = {s.operator for s in Requirement(spec).specifier}
        assert operators == {">="}, spec


def test_pytest_runs_tests_and_notebooks_under_strict_nbval(pyproject):
    options = pyproject["tool"]["pytest"]["ini_options"]
    assert options["testpaths"] == ["tests", "notebooks"]
    assert {"--nbval", "--nbval-current-env", "--durations=15"} <= set(options["addopts"])
    assert "--nbval-lax" not in options["addopts"]
    timeout, = (opt for opt in options["addopts"] if opt.startswith("--nbval-cell-timeout="))
    assert 0 < float(timeout.split("=")[1]) <= 600


def test_ci_script_runs_the_readme_test_command():
    script = ROOT / ".ci" / "run"
    assert os.access(script, os.X_OK)
    lines = [line for line in script.read_text().splitlines() if line.strip() and not line.startswith("#")]
    assert lines[0] == "set -euo pipefail"
    assert "python -m pip install torch==2.13.0" in lines
    readme_commands = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
    install = 'pip install -e ".[dev,compare]"'
    assert f"python -m {install}" in lines  # the README's install, with what the notebooks compare against
    assert any(install in block.splitlines() for block in readme_commands)
    assert any(lines[-1] in block.splitlines() for block in readme_commands)
    assert lines[-1] == "pytest"
    assert ".ci/versions" in lines  # the unit tests on the other versions, before the main run


def test_ci_tests_the_declared_floor_of_python_and_of_every_dependency(pyproject):
    """.ci/versions reads the floor from pyproject.toml: every lower bound of the package and of its unit tests' tools."""
    script = ROOT / ".ci" / "versions"
    assert os.access(script, os.X_OK)
    pins = subprocess.run([str(script), "floor-pins"], capture_output=True, text=True, check=True).stdout.splitlines()
    project = pyproject["project"]
    tools = [spec for spec in project["optional-dependencies"]["dev"] if spec.startswith(("pytest>", "hypothesis>"))]
    expected = {"python": project["requires-python"]} | requirements(project["dependencies"] + tools)
    assert {name: ">=" + version for name, version in (pin.split(";")[0].split("==") for pin in pins)} == expected
    assert len(pins) == len(expected)
    # a dependency with an environment marker keeps it: pip installs it only where it applies
    markers = {spec.split(";")[0].split(">=")[0]: spec.split(";", 1)[1].strip()
               for spec in project["dependencies"] if ";" in spec}
    for pin in pins:
        name = pin.split("==")[0]
        if name in markers:
            assert pin.split(";", 1)[1].strip() == markers[name], pin

