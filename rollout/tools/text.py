"""Pure text functions of the browser tools: the answer-leak filter and `find` matching.

Answer-leak filter: a search result or page is hidden from an agent when it shares a run of 13
consecutive words with a forbidden string (the question), after normalization (lower case,
punctuation dropped, every CJK character its own word). A forbidden string shorter than 13
words is matched whole, on word boundaries, instead.

Find: exact case-insensitive occurrences first (in page order), then approximate "windows"
where at least 80% of the pattern's words (counted with multiplicity) appear within a run of
the page's words slightly longer than the pattern; each match is returned with about 200
characters of context on each side. Examples: tests/rollout/tools/test_session.py.
"""
from __future__ import annotations

import collections
import dataclasses
import re
from typing import Iterable, Sequence

LEAK_NGRAM = 13
FUZZY_MIN_OVERLAP = 0.8
FUZZY_EXTRA_WORDS = 2  # a window may hold this many words beyond the pattern's length

# Letters/digits runs, or a single CJK ideograph (CJK text has no spaces between words).
_WORD_RE = re.compile(r"[\u4e00-\u9fff]|[^\W_\u4e00-\u9fff]+")


def one_line(text: str) -> str:
  """Whitespace runs (newlines included) as single spaces: a field of a tool output's header
  can never start a line of its own, so it cannot forge another `URL Source:` line."""
  return " ".join(text.split())


def words(text: str) -> list[str]:
  return _WORD_RE.findall(text.lower())


def _ngrams(tokens: Sequence[str], n: int) -> set[tuple[str, ...]]:
  return {tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)}


class LeakFilter:
  """Decides whether a text reveals one of the forbidden strings (normally: the question)."""

  def __init__(self, forbidden: Iterable[str], n: int = LEAK_NGRAM):
    self._n = n
    self._ngrams: set[tuple[str, ...]] = set()
    self._short: list[str] = []  # forbidden strings under n words, matched whole
    for text in forbidden:
      tokens = words(text)
      if not tokens:
        continue
      if len(tokens) < n:
        self._short.append(" " + " ".join(tokens) + " ")
      else:
        self._ngrams |= _ngrams(tokens, n)

  def __bool__(self) -> bool:
    return bool(self._ngrams or self._short)

  def leaks(self, text: str) -> bool:
    if not self:
      return False
    tokens = words(text)
    if self._short:
      joined = " " + " ".join(tokens) + " "
      if any(s in joined for s in self._short):
        return True
    return bool(self._ngrams) and not self._ngrams.isdisjoint(_ngrams(tokens, self._n))


@dataclasses.dataclass(frozen=True)
class Match:
  start: int  # character span of the matched text in the page
  end: int
  exact: bool


def _exact_matches(pattern: str, page: str, limit: int) -> list[Match]:
  needle, haystack = pattern.lower(), page.lower()
  found, pos = [], haystack.find(needle)
  while pos != -1 and len(found) < limit:
    found.append(Match(pos, pos + len(needle), True))
    pos = haystack.find(needle, pos + len(needle))
  return found


def _fuzzy_matches(pattern: str, page: str, taken: list[Match], limit: int) -> list[Match]:
  """Word windows covering >= 80% of the pattern's words, not overlapping earlier matches."""
  target = collections.Counter(words(pattern))
  n = sum(target.values())
  if n == 0 or limit <= 0:
    return []
  spans = [(m.start(), m.end()) for m in _WORD_RE.finditer(page.lower())]
  tokens = [page[s:e].lower() for s, e in spans]
  width = n + FUZZY_EXTRA_WORDS
  found: list[Match] = []
  occupied = [(m.start, m.end) for m in taken]
  # The window tokens[lo:hi] slides: covered = sum over w of min(target[w], window[w]) is
  # updated per word in and out, so the scan is linear in the page, whatever the pattern.
  window: collections.Counter = collections.Counter()
  covered = lo = hi = i = 0
  while i < len(tokens) and len(found) < limit:
    if i > hi:  # jumped past the window: start a new one
      window.clear()
      covered, lo, hi = 0, i, i
    for w in tokens[lo:i]:
      window[w] -= 1
      covered -= window[w] < target[w]
    lo = i
    for w in tokens[hi:min(i + width, len(tokens))]:
      covered += window[w] < target[w]
      window[w] += 1
    hi = max(hi, min(i + width, len(tokens)))
    if covered / n >= FUZZY_MIN_OVERLAP:
      # Trim the window to its first and last pattern word so the span is tight.
      idx = [j for j in range(i, min(i + width, len(tokens))) if tokens[j] in target]
      start, end = spans[idx[0]][0], spans[idx[-1]][1]
      if not any(start < e and s < end for s, e in occupied):
        found.append(Match(start, end, False))
        occupied.append((start, end))
        i = idx[-1] + 1  # windows after this one would repeat the same words
        continue
    i += 1
  return found


def find_matches(pattern: str, page: str, limit: int) -> list[Match]:
  """Exact case-insensitive matches first, then fuzzy word windows, at most `limit`."""
  if not pattern.strip() or not page:
    return []
  exact = _exact_matches(pattern, page, limit)
  return exact + _fuzzy_matches(pattern, page, exact, limit - len(exact))


def format_matches(matches: Sequence[Match], page: str, context: int) -> str:
  blocks = []
  for k, m in enumerate(matches, start=1):
    snippet = page[max(0, m.start - context):m.end + context].strip()
    blocks.append(f"[Match {k}]\n{snippet}")
  return "\n\n".join(blocks)
