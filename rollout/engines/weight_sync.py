"""How a trainer's new policy reaches its rollout engine: `weight_sync(kind, engine, ...)`.

  sync = weight_sync("sglang", engine, export=write_hf, export_dir=dir, lead=lead)
  await sync.start(params, "0")   # before the first rollout
  await sync.push(params, "1")    # after each train step

The in-process JAX engine ("jax") takes the params in memory (`JaxEngine.update_weights`); it
was built with the initial params, so `start` has nothing to do. SGLang servers ("sglang")
load an HF export: each version is written to `<export_dir>/v<version>` by the trainer's
`export(params, path)` (every process takes part in the gather, process 0 writes), process 0
asks every server to load it, and once they serve it the export it replaced is deleted (a 4B
policy is 8 GB a step). Only exports this sync wrote are deleted. The servers must serve
exactly the trainer's policy before the first rollout, so `start` pushes too. The export is
the caller's, so rollout needs no model code.
"""
from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
from collections.abc import Callable
from typing import Any


@dataclasses.dataclass
class InMemorySync:
  """The in-process engine: params swapped in memory between batches."""
  engine: Any  # carr_jax.model.engine.JaxEngine

  async def start(self, params: Any, version: str) -> None:
    del params, version  # the engine was built with these params and this version

  async def push(self, params: Any, version: str) -> None:
    await self.engine.update_weights(params, version)


@dataclasses.dataclass
class DiskSync:
  """SGLang servers: an HF export per version, loaded from disk; the replaced one deleted."""
  engine: Any  # rollout.engines.sglang.SGLangEngine
  export: Callable[[Any, str], None]  # (params, path): writes an HF directory SGLang loads
  export_dir: str
  lead: bool  # process 0: talks to the servers and deletes exports
  served_export: str | None = None  # the export the servers last loaded

  async def start(self, params: Any, version: str) -> None:
    await self.push(params, version)

  async def push(self, params: Any, version: str) -> None:
    path = os.path.join(self.export_dir, f"v{version}")
    await asyncio.to_thread(self.export, params, path)  # the loop serves rollouts meanwhile
    if not self.lead:
      return
    await self.engine.update_weights_from_disk(path, version)
    if self.served_export not in (None, path):  # the servers hold the new weights in memory
      shutil.rmtree(self.served_export, ignore_errors=True)
    self.served_export = path


def weight_sync(kind: str, engine: Any, *, export: Callable[[Any, str], None],
                export_dir: str, lead: bool) -> InMemorySync | DiskSync:
  """The sync for `engine` of `kind` (config key rollout.engine: "jax" or "sglang")."""
  if kind == "jax":
    return InMemorySync(engine)
  if kind == "sglang":
    return DiskSync(engine, export, export_dir, lead)
  raise ValueError(f"rollout.engine must be 'jax' or 'sglang', got {kind!r}")
