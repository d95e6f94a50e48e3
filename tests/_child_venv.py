"""A child virtualenv that sees this environment's packages, for tests that pip-install a plugin as a user would.

``python -m venv --system-site-packages`` would expose the *base* interpreter's
site-packages, not those of the environment running the tests: inside a virtualenv
that is the wrong corenn (or none) and an old setuptools that cannot build a wheel.
Instead the child gets a ``.pth`` file that adds this environment's site directories
with ``site.addsitedir``, so their own ``.pth`` files (editable installs of corenn and
its plugins) are processed too, and pip builds offline with this environment's own
setuptools (``--no-build-isolation``). Packages installed into the child stay there.
"""
from __future__ import annotations

import site
import subprocess
import sys
import sysconfig
from pathlib import Path


def parent_site_dirs() -> list[str]:
    """This environment's site-packages directories (a virtualenv's own, or the base interpreter's)."""
    dirs = list(site.getsitepackages())
    purelib = sysconfig.get_paths()["purelib"]
    if purelib not in dirs:
        dirs.append(purelib)
    return [d for d in dirs if Path(d).is_dir()]


def make_child_venv(env_dir: Path) -> Path:
    """Create a virtualenv at ``env_dir`` that sees this environment's packages; returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True, timeout=120)
    python = env_dir / "bin" / "python"
    child_site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    # A .pth line that starts with "import" is executed at start-up; addsitedir also reads the
    # parent's own .pth files, which a plain path line would not.
    Path(child_site, "_corenn_test_parent_env.pth").write_text(
        "import site; " + "; ".join(f"site.addsitedir({d!r})" for d in parent_site_dirs()) + "\n")
    return python


def pip_install_offline(python: Path, *projects: Path, cwd: Path) -> subprocess.CompletedProcess:
    """``pip install`` local projects into the child, offline, building with this environment's setuptools."""
    return subprocess.run([str(python), "-m", "pip", "install", "--no-index", "--no-deps", "--no-build-isolation",
                           "--disable-pip-version-check", "-q", *map(str, projects)],
                          capture_output=True, text=True, cwd=cwd, timeout=300)
