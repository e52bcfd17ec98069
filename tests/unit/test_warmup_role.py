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


PROD_PLATFORM = yaml.safe_load((REPO / "stacks" / "Pulumi.prod.yaml").read_text())["config"]["inferplane:platform"]


def render_dataload(tmp_path: Path, **extra: object) -> dict[str, object]:
    """The role's DataLoad as Ansible renders it for the prod stack; its destination goes to dest.txt."""
    out = tmp_path / "dataload.yml"
    template = {"src": str(ROLE / "templates" / "dataload.yml.j2"), "dest": str(out), "mode": "0644"}
    resolve = {"content": "{{ model_warmup_dest }}", "dest": str(tmp_path / "dest.txt"), "mode": "0644"}
    play = [
        {
            "name": "Render the DataLoad",
            "hosts": "localhost",
            "gather_facts": False,
            "vars_files": [str(ROLE / "defaults" / "main.yml"), str(ROLE / "vars" / "main.yml")],
            "tasks": [{"name": "Render", "ansible.builtin.template": template}, {"name": "Resolve", "ansible.builtin.copy": resolve}],
        }
    ]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    release = yaml.safe_load((REPO / "releases" / "2026.11.0.yaml").read_text())
    variables = {"inferplane_release": release, "inferplane_platform": PROD_PLATFORM, "kube_namespace": PROD_PLATFORM["namespace"], **extra}
    (tmp_path / "extra.json").write_text(json.dumps(variables))
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
    # The Dataset and the model directory inside it are the ones Pulumi's ModelStore builds.
    assert obj["spec"] == {  # type: ignore[comparison-overlap]
        "dataset": {"name": "models", "namespace": PROD_PLATFORM["namespace"]},
        "loadMetadata": True,
        "target": [{"path": "/DeepSeek-V3-0324", "replicas": 1}],
    }


def test_the_destination_is_the_host_path_behind_the_pods_models_mount(tmp_path: Path) -> None:
    render_dataload(tmp_path)
    assert (tmp_path / "dest.txt").read_text() == "/var/lib/inferplane/models/DeepSeek-V3-0324"


@pytest.mark.parametrize("model", ["Qwen3-VL_8B.Instruct", "m" * 80])
def test_the_dataload_name_is_always_a_dns_label(tmp_path: Path, shared_dir: Path, model: str) -> None:
    obj = render_dataload(tmp_path, model_warmup_model=model, model_warmup_fluid_load_path="/Qwen3-VL-8B", model_warmup_dest="/cache/x")
    name = obj["metadata"]["name"]  # type: ignore[index]
    assert DNS_LABEL.match(name) and len(name) <= 63, name
    validator = Validator(crds=crd_index(str(shared_dir / "schemas" / "crds")))
    validator.check_object("dataload.yml", obj)
    assert validator.report.problems == []


@pytest.mark.parametrize("env,endpoint,throttle", [("prod", "https://s3.example.internal", 16), ("poc", "https://s3.example.internal", 4)])
def test_the_inventories_take_the_store_from_the_stack(env: str, endpoint: str, throttle: int) -> None:
    cmd = [str(Path(sys.executable).parent / "ansible"), "-i", f"inventories/{env}", "localhost", "-m", "ansible.builtin.debug"]
    cmd += ["-a", "msg={{ {'endpoint': model_warmup_s3_endpoint, 'throttle': model_warmup_throttle} | to_json }}"]
    env_vars = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1", "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1"}
    env_vars["ANSIBLE_STDOUT_CALLBACK"] = "json"
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env_vars, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    msg = json.loads(res.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]["msg"]
    assert json.loads(msg) == {"endpoint": endpoint, "throttle": throttle}
