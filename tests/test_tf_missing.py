"""Without TensorFlow installed, a TF target gets one line telling how to install the extra (exit 2),
and importing advisor never imports TensorFlow."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# make `import tensorflow` / `import keras` fail as if the extra were not installed
_NO_TF = "import sys; sys.modules['tensorflow'] = None; sys.modules['keras'] = None; "


def test_capture_tf_target_without_tensorflow_prints_install_hint(tmp_path):
    # the capture runs in a child process: hide TensorFlow from it too, with packages that fail to import
    fake = tmp_path / "no_tf"
    for name in ("tensorflow", "keras"):
        (fake / name).mkdir(parents=True)
        (fake / name / "__init__.py").write_text(f"raise ModuleNotFoundError(\"No module named {name!r}\", "
                                                 f"name={name!r})\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(fake), os.environ.get("PYTHONPATH")])))
    code = _NO_TF + ("from advisor.cli import main; "
                     f"sys.exit(main(['capture', {str(ROOT / 'examples' / 'keras_hazard.py') + ':workload'!r}, "
                     f"'--out', {str(tmp_path / 'run')!r}]))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert r.returncode == 2
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert "pip install 'advisor[tf]'" in lines[0]
    assert "Traceback" not in r.stderr


def test_advisor_import_does_not_import_tensorflow():
    code = ("import sys, advisor, advisor.tf, advisor.tf.opmap, advisor.tf.npu_config, advisor.cli; "
            "print('tensorflow' in sys.modules, 'keras' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "False"]


def test_tf_helpers_without_tensorflow():
    code = _NO_TF + ("from advisor.tf import is_missing_tf_error, require_tf, INSTALL_HINT\n"
                     "from advisor.errors import InputError\n"
                     "try:\n    import tensorflow\nexcept ImportError as e:\n    assert is_missing_tf_error(e)\n"
                     "try:\n    require_tf('x.py')\nexcept InputError as e:\n    print(e)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "x.py: " + __import__("advisor.tf", fromlist=["INSTALL_HINT"]).INSTALL_HINT
