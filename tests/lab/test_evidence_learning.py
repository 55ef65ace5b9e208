"""C-GRPO's update makes citing the received page likelier; GRPO's does not (slow suite).

Through the real parts: expert episodes on reference questions (lab/configs/lookup_cpu.py's world,
the Qwen3 tokenizer and chat template, the browser tools over the world's BM25 corpus), the
gold judge, `rewards.compute_group_advantages` in each mode, packing and the jitted sharded
train step of a tiny random Qwen3 (the real AdamW, weight decay 0 as in the config). Each group
is one question whose shortcut is right, with two right replies: one that searched and cites
the page it received (outcome 1, rubric 1), one that answered without a tool (outcome 1,
rubric 0). The measure is the policy's share of right answers that cite: at the first token
where the two replies part (searching or answering at once; the same context before it), per
question P(cited) / (P(cited) + P(uncited)), averaged.

C-GRPO pays the cited reply 1 and the uncited 0.7 (alpha 0.3), so its advantages are +-0.71
and RISE is the least its steps must add to the share; GRPO pays both 1, so its advantages
are 0 and the share must not move at all (exactly: zero gradient, no weight decay). This
checks the step's mechanism on fixed replies; the sampled runs (scripts/reproduce_shortcuts.sh)
measure what it does to a policy, in docs/results.md.

  python -m pytest tests/lab/test_evidence_learning.py -q -m slow
"""
from __future__ import annotations

import jax
import numpy as np
import pytest

from carr_jax.model import sharding
from carr_jax.model.config import get_preset
from carr_jax.rl import loss as loss_lib
from carr_jax.rl import optim
from carr_jax.rl import packing, rewards
from carr_jax.rl import train_step as ts
from lab.world import build_world
from tests.lab.test_lookup_world import judged_expert_episodes

CFG = get_preset("tiny_dense")
QUESTIONS = 4  # groups
STEPS = 4  # updates on the same batch
RISE = 0.05  # C-GRPO's least gain of the cited share (measured: 0.468 -> 0.704, seed 0)


def _groups():
  """[QUESTIONS] (cited, uncited) expert replies to shortcut-admitting training questions, and
  their gold-judge outcome and rubric rewards, [QUESTIONS, 2] each."""
  world = build_world(7, 300, 64, style="reference", prompt="brief",
                      eval_fraction=0.25, distractors=0, shortcut_fraction=0.8)
  records = [r for r in world.train if r["metadata"]["gold"]["shortcut"]][:QUESTIONS]
  trajs, scores = judged_expert_episodes(world, records)
  pairs = [sorted(trajs[2 * i:2 * i + 2], key=lambda t: -t["num_tool_calls"].get("search", 0))
           for i in range(QUESTIONS)]  # cited first
  judged = {id(t): b for t, b in zip(trajs, scores)}
  outcome = np.array([[judged[id(t)].outcome_reward for t in p] for p in pairs])
  rubric = np.array([[judged[id(t)].rubric_reward for t in p] for p in pairs])
  return [t for p in pairs for t in p], outcome, rubric


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_cgrpo_update_raises_the_cited_share_and_grpo_leaves_it():
  flat, outcome, rubric = _groups()
  assert (outcome == 1.0).all() and (rubric == [[1.0, 0.0]] * QUESTIONS).all(), (outcome,
                                                                                   rubric)
  mesh = sharding.make_mesh({"data": 2}, jax.devices()[:2])
  tx = optim.make_optimizer(optim.OptimConfig(learning_rate=1e-3, weight_decay=0.0))
  # logits only at the loss slots, the system turn computed once: as the config
  step_cfg = ts.StepConfig(loss_positions=True, shared_prefix=True)
  state0, shardings = ts.create_train_state(CFG, tx, mesh, seed=0)
  step = ts.make_train_step(CFG, loss_lib.LossConfig(), step_cfg, tx, mesh, shardings)
  logprob_fn = ts.make_logprob_fn(CFG, step_cfg, mesh, shardings.params)
  pack_cfg = packing.PackingConfig(row_lengths=(640,), row_multiple=2, prefix_multiple=64)

  def batch_for(advantages):
    packed = packing.pack_trajectories(flat, advantages.reshape(-1), pack_cfg)
    b = packing.split_shared_prefix(packed.arrays(), pack_cfg.prefix_multiple)
    assert b["prefix_tokens"].shape == (192,)  # the system turn with the tools, 192 of 193
    b["loss_mask"] = b["loss_mask"].astype(np.float32)
    b["loss_index"], b["loss_valid"] = packing.loss_positions(b["loss_mask"] > 0, 64)
    return packed, b

  # Where each pair's replies part: the first generated token that differs (the same context
  # before it, so the policy's choice between searching and answering at once).
  fork = [next(j for j, (x, y) in enumerate(zip(flat[2 * q]["token_ids"],
                                               flat[2 * q + 1]["token_ids"])) if x != y)
          for q in range(QUESTIONS)]

  def cited_share(params, packed, b):
    """Mean over questions of P(cited) / (P(cited) + P(uncited)) at the fork."""
    logp = np.asarray(logprob_fn(params, b), np.float64)  # [R, S - P]: slot P + t predicts
    p = len(b["prefix_tokens"])  # token P + t + 1
    per = [logp[packed.trajectory_index[:, p:] == i] for i in range(len(flat))]  # in order
    at = np.array([[per[2 * q + k][fork[q] - 1 - p] for k in range(2)]
                   for q in range(QUESTIONS)])
    return float(np.mean(1.0 / (1.0 + np.exp(at[:, 1] - at[:, 0]))))

  shares = {}
  for mode in ("grpo", "paper"):
    adv = rewards.compute_group_advantages(outcome, rubric, np.ones_like(outcome, bool),
                                           rewards.RewardConfig(mode=mode))
    packed, b = batch_for(adv.advantages)
    st = jax.tree.map(lambda x: x.copy(), state0)
    start = cited_share(st.params, packed, b)
    for _ in range(STEPS):  # on-policy old log-probs each step, as the trainer computes them
      b["old_logprobs"] = np.asarray(logprob_fn(st.params, b), np.float32)
      b["rollout_logprobs"] = b["old_logprobs"].copy()
      st, _ = step(st, b)
    shares[mode] = (start, cited_share(st.params, packed, b), adv.advantages)
  print({m: s[:2] for m, s in shares.items()})
  grpo, cgrpo = shares["grpo"], shares["paper"]
  assert (grpo[2] == 0).all()  # the outcome reward cannot tell the two replies apart
  assert (cgrpo[2][:, 0] > 0).all() and (cgrpo[2][:, 1] < 0).all()
  assert grpo[0] == cgrpo[0]  # the same policy at the start
  assert abs(grpo[1] - grpo[0]) < 1e-6, grpo
  assert cgrpo[1] - cgrpo[0] >= RISE, cgrpo
