"""The model_warmup role's Kubernetes object, rendered by Ansible from the role's own defaults and
vars, validated offline against Fluid's real DataLoad CRD (there is no API server here)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from inferplane.validate import Validator, crd_index

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "model_warmup"
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def render_dataload(tmp_path: Path, **extra: object) -> dict[str, object]:
    out = tmp_path / "dataload.yml"
    play = [
        {
            "name": "Render the DataLoad",
            "hosts": "localhost",
            "gather_facts": False,
            "vars_files": [str(ROLE / "defaults" / "main.yml"), str(ROLE / "vars" / "main.yml")],
            "tasks": [
                {
                    "name": "Render",
                    "ansible.builtin.template": {"src": str(ROLE / "templates" / "dataload.yml.j2"), "dest": str(out), "mode": "0644"},
                }
            ],
        }
    ]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    release = yaml.safe_load((REPO / "releases" / "2026.11.0.yaml").read_text())
    (tmp_path / "extra.json").write_text(json.dumps({"inferplane_release": release, "kube_namespace": "inference", **extra}))
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(tmp_path / "play.yml")]
    cmd += ["-e", f"@{tmp_path / 'extra.json'}", "-e", f"ansible_python_interpreter={sys.executable}"]
    res = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )
    assert res.returncode == 0, res.stdout[-2000:]
    return yaml.safe_load(out.read_text())  # type: ignore[no-any-return]


def test_the_dataload_is_valid_against_fluid_s_crd(tmp_path: Path, shared_dir: Path) -> None:
    obj = render_dataload(tmp_path)
    validator = Validator(crds=crd_index(str(shared_dir / "schemas" / "crds")))
    validator.check_object("dataload.yml", obj)
    assert validator.report.problems == [] and validator.report.crds_checked == 1
    assert obj["metadata"]["name"] == "warmup-deepseek-v3-2026-11-0"  # type: ignore[index]
    assert obj["spec"] == {  # type: ignore[comparison-overlap]
        "dataset": {"name": "models", "namespace": "inference"},
        "loadMetadata": True,
        "target": [{"path": "/", "replicas": 1}],
    }


@pytest.mark.parametrize("model", ["Qwen3-VL_8B.Instruct", "m" * 80])
def test_the_dataload_name_is_always_a_dns_label(tmp_path: Path, shared_dir: Path, model: str) -> None:
    obj = render_dataload(tmp_path, model_warmup_model=model, model_warmup_fluid_load_path="/Qwen3-VL-8B")
    name = obj["metadata"]["name"]  # type: ignore[index]
    assert DNS_LABEL.match(name) and len(name) <= 63, name
    validator = Validator(crds=crd_index(str(shared_dir / "schemas" / "crds")))
    validator.check_object("dataload.yml", obj)
    assert validator.report.problems == []
