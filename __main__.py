"""inferplane Pulumi program: one stack = one SGLang PD/EPD platform on one Kubernetes cluster.

Deploys, in order: cluster add-ons (GPU operator, RDMA device plugin, LWS + Volcano, Fluid/Alluxio,
etcd), the model store, Mooncake (master or HA masters), the inference pools (one LWS per role),
the SMG gateway, observability (monitors, rules, dashboards) and policies.
Everything is read from this stack's config (stacks/Pulumi.<stack>.yaml) and the release
manifest it names; the builders in inferplane/builders/ describe every object.
"""

import pulumi

from inferplane.stack import build_stack

exports = build_stack(pulumi.get_stack(), pulumi.Config("inferplane"))
for key, value in exports.items():
    pulumi.export(key, value)
