"""The Spack recipe in scripts/packaging is checked offline against pyproject.toml.

``scripts/packaging/check-spack`` reads the recipe with ``ast`` (Spack is not installed here);
these tests run it on the shipped files, then on copies with one thing wrong each, which it
must name with file and line.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "scripts" / "packaging" / "check-spack"
RECIPE = ROOT / "scripts/packaging/spack/spack_repo/zotsink/packages/zotsink/package.py"


def check_spack(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHECK), *args], capture_output=True, text=True, timeout=60
    )


def test_the_shipped_recipe_matches_pyproject() -> None:
    r = check_spack()
    assert r.returncode == 0, r.stderr
    version = re.search(r'^version = "(.*)"', (ROOT / "pyproject.toml").read_text(), re.M)
    assert version is not None
    assert f"check-spack: OK: zotsink {version.group(1)} as in pyproject.toml" in r.stderr
    assert "py-click@8.1:, py-filelock@3.16:" in r.stderr


@pytest.mark.parametrize(
    ("recipe_edit", "pyproject_edit", "message"),
    [
        (("version(\"0.2.0\"", "version(\"0.3.0\""), None,
         r"package\.py:\d+: version '0\.3\.0': pyproject\.toml says '0\.2\.0'"),
        (("sha256=\"da8a", "sha256=\"ea8a"), None,
         r"package\.py:\d+: sha256 ea8a\w+ differs from the easyconfig's da8a"),
        (("    depends_on(\"py-filelock@3.16:\", type=(\"build\", \"run\"))\n", ""), None,
         r"package\.py:\d+: missing depends_on\('py-filelock@3\.16:'\)"),
        (("depends_on(\"python@3.9:\"", "depends_on(\"python@3.8:\""), None,
         r"package\.py:\d+: depends_on\('python@3\.8:'\) is not in pyproject\.toml"),
        (("depends_on(\"py-click@8.1:\", type=(\"build\", \"run\"))",
          "depends_on(\"py-click@8.1:\", type=\"build\")"), None,
         r"package\.py:\d+: depends_on\('py-click@8\.1:'\) type \['build'\]: "
         r"want \['build', 'run'\]"),
        (("class Zotsink(", "class PyZotsink("), None,
         r"package\.py:\d+: class PyZotsink\(PythonPackage\): want Zotsink\(PythonPackage\)"),
        (("pypi = \"zotsink/zotsink-0.2.0.tar.gz\"", "pypi = \"zotsink/zotsink-0.0.9.tar.gz\""),
         None, r"package\.py:\d+: pypi = 'zotsink/zotsink-0\.0\.9\.tar\.gz'"),
        (None, ("    \"filelock>=3.16\",\n", "    \"filelock>=3.16\",\n    \"psutil>=5\",\n"),
         r"package\.py:\d+: missing depends_on\('py-psutil@5:'\) for pyproject\.toml"),
        (None, ("parquet = [", "arrow = ["),
         r"package\.py:\d+: variants \['parquet'\]: pyproject\.toml's extras are \['arrow'\]"),
        (None, ('requires-python = ">=3.9"', 'requires-python = ">=3.10"'),
         r"package\.py:\d+: missing depends_on\('python@3\.10:'\)"),
    ],
)  # fmt: skip
def test_a_recipe_that_drifted_is_named_with_its_line(
    tmp_path: Path,
    recipe_edit: tuple[str, str] | None,
    pyproject_edit: tuple[str, str] | None,
    message: str,
) -> None:
    recipe = tmp_path / "packages" / "zotsink" / "package.py"
    recipe.parent.mkdir(parents=True)
    pyproject = tmp_path / "pyproject.toml"
    shutil.copyfile(RECIPE, recipe)
    shutil.copyfile(ROOT / "pyproject.toml", pyproject)
    for path, edit in ((recipe, recipe_edit), (pyproject, pyproject_edit)):
        if edit is not None:
            text = path.read_text()
            assert text.count(edit[0]) == 1, edit[0]
            path.write_text(text.replace(*edit))
    r = check_spack(str(recipe), "--pyproject", str(pyproject))
    assert r.returncode == 1, r.stderr
    assert re.search(message, r.stderr), r.stderr
    assert "Traceback" not in r.stderr
