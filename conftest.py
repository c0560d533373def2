"""Root pytest configuration: 8 virtual CPU devices, set before JAX starts.

It lives at the repository root so that the doctests of ``src`` see the same
devices as ``tests/``.
"""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    ).strip()
