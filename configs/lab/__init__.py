"""The CPU laboratory's experiments: synthetic worlds a tiny policy trains on (docs/results.md)."""
