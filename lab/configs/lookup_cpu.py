"""The main job's world and the GRPO-vs-C-GRPO comparison's: reference questions.

    bash scripts/demo.sh                          # the main job: SFT, then C-GRPO (:main)
    bash scripts/reproduce_shortcuts.sh [OUT_DIR] # per seed: SFT, then GRPO and C-GRPO from it
                                                  # on stale training pages (:stale)

which run, from the CLIs, for seed k:

    python -m carr_jax.sft --config lab/configs/lookup_cpu.py:sft --workdir OUT/sft_seedk \
        --config.seed=k
    python -m carr_jax.train --config lab/configs/lookup_cpu.py:stale --workdir OUT/cgrpo_seedk \
        --config.checkpoint.init_dir=OUT/sft_seedk/checkpoints --config.seed=k
    python -m carr_jax.train --config lab/configs/lookup_cpu.py:stale --workdir OUT/grpo_seedk \
        --config.checkpoint.init_dir=OUT/sft_seedk/checkpoints --config.seed=k \
        --config.reward.mode=grpo

(`:main` in place of `:stale` gives the main job and its GRPO control; no variant: the RL
run on the main job's world with held-out avg@2 every 25 steps.)

Reference questions (`world.style="reference"`, lab/world/lookup.py) ask the kind
of the thing a named subject's relation points to, and give each question its own link
number: "X, a painter, studied at something (link 417). Is that a city or an organization?"
The relation's usual kind is a shortcut, right on 80% of the training questions
(`world.shortcut_fraction`) and on half of the held-out ones
(`world.eval_shortcut_fraction`); on the others only the glossary page of the
question's own link tells the answer (the evidence-only split). The prompt offers
browser.search and browser.open; searching "glossary link 417" ranks that page first, its
listing names the link but not the kind, so the page must be opened; the gold judge's rubric
reward is 1 only for an answer that cites the opened page and whose exact answer is the kind
its body states.

The cold start (`:sft`) imitates the "lookup" expert: on one of a question's two samples it
searches, opens the first result and answers what the page says, citing it; on the other it answers the relation's
usual kind without a tool (the shortcut, wrong on exceptions). Copying the question's link
into the query is learned as a sudden transition at a seed-dependent SFT step (before 400 on
two of five seeds measured, between 400 and 900 on the others; one had copied on 20% of
held-out questions at 600), hence 900 steps, the last 100 decaying the learning rate to 0
(without the decay one seed's cold start looped on a quarter of its episodes). RL then
decides between the two: the outcome reward pays the search only on exceptions, C-GRPO's
rubric term pays it on every right answer. On the main job's world the page is right on
every training question and the shortcut on 80%, so the outcome reward pays reading too, and
GRPO learns it from a cold start that reads. `:stale` gives a quarter of each relation's
training shortcut questions a stale glossary page, one stating the other kind
(`world.stale_fraction`; held-out pages are never stale, the cold start never sees one):
then the page and the shortcut are each right on ~80% of training questions, the outcome
reward pays reading no more than the shortcut, and only C-GRPO's rubric term, paid for a
right answer its cited page supports, tells them apart. Measured results, over seeds:
docs/results.md.
"""
from configs import base
from lab.configs import sft_section


def lookup_world(c) -> None:
  """The world and model every stage uses."""
  c.model.preset = "demo_dense"
  c.model.output_vocab = "world"
  c.judge.backend = "gold"  # the synthetic world's own answers; no API key
  c.world.style = "reference"
  c.world.entities = 400
  c.world.questions = 400
  c.world.eval_fraction = 0.25  # 100 held out, 50 of them evidence-only
  c.world.shortcut_fraction = 0.8
  c.world.eval_shortcut_fraction = 0.5
  c.world.min_hops = 1
  c.world.max_hops = 1
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


def get_config(arg=None):
  """`arg` "sft": the cold start; "main": the main job's C-GRPO run; "stale": the comparison's
  RL, "main" on stale training pages; none: RL with held-out evaluation every 25 steps."""
  c = base.get_config()
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
    c.sft.num_steps = 900  # the link copy is learned at a seed-dependent step, 250 to 900
    c.optim.learning_rate = 3e-3
    c.optim.warmup_steps = 5
    c.optim.decay_steps = 100  # the last 100 steps settle the policy (docs/results.md)
    c.optim.decay_from = c.sft.num_steps - c.optim.decay_steps
    c.checkpoint.every = 50
    return c
  if arg not in (None, "main", "stale"):
    raise ValueError(f"unknown variant {arg!r} of lab/configs/lookup_cpu.py; known: sft, main, "
                     f"stale")
  c.loss.importance_sampling = "icepop"  # as the release
  c.data.prompts_per_step = 8
  c.data.group_size = 8
  c.optim.learning_rate = 3e-4
  c.optim.warmup_steps = 3
  c.train.num_steps = 50  # 40 left seed 3's shortcut rate at 0.07 (docs/results.md)
  c.train.eval_every = 25
  c.train.eval_questions = 64
  c.train.eval_samples = 2
  c.checkpoint.every = 10
  if arg == "stale":
    c.world.stale_fraction = 0.25  # of each relation's training shortcut questions
    c.train.num_steps = 30  # the evidence-only lead was +0.39 to +0.63 at step 30, 3 seeds
  if arg in ("main", "stale"):  # held-out avg@4 at the start and the end only
    c.train.eval_every = c.train.num_steps
    c.train.eval_samples = 4
  return c
