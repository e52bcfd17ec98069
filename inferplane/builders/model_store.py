"""ModelStore: the read-only ``/models`` volume every engine pod mounts.

With an object store in the spec, Fluid's AlluxioRuntime caches it on the GPU nodes' NVMe: the
Dataset (named like the PVC Fluid creates for it), the runtime, and a DataLoad that warms the
release's model before the first engine starts. Without one, ``/models`` is the node-local
directory the Ansible warm-up fills and verifies; this component then provisions nothing.
Facts: shared docs k8s-addons.md section 7.
"""

from __future__ import annotations

from typing import Any

from inferplane.builders.addons import GPU_NODE_LABEL, GPU_NODE_SELECTOR, GPU_TOLERATION, PART_OF
from inferplane.catalog import BuildContext, Built
from inferplane.errors import ConfigError
from inferplane.manifest import Model, ReleaseManifest
from inferplane.spec import PlatformSpec

VOLUME_NAME = "models"
FLUID_API = "data.fluid.io/v1alpha1"
# Keys of the credentials Secret: the AWS names, so the same Secret also serves boto3 (warm-up) as envFrom.
ACCESS_KEY_ID = "AWS_ACCESS_KEY_ID"
SECRET_ACCESS_KEY = "AWS_SECRET_ACCESS_KEY"


def models_volume(spec: PlatformSpec) -> dict[str, Any]:
    """The pod volume for /models: the Fluid PVC, or the node-local cache when there is no object store."""
    mc = spec.model_cache
    if mc.object_store is not None:
        return {"name": VOLUME_NAME, "persistentVolumeClaim": {"claimName": mc.pvc_name, "readOnly": True}}
    return {"name": VOLUME_NAME, "hostPath": {"path": mc.node_cache_dir, "type": "Directory"}}


def models_volume_mount(spec: PlatformSpec) -> dict[str, Any]:
    return {"name": VOLUME_NAME, "mountPath": spec.model_cache.mount_path, "readOnly": True}


def mount_point(spec: PlatformSpec) -> str:
    store = spec.model_cache.object_store
    assert store is not None
    prefix = store.prefix.strip("/")
    return f"s3://{store.bucket}/{prefix + '/' if prefix else ''}"


def model_cache_path(spec: PlatformSpec, release: ReleaseManifest, name: str) -> str:
    """The model's directory inside the dataset ("/DeepSeek-V3-0324"), checked against where the
    engine loads it from: a model outside the cached prefix would be read from S3 on every start."""
    model: Model = release.models[name]
    root = mount_point(spec)
    source = model.source.rstrip("/") + "/"
    if not source.startswith(root):
        raise ConfigError(
            f"release {release.release}",
            [
                f"models.{name}.source: {model.source} is outside the model cache {root} (stack model_cache.object_store); "
                "move the model under the cached prefix or change model_cache.object_store.prefix"
            ],
        )
    relative = "/" + source[len(root) :].rstrip("/")
    expected = spec.model_cache.mount_path.rstrip("/") + relative
    if model.path.rstrip("/") != expected:
        raise ConfigError(
            f"release {release.release}",
            [f"models.{name}.path: {model.path} but the cache serves {model.source} at {expected}; set path: {expected}"],
        )
    return relative


def build(ctx: BuildContext) -> Built:
    spec, release = ctx.spec, ctx.release
    store = spec.model_cache.object_store
    if store is None:
        return Built()
    mc = spec.model_cache
    ns = spec.namespace
    meta_labels = {
        "app.kubernetes.io/name": mc.pvc_name,
        "app.kubernetes.io/component": "model-store",
        "app.kubernetes.io/part-of": PART_OF,
    }
    gpu_nodes = {"required": {"nodeSelectorTerms": [{"matchExpressions": [{"key": GPU_NODE_LABEL, "operator": "In", "values": ["true"]}]}]}}

    dataset = {
        "apiVersion": FLUID_API,
        "kind": "Dataset",
        # Fluid creates the PVC under the Dataset's name: this name is the engines' claimName.
        "metadata": {"name": mc.pvc_name, "namespace": ns, "labels": meta_labels},
        "spec": {
            "mounts": [
                {
                    "name": VOLUME_NAME,
                    "mountPoint": mount_point(spec),
                    # At the dataset root, so /models/<dir> is s3://bucket/prefix/<dir>.
                    "path": "/",
                    "readOnly": True,
                    "options": {
                        "alluxio.underfs.s3.endpoint": store.endpoint,
                        # Path-style requests: what S3-compatible stores (MinIO, Ceph RGW) need.
                        "alluxio.underfs.s3.disable.dns.buckets": "true",
                    },
                    "encryptOptions": [
                        {
                            "name": "aws.accessKeyId",
                            "valueFrom": {"secretKeyRef": {"name": store.credentials_secret, "key": ACCESS_KEY_ID}},
                        },
                        {
                            "name": "aws.secretKey",
                            "valueFrom": {"secretKeyRef": {"name": store.credentials_secret, "key": SECRET_ACCESS_KEY}},
                        },
                    ],
                }
            ],
            "accessModes": ["ReadOnlyMany"],
            # Cache workers on the GPU nodes: their NVMe is the cache and the readers are local.
            "nodeAffinity": gpu_nodes,
            "tolerations": [GPU_TOLERATION],
        },
    }
    runtime = {
        "apiVersion": FLUID_API,
        "kind": "AlluxioRuntime",
        # Same name and namespace as the Dataset: that is how Fluid binds them.
        "metadata": {"name": mc.pvc_name, "namespace": ns, "labels": meta_labels},
        "spec": {
            "replicas": mc.alluxio_replicas,
            "tieredstore": {
                "levels": [
                    {
                        "mediumtype": mc.alluxio_medium,
                        "volumeType": "hostPath",
                        "path": mc.alluxio_path,
                        "quota": mc.alluxio_quota,
                        "high": "0.95",
                        "low": "0.7",
                    }
                ]
            },
            "fuse": {"cleanPolicy": "OnRuntimeDeleted", "nodeSelector": GPU_NODE_SELECTOR},
        },
    }
    model = release.models[spec.model_name]
    warmup = {
        "apiVersion": FLUID_API,
        "kind": "DataLoad",
        # One DataLoad per model revision: a completed DataLoad never runs again, a new revision
        # gets a new one (Pulumi replaces it) and is warm before the upgrade rolls the engines.
        "metadata": {"name": f"{mc.pvc_name}-warmup-{model.revision[:12]}", "namespace": ns, "labels": meta_labels},
        "spec": {
            "dataset": {"name": mc.pvc_name, "namespace": ns},
            "loadMetadata": True,
            "target": [{"path": model_cache_path(spec, release, spec.model_name), "replicas": 1}],
            "policy": "Once",
        },
    }
    return Built(objects=[dataset, runtime, warmup])
