"""Loading, ABI check, prototypes and status names."""
from __future__ import annotations

import ctypes
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import dlrm
from dlrm import _native

HEADER = Path(__file__).resolve().parents[3] / "include" / "dlrm" / "dlrm.h"
PACKAGE_ROOT = Path(__file__).resolve().parents[1]


def test_version_and_abi():
    assert dlrm.ABI_VERSION == 1
    assert dlrm.library_abi_version() == 1
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", dlrm.library_version())
    assert isinstance(dlrm.__version__, str)
    assert os.path.exists(dlrm.library_path()) or "dlrm" in dlrm.library_path()


def test_abi_mismatch_names_both_versions():
    with pytest.raises(ImportError, match=r"ABI version 2.*ABI version 1"):
        _native.check_abi(2, "/x/libdlrm.so")
    _native.check_abi(1, "/x/libdlrm.so")


@pytest.mark.skipif(not HEADER.exists(), reason="needs the source tree's dlrm.h")
def test_prototypes_cover_exactly_the_header():
    declared = set(re.findall(r"DLRM_API\s+[\w\s\*]+?\b(dlrm_\w+)\s*\(", HEADER.read_text()))
    ours = {name for name, _, _ in _native._PROTOTYPES}
    assert declared == ours
    for name in ours:
        assert getattr(_native.lib, name).argtypes is not None, name


def test_library_releases_the_gil():
    # CDLL functions drop the GIL around the call; PyDLL ones would hold it.
    assert type(_native.lib) is ctypes.CDLL
    for name, _, _ in _native._PROTOTYPES:
        assert not getattr(_native.lib, name)._flags_ & ctypes._FUNCFLAG_PYTHONAPI, name


def test_status_codes_match_library_names():
    for code in dlrm.StatusCode:
        assert _native.lib.dlrm_status_name(int(code)).decode() == code.name
    assert _native.lib.dlrm_status_name(99).decode() == "UNKNOWN"


def _import_with(env_library: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, DLRM_LIBRARY=env_library, PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run([sys.executable, "-c", "import dlrm"], cwd=PACKAGE_ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


def test_missing_library_is_an_import_error():
    result = _import_with("/nonexistent/libdlrm.so")
    assert result.returncode != 0
    assert "ImportError" in result.stderr and "DLRM_LIBRARY" in result.stderr


def test_non_dlrm_library_is_an_import_error():
    import _ctypes  # a real shared object that is not libdlrm

    path = getattr(_ctypes, "__file__", None)
    if path is None:
        pytest.skip("_ctypes is built into this interpreter")
    result = _import_with(path)
    assert result.returncode != 0
    assert "ImportError" in result.stderr and "dlrm_abi_version" in result.stderr


def test_unloadable_file_is_an_import_error(tmp_path):
    bogus = tmp_path / "libdlrm.so"
    bogus.write_bytes(b"not an ELF file")
    result = _import_with(str(bogus))
    assert result.returncode != 0
    assert "ImportError" in result.stderr and "cannot load libdlrm" in result.stderr


def test_library_with_another_abi_is_refused(tmp_path):
    import shutil

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build a fake library")
    source = tmp_path / "fake.c"
    source.write_text("int dlrm_abi_version(void) { return 2; }\n")
    fake = tmp_path / "libdlrm.so.2"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(fake), str(source)], check=True,
                   timeout=60)
    result = _import_with(str(fake))
    assert result.returncode != 0
    assert "ImportError" in result.stderr
    assert "ABI version 2" in result.stderr and "ABI version 1" in result.stderr
