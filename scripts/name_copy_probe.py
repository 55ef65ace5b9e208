"""How fast the CPU demo's policy learns to copy the question's head name into its first search.

    python scripts/name_copy_probe.py --marks bold --steps 400     # names in **bold**
    python scripts/name_copy_probe.py --marks plain --steps 400    # names as plain words

Every expert episode on the named world starts by searching the head entity's name, which the
question states; a policy that cannot copy it cannot solve anything. This probe isolates that
one skill: it trains the `demo_dense` model (real Qwen3 tokenizer and chat format, output
softmax over the ids the examples use) on the user turn plus the expert's first tool call of
the questions of worlds 1..12, with the loss on the call's tokens, and prints every 50 steps
the greedy hit rate of the name's first token on all questions of world 0 (no world-0 name or
question is trained on). Results are in docs/results.md.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from transformers import AutoTokenizer

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from carr_jax.model import qwen3 as model_lib  # noqa: E402
from carr_jax.model.config import get_preset  # noqa: E402
from carr_jax.model.restricted_vocab import RestrictedVocab  # noqa: E402
from carr_jax.model.tokenizer import ensure_tokenizer  # noqa: E402
from carr_jax.world import build_world  # noqa: E402
from rollout import chat  # noqa: E402

WORLD = dict(eval_fraction=0.25, shortcut_fraction=0.5, min_hops=1, max_hops=2, style="named",
             locality=0.8, distractors=0, short_names=True, prompt="brief")


def examples(fmt: chat.ChatFormat, seed: int, marks: bool) -> list[tuple[list[int], int, int]]:
  """(token ids, first call token, index of the name's first token) per question of a world."""
  world = build_world(seed, 120, 200, mark_names=marks, **WORLD)
  out = []
  for q in world.questions:
    head = world.graph.nodes[q.walk[-1]]["name"]
    prompt = fmt.encode(chat.user_text(q.text) + "<|im_start|>assistant\n")
    call = fmt.encode(chat.completion_text(
        "Look up the next entity.", "",
        [{"name": "browser.search", "arguments": {"query": head, "num": 1}}]))
    name_id = fmt.encode(head)[0]
    k = len(prompt) + next(i for i in range(10, len(call)) if call[i] == name_id)
    out.append((prompt + call, len(prompt), k))
  return out


def pad(batch, length: int):
  toks = np.zeros((len(batch), length), np.int32)  # [B, T]
  mask = np.zeros((len(batch), length), np.float32)  # [B, T] 1 on the call's tokens
  for r, (ids, start, _) in enumerate(batch):
    toks[r, :len(ids)], mask[r, start:len(ids)] = ids, 1
  return toks, mask, (toks > 0).astype(np.int32)


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--marks", choices=("bold", "plain"), default="bold", help="name style")
  ap.add_argument("--steps", type=int, default=400, help="training steps of 32 examples")
  ap.add_argument("--lr", type=float, default=3e-3, help="AdamW learning rate")
  ap.add_argument("--save", default="", help="write the params here, a checkpoint that "
                  "--config.checkpoint.init_dir=DIR reads (a warm start for SFT)")
  args = ap.parse_args()
  fmt = chat.ChatFormat(AutoTokenizer.from_pretrained(str(ensure_tokenizer())))
  marks = args.marks == "bold"
  train = [e for seed in range(1, 13) for e in examples(fmt, seed, marks)]
  test = examples(fmt, 0, marks)
  vocab = np.array(sorted({t for ids, _, _ in train + test for t in ids}))  # [V'] sorted
  cfg = dataclasses.replace(get_preset("demo_dense"), attention="dense")
  output = RestrictedVocab(tuple(map(int, vocab)))
  length = -(-max(len(ids) for ids, _, _ in train + test) // 16) * 16

  def logits(params, toks, seg):  # -> [B, T, V']
    pos = jnp.broadcast_to(jnp.arange(length), toks.shape)
    hidden = model_lib.Qwen3(cfg).apply({"params": params}, toks, pos, seg)
    return hidden @ model_lib.unembed_matrix(params, cfg, output)

  def loss_fn(params, toks, mask, seg):
    lg = logits(params, toks, seg)[:, :-1]
    target = jnp.searchsorted(jnp.asarray(vocab), toks[:, 1:])
    nll = jax.nn.logsumexp(lg, -1) - jnp.take_along_axis(lg, target[..., None], -1)[..., 0]
    return (nll * mask[:, 1:]).sum() / mask[:, 1:].sum()

  tx = optax.adamw(args.lr, weight_decay=0.0)

  @jax.jit
  def step(params, opt, toks, mask, seg):
    loss, grads = jax.value_and_grad(loss_fn)(params, toks, mask, seg)
    updates, opt = tx.update(grads, opt, params)
    return optax.apply_updates(params, updates), opt, loss

  predict = jax.jit(lambda params, toks, seg: jnp.argmax(logits(params, toks, seg), -1))

  def hit_rate(params, batch) -> float:
    toks, _, seg = pad(batch, length)
    pred = np.asarray(predict(params, toks, seg))  # [B, T]
    return float(np.mean([vocab[pred[r, k - 1]] == ids[k] for r, (ids, _, k) in enumerate(batch)]))

  params = model_lib.init_params(cfg, jax.random.key(0))
  opt, rng, start = tx.init(params), np.random.default_rng(0), time.time()
  print(f"marks={args.marks} train={len(train)} test={len(test)} vocab={len(vocab)}", flush=True)
  for i in range(1, args.steps + 1):
    batch = [train[j] for j in rng.choice(len(train), 32, replace=False)]
    params, opt, loss = step(params, opt, *pad(batch, length))
    if i % 50 == 0:
      print(f"step {i} loss {float(loss):.3f} heldout_hit {hit_rate(params, test):.3f} "
            f"time {time.time() - start:.0f}s", flush=True)
  if args.save:
    with ocp.PyTreeCheckpointer() as checkpointer:
      checkpointer.save(os.path.join(os.path.abspath(args.save), "state"), {"params": params})


if __name__ == "__main__":
  main()
