"""Pure builders: (PlatformSpec, ReleaseManifest) -> Kubernetes objects as dicts. No I/O, no Pulumi."""
