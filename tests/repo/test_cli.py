"""The command-line convention (carr_jax/cli.py) and every entry point's parser.

Config mistakes are one line naming the key or file and the choices, exit status 2, no
traceback (unless --debug); every flag of every entry point has help text; --help exits 0.
Run: python -m pytest tests/repo/test_cli.py -q
"""
from __future__ import annotations

import importlib
import os
import pathlib
import subprocess
import sys

import pytest

from carr_jax import cli, train

REPO = pathlib.Path(__file__).resolve().parents[2]
ENTRY_POINTS = ("carr_jax.train", "carr_jax.sft", "carr_jax.evaluate", "carr_jax.convert",
                "carr_jax.aot", "carr_jax.eval_crypto", "judge.server", "judge.rubric_gen",
                "judge.testing", "lab.shortcut_report", "lab.expert")
SCRIPTS = ("launch_sglang", "fetch_tokenizer", "generate_rubrics")
LAB_TOOLS = ("lab.make_world", "lab.probes.kind_probe", "lab.probes.search_copy_eval",
             "lab.probes.page_swap", "lab.probes.listing_reveal", "lab.probes.hop_copy")


def _train_error(capsys, *args: str) -> str:
  """The stderr of `python -m carr_jax.train` with `args`, which must be a usage error."""
  status = train.main(["--workdir", "unused", *args])
  out = capsys.readouterr()
  assert status == 2 and out.out == ""
  lines = out.err.strip().splitlines()
  assert len(lines) == 1, out.err
  assert lines[0].startswith("python -m carr_jax.train: error: ")
  return lines[0]


@pytest.mark.parametrize("args,expected", [
    (["--config", "lab/configs/demo_cpu.py", "--config.rolout.temperature=0.5"],
     "unknown config key 'rolout.temperature'; did you mean rollout.temperature?"),
    (["--config", "lab/configs/demo_cpu.py", "--config.rollout.nope", "1"],
     "unknown config key 'rollout.nope' (valid keys in rollout: concurrency,"),
    (["--config", "lab/configs/demo_cpu.py", "--config.rollout.temperature=warm"],
     "config key rollout.temperature: expected a float, got 'warm'"),
    (["--config", "lab/configs/demo_cpu.py", "--config.rollout.stop_on_ill_formed=maybe"],
     "config key rollout.stop_on_ill_formed: expected true or false, got 'maybe'"),
    (["--config", "lab/configs/demo_cpu.py", "--config.batch.row_lengths=a,b"],
     "config key batch.row_lengths: expected a tuple of int, got 'a,b'"),
    (["--config", "lab/configs/demo_cpu.py", "--config.rollout=1"],
     "config key rollout is a section; set one of: concurrency,"),
    (["--config", "configs/no_such.py"],
     "config file not found: configs/no_such.py (shipped: configs/{base.py,"),
    (["--config", "lab/configs/no_such.py"],
     "config file not found: lab/configs/no_such.py (shipped: lab/configs/{chain_cpu.py,"),
    (["--config", "configs/base.py:tpu"], "configs/base.py has no variants (got ':tpu')"),
    (["--config", "lab/configs/demo_cpu.py:tpu"],
     "unknown variant 'tpu' of lab/configs/demo_cpu.py; known: sft"),
    (["--config", "configs/cgrpo_qwen3_4b.py:tpx"],
     "configs/cgrpo_qwen3_4b.py:tpx: config argument must start with tpu, gpu or tiny"),
    (["--config", "configs/cgrpo_qwen3_4b.py:tiny,grop"],
     "unknown config variant 'grop' (known: grpo, sft)"),
])
def test_config_mistakes_are_one_line_with_exit_status_2(capsys, args, expected):
  assert expected in _train_error(capsys, *args)


def test_debug_shows_the_traceback_instead():
  with pytest.raises(cli.UsageError, match="did you mean rollout.temperature"):
    train.main(["--workdir", "x", "--config", "lab/configs/demo_cpu.py", "--debug",
                "--config.rolout.temperature=0.5"])


def test_overrides_are_parsed_as_the_keys_types(tmp_path):
  config = cli.load_config("configs/cgrpo_qwen3_4b.py:tiny,grpo", [
      "rollout.temperature=0.5", "rollout.stop_on_ill_formed=false", "train.num_steps=3",
      "batch.row_lengths=(256, 512)", "judge.model=m:1", "optim.learning_rate=1"])
  assert config.reward.mode == "grpo" and config.model.preset == "tiny_dense"
  assert config.rollout.temperature == 0.5 and config.rollout.stop_on_ill_formed is False
  assert config.train.num_steps == 3 and config.batch.row_lengths == (256, 512)
  assert config.judge.model == "m:1" and config.optim.learning_rate == 1.0
  assert isinstance(config.optim.learning_rate, float)
  assert cli.load_config("lab/configs/demo_cpu.py", ["batch.row_lengths=64,128"]
                         ).batch.row_lengths == (64, 128)
  copy = tmp_path / "mine.py"  # any path works, not only the shipped configs
  copy.write_text((REPO / "lab" / "configs" / "demo_cpu.py").read_text())
  assert cli.load_config(str(copy)).model.preset == "tiny_dense"


def test_a_real_process_prints_one_line_and_exits_2():
  env = {**os.environ, "PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu"}
  proc = subprocess.run([sys.executable, "-m", "carr_jax.train", "--config",
                         "lab/configs/demo_cpu.py", "--workdir", "x", "--config.rolout.temperature",
                         "0.5"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
  assert proc.returncode == 2 and proc.stdout == ""
  assert proc.stderr.strip().splitlines() == [
      "python -m carr_jax.train: error: unknown config key 'rolout.temperature'; "
      "did you mean rollout.temperature?"]


def _parsers():
  for name in ENTRY_POINTS:
    yield name, importlib.import_module(name).parser()
  yield "lab.make_world", importlib.import_module("lab.make_world").parser()
  sys.path.insert(0, str(REPO / "scripts"))
  try:
    for name in ("launch_sglang",):
      yield name, importlib.import_module(name).parser()
  finally:
    sys.path.remove(str(REPO / "scripts"))


def test_every_flag_has_help_and_help_exits_0(capsys):
  for name, p in _parsers():
    missing = [a.option_strings for a in p._actions if a.option_strings and not a.help]
    assert not missing, (name, missing)
    assert all("_" not in s for a in p._actions for s in a.option_strings), name  # hyphens
    with pytest.raises(SystemExit) as exit_:
      p.parse_args(["--help"])
    assert exit_.value.code == 0 and capsys.readouterr().out.startswith("usage:"), name


@pytest.mark.parametrize("script", SCRIPTS)
def test_scripts_help_exits_0(script, tmp_path):
  proc = subprocess.run([sys.executable, str(REPO / "scripts" / f"{script}.py"), "--help"],
                        cwd=tmp_path, capture_output=True, text=True, timeout=120)
  assert proc.returncode == 0 and proc.stdout.startswith("usage:"), proc.stderr[-500:]


@pytest.mark.parametrize("module", LAB_TOOLS)
def test_lab_tools_help_exits_0(module):
  proc = subprocess.run([sys.executable, "-m", module, "--help"], cwd=REPO, capture_output=True,
                        text=True, timeout=120)
  assert proc.returncode == 0 and proc.stdout.startswith("usage:"), proc.stderr[-500:]


@pytest.mark.parametrize("verbose", [False, True])
def test_logging_keeps_ours_and_silences_third_party_info(capsys, verbose):
  import logging

  from absl import logging as absl_logging
  root = logging.getLogger()
  saved = (root.handlers[:], root.level, absl_logging.get_verbosity())
  try:
    cli.setup_logging(verbose)
    logging.getLogger("bm25s").setLevel(logging.DEBUG)  # as bm25s does at import
    logging.getLogger("bm25s").debug("bm25s-debug")
    logging.getLogger("orbax.checkpoint").info("orbax-info")
    absl_logging.info("absl-info")
    logging.getLogger("carr_jax.jobs.rl_train").info("ours-info")
    logging.getLogger("orbax.checkpoint").warning("orbax-warning")
    err = capsys.readouterr().err
  finally:
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])
    absl_logging.set_verbosity(saved[2])
  assert "ours-info" in err and "orbax-warning" in err and "bm25s-debug" not in err
  assert ("orbax-info" in err) == verbose and ("absl-info" in err) == verbose


@pytest.mark.parametrize("verbose", [False, True])
def test_no_accelerator_probe_line_on_a_cpu_run_unless_verbose(verbose, tmp_path):
  """jax logs "Unable to initialize backend 'tpu'" at INFO when it probes for a TPU."""
  code = ("import sys; from carr_jax import cli; cli.setup_logging(sys.argv[1] == '1'); "
          "import jax; jax.devices()")
  env = {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "XLA_FLAGS")}
  env["PYTHONPATH"] = str(REPO)
  proc = subprocess.run([sys.executable, "-c", code, "1" if verbose else "0"], cwd=tmp_path,
                        env=env, capture_output=True, text=True, timeout=120)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert ("Unable to initialize backend" in proc.stderr) == verbose, proc.stderr[-2000:]
