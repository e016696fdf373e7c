"""A plain ``pip install`` of the wheel is a working Fornace.

The wheel is built from the checkout and installed in a fresh virtual
environment, away from the source tree (no editable install: its
dependencies come from this test's environment through a path entry, which
does not load that environment's editable finder).  There ``fornace
--version``, ``fornace workflow check`` on the shipped workflows and
``fornace demo`` (API with its migrations, conductor, local cloud) must work.
"""
from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def source_copy(folder: Path) -> Path:
    """The checkout's files (tracked or not ignored) copied to ``folder``: the
    build then sees no leftover build/ or egg-info of earlier builds."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, check=True).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            target = folder / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return folder


def test_wheel_installs_a_working_fornace(tmp_path):
    built = tmp_path / "dist"
    source = source_copy(tmp_path / "source")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(built),
                    str(source)], check=True, cwd=tmp_path)
    names = zipfile.ZipFile(next(built.glob("fornace-*.whl"))).namelist()
    tops = {name.split("/")[0] for name in names if not name.startswith("fornace-")}
    assert tops == {"fornace"}, tops                     # one import name
    for shipped in ("fornace/data/types.json", "fornace/data/init-scripts/init.sh",
                    "fornace/etc/fornace.conf.sample", "fornace/common/db/migrations/env.py",
                    "fornace/common/db/migrations/script.py.mako",
                    "fornace/api/dashboard/templates/base.html"):
        assert shipped in names, shipped
    assert not [name for name in names if name.startswith("fornace/tests")]
    wheel = next(built.glob("fornace-*.whl"))
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path("
                              "'purelib'))"], capture_output=True, text=True,
                             check=True).stdout.strip()
    # the dependencies, not fornace: a plain path line loads no .pth of that folder
    Path(purelib, "deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                    "--no-deps", str(wheel)], check=True, cwd=tmp_path)

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["HOME"] = str(tmp_path)

    def fornace(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(env_dir / "bin" / "fornace"), *args], capture_output=True,
                              text=True, cwd=tmp_path, env=env, timeout=300)

    where = subprocess.run([str(python), "-c", "import fornace.conductor, importlib.util as u; "
                            "print(fornace.conductor.__file__); "
                            "print([n for n in ('api', 'conductor', 'agent') if u.find_spec(n)])"],
                           capture_output=True, text=True, cwd=tmp_path, env=env, check=True)
    module, top_level = where.stdout.splitlines()
    assert module.startswith(purelib), module  # the wheel's, not the checkout's
    assert top_level == "[]", top_level        # one import name: fornace
    version = fornace("--version")
    assert version.returncode == 0 and version.stdout.startswith("fornace "), version.stderr
    check = fornace("workflow", "check", str(Path(purelib, "fornace", "data", "workflows")))
    assert check.returncode == 0, check.stdout + check.stderr
    demo = fornace("demo")
    assert demo.returncode == 0, demo.stdout[-2000:] + demo.stderr[-2000:]
    assert "success" in demo.stdout
