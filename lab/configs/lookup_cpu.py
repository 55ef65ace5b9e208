"""The main job and the GRPO-vs-C-GRPO comparison: reference questions with the browser tools.

    bash scripts/demo.sh                           # :sft (with scripts/cold_start.sh's gate), :main
    bash scripts/reproduce_shortcuts.sh [OUT_DIR]  # per world: :sft, then GRPO and C-GRPO on :stale

"X, a painter, studied at something (link 417). Is that a city or an organization?" The
relation's usual kind is right on 80% of training questions and half the held-out ones; only
the glossary page of the question's link, opened and read, always answers (lab/world/lookup.py).
`:sft` imitates an expert that searches, opens and cites on one of two samples and answers the
usual kind without a tool on the other; copying the link into the query is learned suddenly at
a seed-dependent step, hence 900 steps with a final decay and the gate. `:main` is 50 C-GRPO
steps; `:stale` gives a quarter of each relation's training shortcut questions a page stating
the other kind, so the outcome reward pays reading no more than the shortcut; `:moe` is
`:main` for 30 steps as a mixture of experts (`moe_variant`). No variant: RL
with held-out avg@2 every 25 steps. Results: docs/results.md.
"""
from lab.configs import lab_config, sft_section


def lookup_world(c) -> None:
  """The world and model every stage uses."""
  c.model.preset = "demo_dense"
  c.model.output_vocab = "task"
  c.judge.backend = "gold"  # the synthetic world's own answers; no API key
  c.world.style = "reference"
  c.world.entities = 400
  c.world.questions = 400
  c.world.eval_fraction = 0.25  # 100 held out, 50 of them evidence-only
  c.world.shortcut_fraction = 0.8
  c.world.eval_shortcut_fraction = 0.5
  c.world.distractors = 0
  c.world.prompt = "brief"  # browser.search and browser.open
  c.rollout.max_turn_tokens = 64
  c.rollout.max_context_tokens = 640  # a prompt is ~280 tokens, a cited expert episode
  # (search, open, answer) at most ~580
  c.rollout.max_tool_calls = 2
  c.batch.row_lengths = (640,)  # one episode per row
  c.batch.logprob_chunk = 128
  c.batch.loss_positions_multiple = 64
  c.batch.prefix_multiple = 64  # the 193-token system turn: 192 computed once per batch
  # (in training and in the engine's batches of prompts)
  c.optim.weight_decay = 0.0


def moe_variant(c) -> None:
  """The main job as a mixture of experts, for routing replay (scripts/reproduce_replay.sh):
  the cold start's policy upcycled (lab/upcycle.py: 8 experts, 2 per token, near-tied
  routers) and sampled in bfloat16 against the float32 trainer, so that the engine's routes
  and the trainer's differ; `model.routing_replay` is set per run."""
  c.model.preset = "demo_moe"
  c.rollout.engine_dtype = "bfloat16"
  c.batch.prefix_multiple = 0  # a shared prefix is for dense models
  c.train.num_steps = 30


def get_config(arg=None):
  """`arg` "sft": the cold start; "main": the main job's C-GRPO run; "stale": the comparison's
  RL, "main" on stale training pages; none: RL with held-out evaluation every 25 steps."""
  c = lab_config()
  lookup_world(c)
  if arg == "sft":
    c.sft = sft_section()
    c.sft.data = "expert"
    c.sft.expert_answer = "lookup"
    c.sft.expert_search_results = 1
    c.sft.expert_max_hops = 1
    c.sft.expert_samples = 2  # one cited reply and one shortcut per question
    c.sft.expert_known_fraction = 1.0  # the shortcut answers the relation's usual kind
    c.sft.batch_size = 16
    c.sft.epochs = 30  # 600 episodes, 37 batches each: 1110 steps at most
    c.sft.num_steps = 900  # the link copy is learned at a seed-dependent step
    c.optim.learning_rate = 3e-3
    c.optim.warmup_steps = 5
    c.optim.decay_steps = 100  # the last 100 steps settle the policy
    c.optim.decay_from = c.sft.num_steps - c.optim.decay_steps
    c.checkpoint.every = 50
    return c
  if arg not in (None, "main", "stale", "moe"):
    raise ValueError(f"unknown variant {arg!r} of lab/configs/lookup_cpu.py; known: sft, main, "
                     f"stale, moe")
  c.loss.importance_sampling = "icepop"  # as the release
  c.batch.skip_zero_gradient = True  # most groups here are all right or all wrong
  c.data.prompts_per_step = 8
  c.data.group_size = 8
  c.optim.learning_rate = 3e-4
  c.optim.warmup_steps = 3
  c.train.num_steps = 50
  c.train.eval_every = 25
  c.train.eval_questions = 64
  c.train.eval_samples = 2
  c.checkpoint.every = 10
  if arg == "stale":
    c.world.stale_fraction = 0.25  # of each relation's training shortcut questions
    c.train.num_steps = 30
  if arg == "moe":
    moe_variant(c)
  if arg in ("main", "stale", "moe"):  # held-out avg@4 at the start and the end only
    c.train.eval_every = c.train.num_steps
    c.train.eval_samples = 4
  return c
