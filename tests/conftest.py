"""Test-wide setup: 8 fake CPU devices and exact fp32 matmuls, before jax is imported.

Every test module imports jax after this file runs, so meshes of up to 8 devices can be built
on a CPU-only machine (`XLA_FLAGS=--xla_force_host_platform_device_count=8`).
"""
import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import jax  # noqa: E402  (must come after XLA_FLAGS)

jax.config.update("jax_default_matmul_precision", "highest")

# The real SGLang server fixtures, defined once here: a module importing them would get its
# own session server, alive (and polling a core) until the session ends.
from tests.sglang_server import (sglang_server, sglang_session_server,  # noqa: E402,F401
                                 tiny_qwen3_dirs)


def pytest_collection_modifyitems(config, items):
  """Tests that declare a longer timeout than the default run first (a stable sort): on two
  xdist workers (scripts/test.sh) the longest one then starts at once instead of last, alone
  on a worker while the other idles."""
  default = float(config.getini("timeout") or 0)

  def declared(item) -> float:
    mark = item.get_closest_marker("timeout")
    return float(mark.args[0]) if mark and mark.args else default

  items.sort(key=lambda item: -max(declared(item), default))
