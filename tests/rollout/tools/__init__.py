"""Tests of rollout/tools: sessions over the offline corpus, and the web backend."""
