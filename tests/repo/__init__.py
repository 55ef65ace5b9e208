"""Repository-wide tests: import rules, packaging, one source per config key, every config, every
command's CLI."""
