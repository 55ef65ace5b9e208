"""Tests of carr_jax, the product: model, update, runs, jobs. No module here imports lab."""
