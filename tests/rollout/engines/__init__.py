"""Tests of rollout/engines: the SGLang client and server, weight sync."""
