"""Installing the project adds one top-level name, ``tff_robust``: the repository's ``tasks/`` and
``flags/`` folders are installed as ``tff_robust.tasks`` and ``tff_robust.flags`` (editable install
and wheel alike), never as top-level ``tasks`` / ``flags`` that a user's own code may use."""

import os
import shutil
import subprocess
import sys
import zipfile

import pytest

from helpers.paths import ROOT

UV = shutil.which("uv")
pytestmark = pytest.mark.skipif(UV is None, reason="needs uv (pip install uv)")


def _uv(*args, **kw):
  proc = subprocess.run([UV, *args], capture_output=True, text=True, timeout=600, **kw)
  assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
  return proc


def _site_packages(venv) -> str:
  out = subprocess.run([os.path.join(venv, "bin", "python"), "-c",
                        "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                       capture_output=True, text=True, check=True)
  return out.stdout.strip()


def test_wheel_holds_only_the_tff_robust_package(tmp_path):
  _uv("build", "--wheel", "--offline", "--out-dir", str(tmp_path), ROOT, cwd=tmp_path)
  wheels = [n for n in os.listdir(tmp_path) if n.endswith(".whl")]
  assert len(wheels) == 1, wheels
  names = zipfile.ZipFile(tmp_path / wheels[0]).namelist()
  tops = {n.split("/", 1)[0] for n in names}
  assert tops == {"tff_robust", f"{wheels[0].split('-')[0]}-{wheels[0].split('-')[1]}.dist-info"}, tops
  for path in ("tff_robust/tasks/mnist.py", "tff_robust/tasks/base.py", "tff_robust/flags/definitions.py",
               "tff_robust/flags/rmah_common.cfg", "tff_robust/flags/fedex_mnist_study.cfg"):
    assert path in names, path


def test_editable_install_adds_no_top_level_tasks_or_flags(tmp_path):
  venv = str(tmp_path / "venv")
  _uv("venv", "--offline", "--python", sys.executable, venv, cwd=tmp_path)
  _uv("pip", "install", "--offline", "--no-deps", "--python", os.path.join(venv, "bin", "python"),
      "-e", ROOT, cwd=tmp_path)
  site = _site_packages(venv)
  installed = set(os.listdir(site))
  assert not {"tasks", "flags", "tasks.py", "flags.py"} & installed, sorted(installed)
  finder = "".join(open(os.path.join(site, n)).read() for n in installed
                   if n.startswith("__editable__") and n.endswith(".py"))
  # Outside the checkout (cwd=tmp_path): only tff_robust resolves, with tasks/flags under it.
  probe = ("import importlib.util as u\n"
           "print(u.find_spec('tasks'), u.find_spec('flags'))\n"
           "print(u.find_spec('tff_robust.tasks').origin)\n"
           "print(u.find_spec('tff_robust.flags').origin)\n")
  out = subprocess.run([os.path.join(venv, "bin", "python"), "-c", probe], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
  assert out.returncode == 0, out.stderr[-2000:] + finder[-2000:]
  lines = out.stdout.splitlines()
  assert lines[0] == "None None", lines
  assert lines[1] == os.path.join(ROOT, "tasks", "__init__.py")
  assert lines[2] == os.path.join(ROOT, "flags", "__init__.py")
