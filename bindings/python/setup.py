"""Build script: packages `dlrm` with libdlrm.so bundled in dlrm/_lib/, beside every
shared library it loads except the base system's (scripts/bundle_runtime.py).

Where the library comes from:
  * $DLRM_LIBRARY set: that file (symlinks resolved to the real file it names);
  * otherwise: the project's `dlrm` CMake target, configured and built from the source
    tree two levels up in a temporary build directory (-DDLRM_BUILD_TESTS=OFF).
The `dlrm` command (dlrm/_bin/dlrm, run by the `dlrm` console script) is $DLRM_CLI, else
the `dlrm` beside the library (a build directory holds both; the CMake build makes it).

Nothing is written into the source tree: setuptools' build/ and *.egg-info go to a
temporary directory. A wheel is built with the `wheel` package's bdist_wheel when it is
importable, else with a small stdlib implementation below (setuptools < 70.1 has none of
its own, and `pip install --no-build-isolation` must work without `wheel`).
"""
from __future__ import annotations

import atexit
import base64
import csv
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from pathlib import Path

from setuptools import Command, setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
SOURCE_ROOT = HERE.parent.parent
LIBRARY_GLOB = "libdlrm.so*"

_SCRATCH = Path(tempfile.mkdtemp(prefix="dlrm-setup-"))
atexit.register(shutil.rmtree, _SCRATCH, ignore_errors=True)


def _version() -> str:
    text = (HERE / "dlrm" / "_version.py").read_text()
    return re.search(r'__version__ = "([^"]+)"', text).group(1)


def _build_with_cmake(build_dir: Path) -> Path:
    """Builds the `dlrm` library and `dlrm_cli` (the `dlrm` command) targets of the
    enclosing project; returns the real library file (the command is beside it)."""
    if not (SOURCE_ROOT / "CMakeLists.txt").is_file() or \
            not (SOURCE_ROOT / "include" / "dlrm" / "dlrm.h").is_file():
        raise SystemExit(f"error: {SOURCE_ROOT} is not the libdlrm source tree; set "
                         "DLRM_LIBRARY=/path/to/libdlrm.so to bundle a built library")
    cmake = shutil.which("cmake")
    if cmake is None:
        raise SystemExit("error: cmake not found; install it or set "
                         "DLRM_LIBRARY=/path/to/libdlrm.so")
    jobs = str(os.cpu_count() or 1)
    subprocess.check_call([cmake, "-S", str(SOURCE_ROOT), "-B", str(build_dir),
                           "-DCMAKE_BUILD_TYPE=Release", "-DDLRM_BUILD_TESTS=OFF",
                           "-DDLRM_BUILD_BINDINGS=OFF"])
    subprocess.check_call([cmake, "--build", str(build_dir), "--target", "dlrm", "dlrm_cli",
                           "-j", jobs])
    built = sorted(p for p in build_dir.rglob(LIBRARY_GLOB) if not p.is_symlink())
    if not built:
        raise SystemExit(f"error: the cmake build left no {LIBRARY_GLOB} in {build_dir}")
    return built[0]


def _bundle_runtime(library: Path, target: Path) -> None:
    script = SOURCE_ROOT / "scripts" / "bundle_runtime.py"
    if shutil.which("patchelf") is None:
        raise SystemExit("error: patchelf not found (Debian package patchelf): the wheel "
                         "bundles libdlrm's shared libraries with RUNPATH $ORIGIN")
    subprocess.check_call([sys.executable, str(script), "bundle", str(library), str(target)])


def _command_beside(library: Path) -> Path:
    """The `dlrm` command to bundle: $DLRM_CLI, else the one a build puts beside the
    library (build/libdlrm.so and build/dlrm)."""
    explicit = os.environ.get("DLRM_CLI")
    command = Path(explicit).resolve() if explicit else library.parent / "dlrm"
    if not (command.is_file() and os.access(command, os.X_OK)):
        raise SystemExit(f"error: no `dlrm` command at {command}; build the dlrm_cli target "
                         "there or set DLRM_CLI=/path/to/dlrm")
    return command


class BuildPyWithLibrary(build_py):
    """build_py, then copy libdlrm into <build_lib>/dlrm/_lib/ and the `dlrm` command into
    <build_lib>/dlrm/_bin/ (never into the sources)."""

    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "dlrm" / "_lib"
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        explicit = os.environ.get("DLRM_LIBRARY")
        if explicit:
            source = Path(explicit).resolve()  # follow libdlrm.so -> .so.1 -> .so.0.1.0
            if not source.is_file():
                raise SystemExit(f"error: DLRM_LIBRARY={explicit!r} is not a file")
            command = _command_beside(Path(explicit).absolute())
        else:
            source = _build_with_cmake(_SCRATCH / "cmake")
            command = _command_beside(source)
        # One regular file (wheels hold no symlinks), under the real file's name (the
        # loader opens dlrm/_lib/libdlrm.so* by path), with every shared library it loads
        # but the base system's beside it, RUNPATH $ORIGIN (scripts/bundle_runtime.py).
        _bundle_runtime(source, target)
        bindir = Path(self.build_lib) / "dlrm" / "_bin"
        shutil.rmtree(bindir, ignore_errors=True)
        bindir.mkdir(parents=True)
        self.copy_file(str(command), str(bindir / "dlrm"))  # keeps its executable mode


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + digest.decode()


def _metadata(dist) -> str:
    """Core metadata 2.1 (METADATA), including Requires-Dist from the pyproject."""
    lines = ["Metadata-Version: 2.1", f"Name: {dist.get_name()}",
             f"Version: {dist.get_version()}", f"Summary: {dist.get_description()}"]
    if dist.python_requires:
        lines.append(f"Requires-Python: {dist.python_requires}")
    lines += [f"Classifier: {c}" for c in dist.get_classifiers()]
    lines += [f"Requires-Dist: {r}" for r in dist.install_requires or []]
    for extra, requirements in sorted((dist.extras_require or {}).items()):
        lines.append(f"Provides-Extra: {extra}")
        lines += [f'Requires-Dist: {r}; extra == "{extra}"' for r in requirements]
    description = dist.get_long_description() or ""
    if description:
        content_type = dist.metadata.long_description_content_type or "text/markdown"
        lines.append(f"Description-Content-Type: {content_type}")
    return "\n".join(lines) + "\n\n" + description


def _platform_tag() -> str:
    return re.sub(r"[^\w]", "_", sysconfig.get_platform())


class MinimalBdistWheel(Command):
    """A py3-none-<platform> wheel made with zipfile: the library is not a Python
    extension, so one wheel serves every Python 3 on the platform."""

    description = "build a wheel with the bundled libdlrm (stdlib implementation)"
    user_options = [("dist-dir=", "d", "directory to put the wheel in")]

    def initialize_options(self) -> None:
        self.dist_dir = None

    def finalize_options(self) -> None:
        self.dist_dir = self.dist_dir or "dist"

    def egg2dist(self, egg_info_dir: str, dist_info_dir: str) -> None:
        """Used by setuptools' dist_info command (PEP 517 prepare_metadata)."""
        os.makedirs(dist_info_dir, exist_ok=True)
        Path(dist_info_dir, "METADATA").write_text(_metadata(self.distribution))

    def run(self) -> None:
        self.run_command("build")
        build_lib = Path(self.get_finalized_command("build_py").build_lib)
        dist = self.distribution
        name = re.sub(r"[^\w\d.]+", "_", dist.get_name())
        stem = f"{name}-{dist.get_version()}"
        tag = f"py3-none-{_platform_tag()}"
        info = f"{stem}.dist-info"
        files = {p.relative_to(build_lib).as_posix(): p.read_bytes()
                 for p in sorted(build_lib.rglob("*")) if p.is_file()}
        files[f"{info}/METADATA"] = _metadata(dist).encode()
        files[f"{info}/WHEEL"] = (f"Wheel-Version: 1.0\nGenerator: dlrm-setup\n"
                                  f"Root-Is-Purelib: false\nTag: {tag}\n").encode()
        files[f"{info}/top_level.txt"] = b"dlrm\n"
        files[f"{info}/entry_points.txt"] = b"[console_scripts]\ndlrm = dlrm._cli:main\n"
        record = io.StringIO()
        writer = csv.writer(record, lineterminator="\n")
        for path, data in files.items():
            writer.writerow([path, _record_hash(data), len(data)])
        writer.writerow([f"{info}/RECORD", "", ""])
        files[f"{info}/RECORD"] = record.getvalue().encode()
        os.makedirs(self.dist_dir, exist_ok=True)
        wheel_path = Path(self.dist_dir) / f"{stem}-{tag}.whl"
        with zipfile.ZipFile(wheel_path, "w", zipfile.ZIP_DEFLATED) as whl:
            for path, data in files.items():
                executable = path.endswith(".so") or ".so." in path or "/_bin/" in path
                mode = 0o755 if executable else 0o644
                entry = zipfile.ZipInfo(path, date_time=(1980, 1, 1, 0, 0, 0))
                entry.external_attr = (0o100000 | mode) << 16
                entry.compress_type = zipfile.ZIP_DEFLATED
                whl.writestr(entry, data)
        self.announce(f"created {wheel_path}", level=2)


def _bdist_wheel() -> type:
    """The standard bdist_wheel when available (tagged py3-none-<plat>), else ours."""
    try:
        from setuptools.command.bdist_wheel import bdist_wheel as base  # setuptools >= 70.1
    except ImportError:
        try:
            from wheel.bdist_wheel import bdist_wheel as base
        except ImportError:
            return MinimalBdistWheel

    class BdistWheel(base):
        def finalize_options(self) -> None:
            super().finalize_options()
            self.root_is_pure = False  # it carries a native library

        def get_tag(self):
            return "py3", "none", super().get_tag()[2]

    return BdistWheel


setup(
    version=_version(),
    packages=["dlrm"],
    package_data={"dlrm": ["py.typed"]},
    zip_safe=False,
    cmdclass={"build_py": BuildPyWithLibrary, "bdist_wheel": _bdist_wheel()},
    options={
        "build": {"build_base": str(_SCRATCH / "build")},
        "egg_info": {"egg_base": str(_SCRATCH)},
    },
)
