#!/usr/bin/env python3
"""Makes a directory of native libraries self-contained: the shared libraries a library
loads (as ldd resolves them here), except the base system's, are copied beside it under
their sonames, and every copy's RUNPATH is set to $ORIGIN, so the directory loads on a
machine with only the base system. The wheel (bindings/python/setup.py) and dlrm.jar
(bindings/java/CMakeLists.txt) bundle libdlrm so.

    bundle_runtime.py bundle LIBRARY DEST_DIR   # copies LIBRARY and its dependencies
    bundle_runtime.py check DIR                 # exit 1 unless every library in DIR
                                                # resolves each dependency in DIR or the
                                                # base system (ldd, empty environment)

DEST_DIR/bundled.txt lists the dependency files (the Java loader extracts them from the
jar). Needs ldd and patchelf (Debian's patchelf).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

# What every Linux machine with a C++ runtime has: glibc's libraries, the dynamic loader
# and GCC's runtime. Everything else travels with the library.
BASE_SYSTEM = {
    "linux-vdso.so.1", "ld-linux-x86-64.so.2", "libc.so.6", "libm.so.6", "libpthread.so.0",
    "libdl.so.2", "librt.so.1", "libresolv.so.2", "libutil.so.1", "libstdc++.so.6",
    "libgcc_s.so.1",
}
LIST_FILE = "bundled.txt"


def resolved(library: Path) -> Dict[str, str]:
    """soname -> the path ldd resolves it to, for every library `library` loads (its
    dependencies' dependencies too), in a clean environment."""
    out = subprocess.run(["ldd", str(library)], env={"PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, check=True).stdout
    deps = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[1] == "=>":
            deps[parts[0]] = parts[2]  # "not found" stays as is
        elif parts and "/" in parts[0]:
            deps[Path(parts[0]).name] = parts[0]  # the loader, by path
    return deps


def bundle(library: Path, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    copies: List[str] = []
    for soname, path in sorted(resolved(library).items()):
        if soname in BASE_SYSTEM:
            continue
        if not path.startswith("/"):
            sys.exit(f"bundle_runtime: {library} needs {soname}, which is {path} here")
        target = dest / soname
        shutil.copyfile(os.path.realpath(path), target)  # the real file, under the soname
        os.chmod(target, 0o755)
        copies.append(soname)
    own = dest / library.name
    if own.resolve() != library.resolve():
        shutil.copyfile(library.resolve(), own)
        os.chmod(own, 0o755)
    for name in copies + [library.name]:
        subprocess.run(["patchelf", "--set-rpath", "$ORIGIN", str(dest / name)], check=True)
    (dest / LIST_FILE).write_text("".join(f"{name}\n" for name in copies))


def check(directory: Path) -> int:
    """0 when every library in directory resolves inside it or to the base system."""
    bad = []
    libraries = sorted(p for p in directory.iterdir() if ".so" in p.name and p.is_file())
    for lib in libraries:
        for soname, path in resolved(lib).items():
            inside = Path(path).parent.resolve() == directory.resolve()
            if not inside and soname not in BASE_SYSTEM:
                bad.append(f"{lib.name} loads {soname} from {path}")
    for line in bad:
        print(f"bundle_runtime check: {line}", file=sys.stderr)
    print(f"bundle_runtime check: {len(libraries)} libraries in {directory}, "
          f"{'every dependency bundled or base system' if not bad else f'{len(bad)} outside'}")
    return 1 if bad else 0


def main(argv: List[str]) -> int:
    if len(argv) == 4 and argv[1] == "bundle":
        bundle(Path(argv[2]), Path(argv[3]))
        return 0
    if len(argv) == 3 and argv[1] == "check":
        return check(Path(argv[2]))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
