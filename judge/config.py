"""Judge configuration: one small frozen dataclass shared by the judge, the server and scripts.

The API key is never stored here, only the NAME of the environment variable that holds it
(`api_key_env`); `api_key()` reads it at client creation and it is never logged.

Example:
  JudgeConfig(base_url="https://api.deepseek.com", model="deepseek-chat",
              api_key_env="DEEPSEEK_API_KEY")          # the paper's training judge
  JudgeConfig(base_url="http://127.0.0.1:30000/v1", model="default", api_key_env="")  # SGLang
  JudgeConfig(backend="gold")                            # synthetic world only, no LLM
"""
from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import urllib.parse
from typing import Any

BACKENDS = ("llm", "gold")


@dataclasses.dataclass(frozen=True)
class JudgeConfig:
  backend: str = "llm"  # "llm": any OpenAI-compatible chat endpoint; "gold": synthetic world only
  base_url: str = "https://api.deepseek.com"  # POST {base_url}/chat/completions
  model: str = "deepseek-chat"  # judge model (paper, training: DeepSeek-V3.2)
  api_key_env: str = "DEEPSEEK_API_KEY"  # name of the env var holding the key; "" = no auth
  # Judge HTTP calls in flight at once (per event loop); 429s back off.
  concurrency: int = 128
  timeout: float = 120.0  # seconds per HTTP call
  # Retries follow carr_common.http_retry.RetryPolicy (retries, base_delay, max_delay).
  retries: int = 4  # extra attempts on 408/425/429/500/502/503/504, timeouts, connection errors
  backoff_base: float = 1.0  # seconds; retry k waits uniform(0, base * 2**(k-1)), capped below
  backoff_max: float = 30.0  # seconds; caps every wait, a server's Retry-After included
  max_reasks: int = 2  # re-asks after an unusable judge output (so 1 + 2 attempts per step)
  cache_path: str | None = None  # sqlite file for the judge cache; None = in memory only
  use_cache: bool = True  # False: every verdict is asked afresh
  temperature: float | None = None  # None = provider default (reasoning models reject others)
  max_tokens: int | None = None  # judge reply token cap (None: the provider's)
  # Judging rules.
  max_citations: int = 20  # first N distinct cited URLs are used (paper: at most 20)
  accept_plain_links: bool = False  # also count `[3](url)`; the release does not (see citations)
  require_connected: bool = True  # a supported rubric counts only when connected to <E0>
  # (paper); False: every supported rubric counts (an ablation)
  max_response_chars: int = 60_000  # final responses are cut to this before judging
  max_tool_output_chars: int = 200_000  # each tool output is cut to this before parsing
  max_context_chars: int = 240_000  # cited content sent to the support judge
  # Request caps and the deadline (an over-limit /evaluate gets 413/400 naming the limit).
  max_body_bytes: int = 32 * 2**20  # /evaluate body; a 100-call trajectory is ~1-2 MiB
  max_rubrics: int = 256  # rubrics per request (paper's questions have ~3-10)
  max_history_messages: int = 4096  # messages per history (100 tool calls need ~200)
  max_json_depth: int = 64  # nesting of the request JSON (a release request needs 5)
  # JSON values per body, bounded before parsing by its ',' '[' '{' bytes (those inside
  # strings too): parse work stays ~0.1 s (a 100-call trajectory has ~10^4)
  max_json_values: int = 2**18
  body_timeout_s: float = 30.0  # an /evaluate body not fully received by then gets 408
  deadline_s: float = 600.0  # seconds per trajectory, all judge calls and retries included;
  # past it both rewards are 0 with reason "deadline" (timeouts x retries alone allow > 1 h)

  def __post_init__(self):
    if self.backend not in BACKENDS:
      raise ValueError(f"backend: must be one of {BACKENDS}, got {self.backend!r}")
    for name in ("concurrency", "max_citations", "max_response_chars", "max_context_chars",
                 "max_tool_output_chars", "max_body_bytes", "max_rubrics",
                 "max_history_messages", "max_json_depth", "max_json_values"):
      if getattr(self, name) < 1:
        raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
    for name in ("retries", "max_reasks"):
      if getattr(self, name) < 0:
        raise ValueError(f"{name}: must be >= 0, got {getattr(self, name)}")
    for name in ("timeout", "deadline_s", "body_timeout_s"):
      if not getattr(self, name) > 0:
        raise ValueError(f"{name}: must be > 0, got {getattr(self, name)}")
    if "@" in urllib.parse.urlsplit(self.base_url).netloc:  # never echo it: it may hold a key
      raise ValueError("base_url: must not hold user info (user:password@); the key goes in "
                       "the environment variable that api_key_env names")

  def api_key(self) -> str | None:
    """The key from the environment, or None (local servers need none)."""
    return os.environ.get(self.api_key_env) if self.api_key_env else None

  def replace(self, **kw: Any) -> "JudgeConfig":
    return dataclasses.replace(self, **kw)

  def public_dict(self) -> dict[str, Any]:
    """Everything safe to log (the key itself is not a field, only its variable name)."""
    return dataclasses.asdict(self)


_TYPES = {"str": str, "int": int, "float": float}


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
  """One `--flag` per JudgeConfig field (`--base-url`, `--max-reasks`, ...), plus --verbose."""
  group = parser.add_argument_group("judge settings (the fields of judge.config.JudgeConfig)")
  for field in dataclasses.fields(JudgeConfig):
    flag = "--" + field.name.replace("_", "-")
    help_text = f"JudgeConfig.{field.name} (default: {field.default!r})"
    if field.type == "bool":
      group.add_argument(flag, action=argparse.BooleanOptionalAction, default=field.default,
                         help=help_text)
    else:
      base = _TYPES[field.type.split("|")[0].strip()]
      group.add_argument(flag, type=base, default=field.default, help=help_text)
  parser.add_argument("-v", "--verbose", action="store_true",
                      help="also show third-party INFO logs (httpx, uvicorn)")


def config_from_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> JudgeConfig:
  """The JudgeConfig of the flags; an invalid value is a usage error (one line, exit 2)."""
  try:
    return JudgeConfig(**{f.name: getattr(args, f.name)
                          for f in dataclasses.fields(JudgeConfig)})
  except ValueError as e:
    parser.error(str(e))


def setup_logging(verbose: bool, ours: tuple[str, ...] = ("judge",)) -> None:
  """Records of the loggers `ours` from INFO, of every other logger from WARNING (INFO with
  `verbose`): a filter on the console handler, so a library that sets its own logger's level
  (bm25s: DEBUG) stays quiet too."""
  threshold = logging.INFO if verbose else logging.WARNING

  def keep(record: logging.LogRecord) -> bool:
    mine = record.name.split(".")[0] in ours
    return record.levelno >= (logging.INFO if mine else threshold)

  logging.basicConfig(level=logging.INFO, force=True,
                      format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                      datefmt="%H:%M:%S")
  for handler in logging.getLogger().handlers:
    handler.addFilter(keep)
