"""Every config key of carr_jax, each documented once; experiments override a few.

Not a runnable experiment by itself (its defaults are the paper's 4B hyper-parameters with a
tiny model); see configs/lab/lookup_cpu.py for the CPU main job and configs/cgrpo_*.py for the
paper. Override any key on the command line: `--config.rollout.temperature=0.8`.

These are the only defaults of the keys: carr_jax.jobs.components builds each dataclass config
from its section, and a dataclass's own default equals the value here
(tests/test_config_single_source.py). SFT configs add the `sft` section (sft_section below).
"""
import ml_collections
from ml_collections.config_dict import placeholder


def get_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.seed = 0  # PRNG seed of init, data order and sampling

  c.model = ml_collections.ConfigDict()
  c.model.preset = "tiny_dense"  # carr_jax.model.config preset name
  c.model.param_dtype = "float32"  # master weights (fp32 for training)
  c.model.compute_dtype = "float32"  # matmul dtype; bfloat16 on TPU/GPU
  c.model.remat = "none"  # "none" | "full": recompute each layer in the backward pass
  c.model.moe_impl = "ragged"  # "ragged" (grouped matmul) | "dense" (every expert)
  c.model.attention = "auto"  # auto (by platform) | dense | blockwise | splash | cudnn
  c.model.hf_path = ""  # HF directory to initialise from ("" = random init / checkpoint)
  c.model.output_vocab = "full"  # "full" | "world" (softmax over the world's ids only; CPU demo)
  c.model.output_vocab_worlds = 0  # "world": also the ids of the worlds seeded world.seed+1..+N

  c.checkpoint = ml_collections.ConfigDict()
  c.checkpoint.init_dir = ""  # orbax checkpoint to initialise params from (e.g. after SFT)
  c.checkpoint.every = 50  # save every N steps (and at the last step)
  c.checkpoint.keep = 3  # checkpoints kept on disk
  c.checkpoint.hf_export_every = 0  # also write an HF directory every N steps (0 = never)

  # Named mesh axes (carr_jax.model.sharding); one may be -1 (all remaining devices).
  c.mesh = ml_collections.ConfigDict()
  c.mesh.data = -1
  c.mesh.fsdp = 1
  c.mesh.expert = 1
  c.mesh.tensor = 1
  c.mesh.target_devices = 0  # device count this config is written for (0 = any); checked

  c.data = ml_collections.ConfigDict()
  c.data.source = "world"  # "world" (synthetic, built in-process) | "jsonl" (CaRR records)
  c.data.train_path = ""  # CaRR-format jsonl (source=jsonl)
  c.data.eval_path = ""  # held-out jsonl, same format (optional)
  c.data.corpus_path = ""  # offline corpus jsonl for tools.backend=corpus (world: built in)
  c.data.prompts_per_step = 16  # questions per step (paper: 16)
  c.data.group_size = 8  # rollouts per question, G (paper: 8)
  c.data.epochs = 3  # passes over the training questions (paper: 3); bounds num_steps

  c.world = ml_collections.ConfigDict()  # the synthetic world (data.source="world")
  c.world.seed = 0  # its seed
  c.world.entities = 60  # its size (entities)
  c.world.questions = 40  # synthetic questions (train + eval)
  c.world.eval_fraction = 0.25  # share of synthetic questions held out for eval
  c.world.style = "deep"  # "deep" (vague clues) | "named" (head named) | "kinds" (named.py)
  # | "lookup" (kinds with glossary evidence, lookup.py) | "reference" (lookup.py: every question
  # has its own link; the relation's kind is right except on exceptions)
  c.world.min_hops = 2  # synthetic question lengths in hops ("named": from 1)
  c.world.max_hops = 4
  c.world.shortcut_fraction = 0.25  # share of (multi-hop; "lookup": all; "reference":
  # training) questions admitting a shortcut
  c.world.eval_shortcut_fraction = 0.5  # "reference": the same for held-out questions
  c.world.stale_fraction = 0.0  # "reference": share of training shortcut questions whose
  # glossary page is stale, stating the other kind (world/lookup.py)
  c.world.locality = 0.0  # chance a person studies/works in their birth city (graph.py)
  c.world.distractors = 6  # distractor sentences per synthetic page (0-6)
  c.world.short_names = False  # one-token names, one-word people (world/graph.py)
  c.world.prompt = "full"  # "full" | "brief" (2 terse tool schemas, one-line rule) | "answer"
  c.world.mark_names = False  # other entities' names in **bold**, like links (world/pages.py)

  c.rollout = ml_collections.ConfigDict()
  c.rollout.engine = "jax"  # "jax" (in-process sampler) | "sglang" (HTTP server(s))
  c.rollout.sglang_urls = ""  # comma-separated SGLang base URLs (engine=sglang)
  c.rollout.sglang_idle_timeout = 120.0  # s a weight sync waits for idle to flush the old cache
  c.rollout.sync_dir = ""  # HF exports for SGLang, latest kept ("" = workdir/sync)
  c.rollout.tokenizer_dir = ""  # Qwen3 tokenizer dir ("" = scripts/fetch_tokenizer.sh cache)
  c.rollout.temperature = 1.0  # sampling temperature (paper: 1.0); the loss uses the same
  c.rollout.top_p = 1.0  # (paper: 1.0)
  c.rollout.top_k = -1  # -1 = off
  c.rollout.max_turn_tokens = 8192  # new tokens per assistant turn
  c.rollout.max_context_tokens = 65536  # whole-episode token budget (paper: 64k)
  c.rollout.max_tool_calls = 100  # tool-call limit per episode (paper: 100)
  c.rollout.stop_on_ill_formed = True  # end the episode at the first ill-formed turn
  c.rollout.concurrency = 64  # episodes in flight at once (= SGLang requests in flight)
  c.rollout.max_batch = 64  # in-process engine: requests generated together
  c.rollout.dump_trajectories = True  # workdir/trajectories/step_N.jsonl, N as the step
  c.rollout.tool_timeout_s = 120.0  # s one tool call may take before it becomes "timeout"
  c.rollout.system_prompt = placeholder(str)  # system message before the tool schemas (None: none)

  c.tools = ml_collections.ConfigDict()
  c.tools.backend = "corpus"  # "corpus" (offline BM25) | "web" (search + reader APIs)
  # The keys below configure backend=web (rollout.tools.web.WebConfig).
  c.tools.search_url = "https://google.serper.dev/search"  # Serper-compatible search endpoint
  c.tools.search_key_env = "SERPER_API_KEY"  # env var holding the search API key
  c.tools.reader_url = "https://r.jina.ai"  # Jina-compatible reader base URL
  c.tools.reader_key_env = "JINA_API_KEY"  # env var holding the reader API key
  c.tools.allow_private = False  # allow loopback/private URLs (tests only)
  c.tools.timeout_s = 30.0  # s per HTTP attempt of the search / reader
  c.tools.attempts = 3  # tries per HTTP request, the first included
  c.tools.backoff_s = 0.5  # retry k waits uniform(0, backoff_s * 2**(k-1))
  c.tools.backoff_max_s = 30.0  # s; the longest wait between tries, Retry-After included
  c.tools.max_concurrency = 32  # search / reader requests in flight
  c.tools.cache_dir = placeholder(str)  # also keep fetched pages on disk here (None: memory only)
  c.tools.cache_pages = 4096  # pages kept in the in-memory LRU cache
  c.tools.cache_searches = 4096  # search results kept in the in-memory LRU cache
  c.tools.trust_env = True  # use HTTP(S)_PROXY / NO_PROXY of the environment
  c.tools.max_redirects = 5  # redirect hops followed, each checked like the first URL

  c.judge = ml_collections.ConfigDict()
  c.judge.backend = "llm"  # "llm" (OpenAI-compatible) | "gold" (synthetic world only)
  c.judge.base_url = "https://api.deepseek.com"  # chat endpoint base (backend=llm)
  c.judge.model = "deepseek-chat"  # judge model (paper train: DeepSeek-V3.2)
  c.judge.api_key_env = "DEEPSEEK_API_KEY"  # env var holding the judge key
  c.judge.concurrency = 128  # judge calls in flight
  c.judge.timeout = 120.0  # seconds per judge call
  c.judge.retries = 4  # retries on 408/425/429/500/502/503/504, timeouts, connection errors
  c.judge.backoff_base = 1.0  # s; retry k waits at random up to backoff_base * 2**(k-1)
  c.judge.backoff_max = 30.0  # s; the longest wait between retries
  c.judge.max_reasks = 2  # re-asks after an unusable judge output
  c.judge.cache_path = ""  # sqlite judge cache ("" = workdir/judge_cache.sqlite)
  c.judge.use_cache = True  # False: every verdict is asked afresh
  c.judge.temperature = placeholder(float)  # judge sampling temperature (None: the provider's)
  c.judge.max_tokens = placeholder(int)  # judge reply token cap (None: the provider's)
  # Judging rules (judge.citations, judge.records).
  c.judge.max_citations = 20  # distinct cited URLs judged, in order (paper: at most 20)
  c.judge.accept_plain_links = False  # also count `[3](url)` citations (the release: no)
  c.judge.require_connected = True  # paper; False: every supported rubric counts (ablation)
  c.judge.max_response_chars = 60_000  # the final response is cut to this before judging
  c.judge.max_tool_output_chars = 200_000  # each tool output is cut to this before parsing
  c.judge.max_context_chars = 240_000  # cited page text sent to the support judge
  # Request caps of the judge server (judge.server) and the per-trajectory deadline.
  c.judge.max_body_bytes = 32 * 2**20  # /evaluate request body
  c.judge.max_rubrics = 256  # rubrics per request
  c.judge.max_history_messages = 4096  # messages per history
  c.judge.max_json_depth = 64  # nesting depth of the request JSON
  c.judge.max_json_values = 2**18  # JSON values per request body (counted before parsing)
  c.judge.body_timeout_s = 30.0  # s to receive a request body; past it 408
  c.judge.deadline_s = 600.0  # s per trajectory, retries included; past it both rewards are 0

  c.reward = ml_collections.ConfigDict()
  c.reward.mode = "paper"  # "paper" | "release" | "grpo" | "rubric_all" (carr_jax.rl.rewards)
  c.reward.alpha = 0.3  # rubric weight a (paper: 0.3)
  c.reward.scale_by_std = True  # divide centred rewards by the group std
  c.reward.std_ddof = 1  # 1: sample std (the release) | 0: population std
  c.reward.eps = 1e-6  # added to the std before dividing
  c.reward.equal_tol = 1e-6  # a group whose rewards span at most this has zero gradient
  c.reward.filter_zero_gradient = False  # drop groups whose rewards are all equal
  c.reward.shortcut_threshold = 0.5  # correct answers with rubric reward below this = shortcut

  c.loss = ml_collections.ConfigDict()
  c.loss.eps_low = 0.2  # lower clip (paper: 0.2)
  c.loss.eps_high = 0.28  # upper clip (paper: 0.28)
  c.loss.log_ratio_clamp = 20.0  # |log ratio| bound before exp; guards overflow only
  # the ratio's denominator: "trainer" (the policy's own log-probs before the step's one
  # update, taken from the step's forward: the ratio is 1) | "rollout" (the engine's)
  c.loss.old_logprobs = "trainer"
  # "none" | "icepop": truncated importance weights of trainer vs engine log-probs, kept in
  # [is_low, is_high] (the release and every RL config in configs/: icepop)
  c.loss.importance_sampling = "none"
  c.loss.is_low = 0.5
  c.loss.is_high = 2.0
  c.loss.kl_coef = 0.0  # KL to a frozen reference policy (paper: 0)
  c.loss.kl_estimator = "k3"  # "k1" | "k3"

  c.optim = ml_collections.ConfigDict()
  c.optim.learning_rate = 2e-6  # constant (paper: 2e-6)
  c.optim.warmup_steps = 0  # linear warmup (paper: none)
  c.optim.decay_from = 0  # with decay_steps > 0: the step where a linear decay to 0 starts
  c.optim.decay_steps = 0  # its length (warmup-stable-decay); 0 = constant (paper)
  c.optim.b1 = 0.9
  c.optim.b2 = 0.98  # (paper: 0.98)
  c.optim.eps = 1e-8  # Adam's epsilon; larger damps updates of parameters with tiny gradients
  c.optim.weight_decay = 0.1  # (paper: 0.1)
  c.optim.grad_clip_norm = 1.0  # global-norm clip (0 = off)

  c.batch = ml_collections.ConfigDict()
  c.batch.row_lengths = (8192, 16384, 32768, 65536)  # packed row lengths (compile buckets)
  c.batch.micro_batches = 1  # gradient-accumulation slices per step
  c.batch.logprob_chunk = 1024  # sequence chunk of the fused unembed + log-softmax
  # Logits only at the slots with loss (generated tokens), gathered per row into a [R, K]
  # index with K a multiple of this (coarsely bucketed: few compiled shapes); 0 = logits at
  # every slot (RL only; SFT always gathers). carr_jax.rl.packing.loss_positions.
  c.batch.loss_positions_multiple = 1024
  # an episode longer than the longest row: "error" (RL: a config whose
  # rollout.max_context_tokens exceeds it fails at start) | "truncate" (cut it: meant)
  c.batch.overflow = "error"
  c.batch.coarse_rows = True  # round the row count up to 3 significant bits: few shapes
  c.batch.pad_id = 0  # token id written into padding slots

  c.train = ml_collections.ConfigDict()
  c.train.num_steps = 100  # optimizer steps (capped by data.epochs)
  c.train.eval_every = 20  # evaluate on the held-out split every N steps (0 = never)
  c.train.eval_questions = 32  # held-out questions per evaluation
  c.train.eval_samples = 1  # samples per eval question
  c.train.text_samples = 2  # rendered trajectories written as TensorBoard text per eval
  return c


def sft_section() -> ml_collections.ConfigDict:
  """The `sft` section (the SFT job, carr_jax/jobs/sft_train.py), which SFT configs add as
  `c.sft = base.sft_section()`."""
  s = ml_collections.ConfigDict()
  s.data = "expert"  # comma-separated trajectory JSONL files, or "expert" (synthetic world)
  s.epochs = 3  # passes over the examples (paper: 3)
  s.batch_size = 16  # trajectories per optimizer step (paper: 16)
  s.num_steps = 0  # stop after this many steps (0 = all epochs)
  s.min_outcome = 0.0  # keep dumped rollouts whose judge outcome is >= this (0 = all)
  s.default_tools = True  # records without tools get the browser schemas in their prompt
  s.expert_search_results = 3  # expert: `num` of each search
  s.expert_find = True  # expert: confirm each hop with browser.find
  s.expert_max_hops = 4  # expert: only questions of at most this many hops (shorter episodes)
  s.expert_answer = "evidence"  # expert: "evidence" (rubric sentences) | "brief" | "guess" |
  # "lookup" (carr_jax/world/expert.py)
  s.expert_samples = 1  # expert: episodes per question ("guess": each its own option)
  s.expert_known_fraction = 0.0  # expert "guess" / "lookup": share of questions it knows
  s.expert_chain_cite_all = 1.0  # expert "lookup", chain questions: share of its replies
  # citing every page (the others cite one page)
  s.expert_chain_cite_first = 0.0  # of those others, the share citing the first page only (a
  # rubric not connected to the answer); the rest cite the last page only
  return s
