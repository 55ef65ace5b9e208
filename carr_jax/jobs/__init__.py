"""The jobs that run the stages (RL training, SFT, evaluation, the TPU compile check)
and what they share: parts built from the config, run set-up, task loading."""
