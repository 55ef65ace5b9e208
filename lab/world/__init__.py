"""The synthetic deep-search world: invented entities, their pages, multi-hop questions.

  from lab.world import build_world, write_world
  world = build_world(seed=0, num_entities=300, num_questions=100)  # style "deep"
  world = build_world(0, 400, 400, "reference", shortcut_fraction=0.8)  # a style's settings
  write_world(world, "world")   # corpus.jsonl, train.jsonl, eval.jsonl, manifest.json

See `records.py` for the files, `styles.py` for the question styles behind one interface,
`questions.py` for how questions are made and kept.
"""
from lab.world.records import (RESPONSE_FORMAT_SUFFIX, World, build_world, carr_record,
                                    write_world)

__all__ = ["RESPONSE_FORMAT_SUFFIX", "World", "build_world", "carr_record", "write_world"]
