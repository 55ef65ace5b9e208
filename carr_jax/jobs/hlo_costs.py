"""Per-chip traffic of a compiled XLA program, read from its optimized HLO text
(`jax.jit(f).lower(...).compile().as_text()`): bytes each chip sends over the chip
interconnect in collectives, and bytes it reads from and writes to HBM. `program_costs(text)`
returns both, and the runs of each TPU kernel (Pallas / Mosaic custom calls, e.g. splash
attention's forward); `carr_jax.jobs.aot` turns them into roofline times.

Loops count as often as they run. XLA's own `compiled.cost_analysis()` counts a while
loop's body once, so a step whose layers run in a scan is undercounted by the layer count
(and again by the micro-batch count). Here a loop's body and condition count trip-count
times, nested loops the product of their trip counts. The trip count is XLA's
`known_trip_count` annotation where the backend writes one (CPU does), else it is read off
the loop: the condition compares the counter with an integer constant N (`counter < N`,
XLA's form for `lax.scan` and `fori_loop`) and the counter starts at a constant (TPU's HLO
has no annotation). A loop matching neither counts once and is reported in
`unknown_loops`. Of a conditional's branches the costliest counts.

Collective bytes per chip, for an op over groups of n chips whose operands hold b bytes
per chip (sharded HLO: every shape is one chip's): all-gather (n - 1) b, reduce-scatter and
all-to-all (n - 1) / n b, all-reduce 2 (n - 1) / n b, collective-permute b. These are what a
bandwidth-optimal (ring) algorithm sends per chip, and also the least a chip must receive,
so bytes / (a chip's ICI bandwidth) is a lower bound on the op's time. n comes from
`replica_groups` in any of XLA's three notations; with no groups it is every device. An
async pair (`all-gather-start` / `-done`, or `async-start` around a collective) counts once.

HBM bytes: every instruction outside fusions reads its operands and writes its result;
a fusion reads its operands and writes its result at its boundary (what it does inside
stays on chip). As in XLA's own cost model, a fused operand used only by (dynamic-)slices,
also inside nested fusions, is read as the slices' bytes, and a result made by a
dynamic-update-slice into an operand (in place) writes only the update; top-level slices
and updates likewise. Unlike XLA's model, slices are also followed through bitcasts,
reshapes, copies, converts and pads (a slice of a pad is taken to read the same share of
its operand): TPU's windowed matmul loops read one window of the activations per trip so.
Operands and results that XLA's memory-space assignment put in on-chip memory (layout
`S(1)`, VMEM on TPU; any `S(n)`, n > 0) are left out; bookkeeping ops (tuples, bitcasts,
parameters, constants, the `-done` half of an async pair, buffer allocations) move nothing.
An estimate of what the program moves, not a lower bound on any program.
"""
from __future__ import annotations

import collections
import dataclasses
import math
import re

COLLECTIVES = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all",
               "collective-permute")
# Ops that move no HBM bytes of their own (async work counts at its `-start`).
FREE_OPS = {"parameter", "constant", "get-tuple-element", "tuple", "bitcast", "while",
            "conditional", "call", "after-all", "add-dependency", "partition-id", "replica-id",
            "opt-barrier", "domain", "async-start", "async-update", "async-done", "call-start",
            "call-done", "copy-done", "all-gather-done", "all-reduce-done",
            "collective-permute-done", "send-done", "recv-done"}
SLICES = {"slice", "dynamic-slice"}
# A slice of their result reads the same share of their (first) operand.
PASS_THROUGH = {"bitcast", "reshape", "copy", "convert", "pad"}
_ARRAY = re.compile(r"([a-z][a-z0-9]*)\[([0-9,<=]*)\](?:\{([^}]*)\})?")
_INSTRUCTION = re.compile(r"\s*(ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*)", re.DOTALL)
_HEADER = re.compile(r"(ENTRY\s+)?%?([\w.\-]+)\s*\(")


@dataclasses.dataclass(frozen=True)
class Instruction:
  name: str
  shape: str  # e.g. "f32[8,128]{1,0}" or a tuple "(s32[], bf16[2,64]{1,0:T(8,128)S(1)})"
  opcode: str
  operands: tuple[str, ...]  # names of the instructions it reads
  args: str  # the text between its parentheses: a parameter's index, a constant's value
  attributes: str  # everything after them: replica_groups=..., calls=..., backend_config=...


@dataclasses.dataclass
class Computation:
  name: str
  instructions: dict[str, Instruction]  # in program order
  root: str = ""


@dataclasses.dataclass
class Module:
  computations: dict[str, Computation]
  entry: str
  num_devices: int  # `num_partitions` x `replica_count` of the module header


@dataclasses.dataclass
class Costs:
  """Per chip, for one run of the program."""
  ici_bytes: dict[str, float]  # collective kind -> bytes sent
  ici_ops: dict[str, float]  # collective kind -> ops run (loop trips included)
  hbm_bytes: float
  unknown_loops: int  # runs of loops whose trip count could not be read, each counted once
  kernels: dict[str, float] = dataclasses.field(default_factory=dict)  # TPU kernel -> runs

  @property
  def ici_total(self) -> float:
    return sum(self.ici_bytes.values())


# ------------------------------------------------------------------ parsing

def _balanced(text: str, start: int) -> int:
  """Index just past the bracket group opening at text[start]."""
  depth = 0
  for i in range(start, len(text)):
    depth += {"(": 1, "{": 1, "[": 1, ")": -1, "}": -1, "]": -1}.get(text[i], 0)
    if depth == 0:
      return i + 1
  raise ValueError(f"unbalanced HLO text: {text[start:start + 80]!r}")


def parse_instruction(line: str) -> tuple[Instruction, bool] | None:
  """(instruction, is root) of one HLO line, or None for a line that is not one."""
  found = _INSTRUCTION.match(line)
  if not found:
    return None
  rest = found.group(3)
  end = _balanced(rest, 0) if rest.startswith("(") else rest.index(" ")
  shape, rest = rest[:end], rest[end:].lstrip()
  opcode = re.match(r"[\w\-]+", rest)
  if not opcode or rest[opcode.end():opcode.end() + 1] != "(":
    return None
  close = _balanced(rest, opcode.end())
  args = rest[opcode.end() + 1:close - 1]
  operands = tuple(re.findall(r"%([\w.\-]+)", args))
  return Instruction(found.group(2), shape, opcode.group(0), operands, args,
                     rest[close:]), bool(found.group(1))


def parse_module(text: str) -> Module:
  computations, entry, current, pending = {}, "", None, []

  def flush():  # an instruction may span lines (a custom call's kernel metadata)
    parsed = parse_instruction("\n".join(pending)) if pending else None
    if parsed:
      inst, is_root = parsed
      current.instructions[inst.name] = inst
      current.root = inst.name if is_root else current.root
    pending.clear()

  for line in text.splitlines():
    if current is None:
      header = _HEADER.match(line)
      if header and line.rstrip().endswith("{") and not line.startswith("HloModule"):
        current = Computation(header.group(2), {})
        computations[current.name] = current
        entry = current.name if header.group(1) else entry
    elif line == "}" or line.startswith("}, "):  # "}, execution_thread=..." on TPU
      flush()
      current = None
    elif _INSTRUCTION.match(line) and line.startswith(" "):
      flush()
      pending.append(line)
    elif pending:
      pending.append(line)
  partitions = re.search(r"num_partitions=(\d+)", text)
  replicas = re.search(r"replica_count=(\d+)", text)
  devices = int(partitions.group(1)) if partitions else 1
  devices *= int(replicas.group(1)) if replicas else 1
  return Module(computations, entry, devices)


def arrays(shape: str) -> list[tuple[str, int, bool]]:
  """(dtype and dims, bytes, in HBM) of each array in a shape, tuples flattened."""
  out = []
  for dtype, dims, layout in _ARRAY.findall(shape):
    width = re.match(r"[a-z]+(\d+)", dtype)  # bf16 -> 16, f8e4m3fn -> 8; token: no data
    bits = 8 if dtype == "pred" else int(width.group(1)) if width else 0
    count = math.prod(int(d.replace("<=", "")) for d in dims.split(",") if d)
    space = re.search(r"S\((\d+)\)", layout or "")
    out.append((f"{dtype}[{dims}]", count * bits // 8, not space or space.group(1) == "0"))
  return out


def hbm_bytes(shape: str) -> int:
  return sum(size for _, size, in_hbm in arrays(shape) if in_hbm)


def array_bytes(shape: str) -> int:
  return sum(size for _, size, _ in arrays(shape))


def called(inst: Instruction, key: str) -> list[str]:
  """Computation names in attribute `key` (calls=%a or branch_computations={%a, %b})."""
  found = re.search(rf"\b{key}=(\{{[^}}]*\}}|%?[\w.\-]+)", inst.attributes)
  return re.findall(r"[\w.\-]+", found.group(1).lstrip("%")) if found else []


# ------------------------------------------------------------------ collectives

def group_size(attributes: str, num_devices: int) -> int:
  """Chips per replica group: `mesh[axis sizes] {axes}` (the product of the listed axes'
  sizes; no list: all axes), `[groups,size]<=[...]` (iota), `{{0,1},{2,3}}` (listed), or,
  with no groups, every device."""
  mesh = re.search(r"replica_groups=mesh\[([^\]]*)\](\s*\{[^}]*\})?", attributes)
  if mesh:
    sizes = {a: int(n) for a, n in re.findall(r"'([^']+)'=(\d+)", mesh.group(1))}
    axes = re.findall(r"'([^']+)'", mesh.group(2) or "") or sizes
    return math.prod(sizes[a] for a in axes)
  iota = re.search(r"replica_groups=\[(\d+),(\d+)\]<=", attributes)
  if iota:
    return int(iota.group(2))
  listed = re.search(r"replica_groups=\{\{([^}]*)\}", attributes)
  return len(listed.group(1).split(",")) if listed else num_devices


def collective_bytes(kind: str, n: int, operand_bytes: float) -> float:
  """Bytes one chip sends for a collective over groups of n chips (module docstring)."""
  if kind == "collective-permute":
    return operand_bytes
  factor = {"all-gather": n - 1, "all-reduce": 2 * (n - 1) / n}.get(kind, (n - 1) / n)
  return factor * operand_bytes


def kernel_name(inst: Instruction) -> str | None:
  """The TPU kernel a custom call runs (XLA names the instruction after it, plus a `.N`
  suffix: `splash_mha_fwd_segmented_residuals.3`); None for any other instruction."""
  if inst.opcode != "custom-call" or 'custom_call_target="tpu_custom_call"' not in \
      inst.attributes:
    return None
  return inst.name.split(".")[0]


def collective_kind(opcode: str) -> str | None:
  base = opcode.removesuffix("-start")
  return base if base in COLLECTIVES else None


# ------------------------------------------------------------------ loops

def _constant_value(comp: Computation, name: str) -> int | None:
  """The integer constant `name` is, through copies and bitcasts."""
  inst = comp.instructions.get(name)
  while inst is not None and inst.opcode in ("copy", "bitcast", "convert") and inst.operands:
    inst = comp.instructions.get(inst.operands[0])
  if inst is not None and inst.opcode == "constant" and re.fullmatch(r"-?\d+", inst.args):
    return int(inst.args)
  return None


def trip_count(module: Module, caller: Computation, loop: Instruction) -> int | None:
  """How many times `loop` (a while) runs its body; None when it cannot be read."""
  known = re.search(r'"known_trip_count":\{"n":"(\d+)"\}', loop.attributes)
  if known:
    return int(known.group(1))
  cond = module.computations[called(loop, "condition")[0]]
  limits = [int(i.args) for i in cond.instructions.values() if i.opcode == "constant"
            and re.fullmatch(r"[su]\d+\[\]", i.shape.split("{")[0]) and
            re.fullmatch(r"-?\d+", i.args)]
  counters = [i for i in cond.instructions.values() if i.opcode == "get-tuple-element"
              and re.fullmatch(r"[su]\d+\[\]", i.shape.split("{")[0])]
  compares = [i for c in [cond] + [module.computations[n] for i in cond.instructions.values()
                                   for n in called(i, "calls")]
              for i in c.instructions.values() if i.opcode == "compare"]
  init = caller.instructions.get(loop.operands[0])
  if (len(limits) != 1 or len(counters) != 1 or len(compares) != 1 or init is None
      or init.opcode != "tuple"):
    return None
  index = int(re.search(r"index=(\d+)", counters[0].attributes).group(1))
  start = _constant_value(caller, init.operands[index])
  direction = re.search(r"direction=(\w+)", compares[0].attributes).group(1)
  if start is None or direction not in ("LT", "LE"):
    return None
  return max(0, limits[0] - start + (direction == "LE"))


# ------------------------------------------------------------------ HBM bytes

def read_share(module: Module, fused: Computation, name: str) -> float:
  """Share of fused instruction `name`'s bytes its fusion reads (at most 1): the sum of its
  slices' shares when every use is a (dynamic-)slice or, recursively, a pass-through op or a
  nested fusion's parameter; nothing for the target of an in-place update; else 1."""
  users = [u for u in fused.instructions.values() if name in u.operands]
  if not users or name == fused.root:
    return 1.0
  share = 0.0
  for user in users:
    if user.opcode in SLICES and user.operands[0] == name:
      share += array_bytes(user.shape) / max(1, array_bytes(fused.instructions[name].shape))
    elif user.opcode == "dynamic-update-slice" and user.operands[0] == name:
      continue  # updated in place: not read (the update itself is another operand)
    elif user.opcode in PASS_THROUGH and user.operands[0] == name:
      share += read_share(module, fused, user.name)
    elif user.opcode == "fusion":
      nested = module.computations[called(user, "calls")[0]]
      params = {int(i.args): i.name for i in nested.instructions.values()
                if i.opcode == "parameter"}
      share += sum(read_share(module, nested, params[k])
                   for k, operand in enumerate(user.operands) if operand == name)
    else:
      return 1.0
  return min(share, 1.0)


def fusion_hbm_bytes(module: Module, fusion: Instruction, fused: Computation) -> float:
  """Bytes a fusion reads and writes in HBM at its boundary (module docstring)."""
  read = sum(hbm_bytes(i.shape) * read_share(module, fused, i.name)
             for i in fused.instructions.values() if i.opcode == "parameter")
  root = fused.instructions[fused.root]
  parts = [fused.instructions[n] for n in root.operands] if root.opcode == "tuple" else [root]
  outputs = arrays(fusion.shape)
  if len(outputs) != len(parts):
    return read + hbm_bytes(fusion.shape)
  written = sum(
      (array_bytes(fused.instructions[p.operands[1]].shape)
       if p.opcode == "dynamic-update-slice" else size)
      for p, (_, size, in_hbm) in zip(parts, outputs) if in_hbm)
  return read + written


def instruction_hbm_bytes(comp: Computation, inst: Instruction) -> int:
  """Bytes an unfused, non-fusion instruction reads and writes in HBM."""
  if inst.opcode in FREE_OPS or 'custom_call_target="AllocateBuffer"' in inst.attributes:
    return 0
  if inst.opcode in SLICES:
    return 2 * hbm_bytes(inst.shape)
  if inst.opcode == "dynamic-update-slice":
    return 2 * hbm_bytes(comp.instructions[inst.operands[1]].shape)
  operand_shapes = [comp.instructions[o].shape for o in inst.operands if o in comp.instructions]
  read = sum(hbm_bytes(s) for s in operand_shapes)
  results = arrays(inst.shape)
  if inst.opcode.endswith("-start") and inst.shape.startswith("("):
    # The async op's tuple holds its operands (aliased), its results and scalar contexts.
    for key, _, _ in (a for s in operand_shapes for a in arrays(s)):
      match = next((r for r in results if r[0] == key), None)
      if match:
        results.remove(match)
    results = [r for r in results if not re.fullmatch(r"[su]32\[\]", r[0])]
  return read + sum(size for _, size, in_hbm in results if in_hbm)


# ------------------------------------------------------------------ the walk

def program_costs(text: str, num_devices: int | None = None) -> Costs:
  """Collective and HBM bytes per chip of one run of the compiled program `text`."""
  module = parse_module(text)
  devices = num_devices or module.num_devices
  memo: dict[tuple[str, bool], collections.Counter] = {}

  def walk(name: str, fused: bool) -> collections.Counter:
    """Costs of computation `name`; inside a fusion only its collectives count."""
    if (name, fused) not in memo:
      comp, total = module.computations[name], collections.Counter()
      for inst in comp.instructions.values():
        total += visit(comp, inst, fused)
      memo[name, fused] = total
    return memo[name, fused]

  def visit(comp: Computation, inst: Instruction, fused: bool) -> collections.Counter:
    costs = collections.Counter()
    kind = collective_kind(inst.opcode)
    if kind:
      operands = sum(array_bytes(comp.instructions[o].shape) for o in inst.operands
                     if o in comp.instructions)
      n = group_size(inst.attributes, devices)
      costs["ici " + kind] += collective_bytes(kind, n, operands)
      costs["ops " + kind] += 1
    kernel = kernel_name(inst)
    if kernel:
      costs["kernel " + kernel] += 1
    if inst.opcode == "while":
      trips = trip_count(module, comp, inst)
      costs["unknown loops"] += trips is None
      body = walk(called(inst, "body")[0], fused) + walk(called(inst, "condition")[0], fused)
      costs.update({k: v * (1 if trips is None else trips) for k, v in body.items()})
    elif inst.opcode == "conditional":
      branches = called(inst, "branch_computations") or (
          called(inst, "true_computation") + called(inst, "false_computation"))
      costs += max((walk(b, fused) for b in branches),
                   key=lambda c: sum(v for k, v in c.items() if k.startswith(("ici", "hbm"))))
    elif inst.opcode == "fusion":
      costs += walk(called(inst, "calls")[0], True)
      if not fused:
        fused_comp = module.computations[called(inst, "calls")[0]]
        costs["hbm"] += fusion_hbm_bytes(module, inst, fused_comp)
    elif inst.opcode in ("call", "call-start", "async-start"):
      for name in called(inst, "calls") or called(inst, "to_apply"):
        costs += walk(name, fused)
    if not fused and inst.opcode != "fusion":
      costs["hbm"] += instruction_hbm_bytes(comp, inst)
    return costs

  total = walk(module.entry, False)
  return Costs({k[4:]: v for k, v in total.items() if k.startswith("ici ")},
               {k[4:]: v for k, v in total.items() if k.startswith("ops ")},
               float(total["hbm"]), int(total["unknown loops"]),
               {k[7:]: v for k, v in total.items() if k.startswith("kernel ")})
