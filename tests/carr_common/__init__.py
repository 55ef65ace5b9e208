"""Tests of carr_common: dotted keys, HTTP retry, JSON lines, safe text, the vocabulary."""
