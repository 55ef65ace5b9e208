"""carr_common.dotted: the one walker of dotted config keys."""
import ml_collections
import pytest

from carr_common import dotted


def tree():
  return ml_collections.ConfigDict({"judge": {"max_rubrics": 256, "cache_path": None},
                                    "seed": 3})


def test_get_walks_sections_and_leaves():
  t = tree()
  assert dotted.get(t, "judge.max_rubrics") == 256 and dotted.get(t, "seed") == 3
  assert dotted.get(t, "judge") is t.judge and dotted.get(t, "") is t
  assert dotted.get(t, "judge.cache_path") is None


@pytest.mark.parametrize("key, known", [("jugde.max_rubrics", ""), ("judge.max_rubric", "judge"),
                                        ("seed.x", "seed"), ("judge.cache_path.x",
                                                             "judge.cache_path")])
def test_a_missing_part_is_named_or_gives_the_default(key, known):
  with pytest.raises(dotted.MissingKey) as e:
    dotted.get(tree(), key)
  assert (e.value.key, e.value.known) == (key, known)
  assert dotted.get(tree(), key, None) is None and dotted.get({}, key, 7) == 7
