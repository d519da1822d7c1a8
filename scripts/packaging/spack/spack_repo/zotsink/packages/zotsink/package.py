# Spack recipe for zotsink, so that a site can offer it with `spack install zotsink` (and
# `module load zotsink` from Spack's generated modules). scripts/packaging/check-spack checks
# it offline against pyproject.toml; the test suite runs that check.
# The source is the sdist (`python -m build --sdist`); the checksum is the release sdist's,
# the same as in the EasyBuild easyconfig beside it: refresh both for each release.
# ruff: noqa: F403, F405
from spack.package import *
from spack_repo.builtin.build_systems.python import PythonPackage


class Zotsink(PythonPackage):
    """Append records from many HPC job-array tasks into one shared file, whole and locked,
    instead of zillions of tiny files. Also merges existing tiny files into one table
    (zotsink collect), verifies results and lists the tasks to resubmit."""

    homepage = "https://pypi.org/project/zotsink/"
    pypi = "zotsink/zotsink-0.2.0.tar.gz"

    license("MIT")

    version("0.2.0", sha256="da8a65c0e4037bc6c4f2a9eba8a4b1ee85c17b55a788e1584513b6c5db039442")

    variant("parquet", default=False, description="collect -o X.parquet and cat -o X.parquet")

    depends_on("python@3.9:", type=("build", "run"))
    depends_on("py-setuptools@68:", type="build")
    depends_on("py-click@8.1:", type=("build", "run"))
    depends_on("py-filelock@3.16:", type=("build", "run"))
    depends_on("py-pyarrow@14:", type=("build", "run"), when="+parquet")

    # imported after the install, as Spack's own sanity check
    import_modules = ["zotsink", "zotsink.cli"]

    def test_append_and_verify(self):
        """one record appended to a table, read back, and the table verified"""
        zotsink = which(self.prefix.bin.zotsink, required=True)
        zotsink("append", "out.tsv", "a\t1")
        assert zotsink("cat", "out.tsv", output=str) == "a\t1\n"
        zotsink("verify", "out.tsv")
