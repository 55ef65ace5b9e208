"""Draws the synthetic knowledge graph: invented entities, their attributes and relations.

`build_graph(rng, num_entities)` returns a `networkx.MultiDiGraph` whose nodes are entity ids
("e0000", ...) with attributes `type`, `name`, `noun`, `aliases`, `attrs` ({name: int}) and
whose edges are `subject -> object` with `key=relation`. Names are made of invented syllables
and are unique across the world (as words, so no name is part of another). Dates and links are
kept roughly plausible (people are born after their city is founded, organizations are founded
by people of a fitting age) so pages read sensibly. With `locality` > 0, people tend to study and
work in their birth city, so a question's answer can also be named on an earlier hop's page
(the named questions' shortcut, `compose.py`). Deterministic for a given `random.Random`.
"""
from __future__ import annotations

import math
import random

import networkx as nx

from lab.world import ontology as on

_ONSETS = ("b", "br", "c", "d", "dr", "f", "g", "gr", "h", "k", "l", "m", "n", "p", "r", "s",
           "st", "t", "th", "v", "w", "z", "sh", "tr", "vel", "mor", "kal")
_VOWELS = ("a", "e", "i", "o", "u", "ae", "ei", "ou", "ia")
_CODAS = ("", "", "n", "r", "l", "s", "th", "nd", "rk", "m", "x")
# Type -> share of the entities (at least MIN_PER_TYPE each).
_SHARES = {on.PERSON: 0.40, on.CITY: 0.14, on.PROVINCE: 0.04, on.ORGANIZATION: 0.16,
           on.WORK: 0.18, on.AWARD: 0.08}
MIN_PER_TYPE = 3
_TITLE_WORDS = ("Lanterns", "Harbour", "Winter", "Orchard", "Bells", "Tides", "Meridian",
                "Glass", "Embers", "Compass", "Ferns", "Salt", "Cloisters", "Kites")
_ORG_PATTERNS = {
    "university": "University of {w}", "trading company": "{w} Trading Company",
    "orchestra": "{w} Philharmonic", "observatory": "{w} Observatory",
    "museum": "Museum of {w}", "shipyard": "{w} Shipyard", "publishing house": "{w} Press",
}


# One-syllable names that the Qwen3 tokenizer keeps whole, as one token both with and without
# a leading space (checked by tests/lab/test_named_world.py), and that are not common English words.
SHORT_NAMES = tuple("""
Bal Ban Bar Bas Bei Bel Ben Ber Bes Beth Bin Bon Bre Brian Bro Bron Bru Brun Bur Cal Cam Car
Cas Cel Col Cond Cor Cos Cou Cour Cum Cur Dal Dam Dan Dar Das Del Dem Den Der Des Dia Dom Don
Dos Dou Dur Fal Fel Fil Fin Gal Gam Gar Ger Gil Gran Gre Gro Hal Ham Han Har Hel Hen Hol Hom
Hon Hor Hum Hur Kal Kar Keith Kel Ken Kim Kin Kir Kom Kon Len Lex Lin Lon Lou Lux Mal Mar Mas
Mel Mer Mes Mex Mil Min Mir Mis Mor Mos Mul Mur Mus Nam Neil Nom Nos Pal Par Pel Pes Pol Por
Pos Ram Rol Rom Ron Ros Sal Sam San Sel Sem Sen Ser Sha Shar Sher Sil Sim Ste Ster Stan Tam
Tan Tar Ter Tes Thor Tim Tom Ton Tor Tra Tre Tri Tro Trou Tur Val Van Var Vel Ven Ver Vin Vir
Vol Wal Wei Wel Wer Wil Win Wir Wis Zen Zend""".split())


class _Namer:
  """Invented words, unique across the world; `short`: drawn from SHORT_NAMES (one token)."""

  def __init__(self, rng: random.Random, short: bool = False):
    self._rng = rng
    self._used: set[str] = set()
    self.short = short

  def word(self, min_len: int = 5) -> str:
    if self.short:
      free = [w for w in SHORT_NAMES if w.lower() not in self._used]
      if not free:
        raise ValueError(f"short names: a world can have at most {len(SHORT_NAMES)} names")
      w = self._rng.choice(free)
      self._used.add(w.lower())
      return w
    while True:
      syllables = self._rng.choice((2, 2, 3))
      parts = [self._rng.choice(_ONSETS) + self._rng.choice(_VOWELS) for _ in range(syllables)]
      w = ("".join(parts) + self._rng.choice(_CODAS)).capitalize()
      if len(w) >= min_len and w.lower() not in self._used:
        self._used.add(w.lower())
        return w


def _log_uniform(rng: random.Random, lo: float, hi: float) -> int:
  return int(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def _counts(num_entities: int) -> dict[str, int]:
  if num_entities < MIN_PER_TYPE * len(_SHARES):
    raise ValueError(f"num_entities must be at least {MIN_PER_TYPE * len(_SHARES)}, "
                     f"got {num_entities}")
  counts = {t: max(MIN_PER_TYPE, int(num_entities * s)) for t, s in _SHARES.items()}
  counts[on.PERSON] += num_entities - sum(counts.values())
  return counts


def _prefer(rng: random.Random, nodes: list[str], ok) -> str:
  """A random node satisfying `ok`, or any node if none does."""
  fitting = [n for n in nodes if ok(n)]
  return rng.choice(fitting or nodes)


def _add_entities(g: nx.MultiDiGraph, rng: random.Random, counts: dict[str, int],
                  short_names: bool) -> None:
  namer = _Namer(rng, short_names)

  def add(type_, name, noun, aliases, attrs):
    g.add_node(f"e{g.number_of_nodes():04d}", type=type_, name=name, noun=noun,
               aliases=aliases, attrs=attrs)

  for _ in range(counts[on.PROVINCE]):
    name = namer.word()
    add(on.PROVINCE, name, "province", [f"{name} Province"],
        {"established_year": rng.randint(1500, 1950),
         "area_km2": _log_uniform(rng, 300, 240_000)})
  for _ in range(counts[on.CITY]):
    name = namer.word()
    aliases = [namer.word()] if rng.random() < 0.4 else []  # a former name
    add(on.CITY, name, "city", aliases,
        {"founded_year": rng.randint(900, 1900), "population": _log_uniform(rng, 1_500, 4.5e6),
         "elevation_m": rng.randint(1, 3_900)})
  for _ in range(counts[on.PERSON]):
    first = namer.word(4)
    last = "" if short_names else namer.word()
    birth = rng.randint(1700, 1975)
    attrs = {"birth_year": birth}
    if birth + 95 < 2020 or rng.random() < 0.5:
      attrs["death_year"] = min(2023, birth + rng.randint(30, 95))
    name, aliases = f"{first} {last}", [f"{first[0]}. {last}"]
    if short_names:  # one word, one token
      name, aliases = first, []
    add(on.PERSON, name, rng.choice(on.OCCUPATIONS), aliases, attrs)
  for _ in range(counts[on.ORGANIZATION]):
    kind = rng.choice(on.ORG_KINDS)
    name = _ORG_PATTERNS[kind].format(w=namer.word())
    initials = "".join(w[0] for w in name.split() if w[0].isupper())
    add(on.ORGANIZATION, name, kind, [initials] if len(initials) > 1 else [],
        {"founded_year": rng.randint(1600, 1990), "staff": _log_uniform(rng, 12, 90_000)})
  for _ in range(counts[on.WORK]):
    kind = rng.choice(sorted(on.WORK_KINDS))
    length_attr = on.WORK_KINDS[kind][0]
    spec = on.ATTRS[length_attr]
    name = f"The {rng.choice(_TITLE_WORDS)} of {namer.word()}"
    add(on.WORK, name, kind, [name[len("The "):]],
        {"completed_year": 1750,  # replaced once the creator is known
         length_attr: _log_uniform(rng, spec.buckets[0] + 1, spec.buckets[-1] - 1)})
  for _ in range(counts[on.AWARD]):
    name = f"{namer.word()} Prize"
    add(on.AWARD, name, "award", [],
        {"established_year": rng.randint(1800, 1995), "purse": _log_uniform(rng, 1_100, 9e5)})


def _local(g: nx.MultiDiGraph, orgs: list[str], person: str) -> list[str]:
  """The organizations based in `person`'s birth city (empty if none)."""
  city = next(b for _, b, rel in g.out_edges(person, keys=True) if rel == "born_in")
  return [o for o in orgs if any(b == city and rel == "based_in"
                                 for _, b, rel in g.out_edges(o, keys=True))]


def _add_relations(g: nx.MultiDiGraph, rng: random.Random, locality: float) -> None:
  by_type = {t: [n for n, d in g.nodes(data=True) if d["type"] == t] for t in on.ENTITY_TYPES}
  a = lambda n: g.nodes[n]["attrs"]  # noqa: E731
  universities = [n for n in by_type[on.ORGANIZATION] if g.nodes[n]["noun"] == on.UNIVERSITY]
  employers = [n for n in by_type[on.ORGANIZATION] if g.nodes[n]["noun"] != on.UNIVERSITY]
  provinces = list(by_type[on.PROVINCE])
  rng.shuffle(provinces)
  for i, city in enumerate(by_type[on.CITY]):  # every province gets a city first
    province = provinces[i] if i < len(provinces) else rng.choice(provinces)
    g.add_edge(city, province, key="located_in")
  for org in by_type[on.ORGANIZATION]:
    year = a(org)["founded_year"]
    g.add_edge(org, _prefer(rng, by_type[on.CITY], lambda c: a(c)["founded_year"] < year),
               key="based_in")
    g.add_edge(org, _prefer(rng, by_type[on.PERSON],
                            lambda p: 20 <= year - a(p)["birth_year"] <= 70), key="founded_by")
  for person in by_type[on.PERSON]:
    birth = a(person)["birth_year"]
    g.add_edge(person, _prefer(rng, by_type[on.CITY], lambda c: a(c)["founded_year"] < birth),
               key="born_in")
    if universities and rng.random() < 0.7:
      pool = universities
      if locality and rng.random() < locality:
        pool = _local(g, universities, person) or universities
      g.add_edge(person, _prefer(rng, pool, lambda u: a(u)["founded_year"] < birth + 18),
                 key="studied_at")
    if employers and rng.random() < 0.5:
      pool = employers
      if locality and rng.random() < locality:
        pool = _local(g, employers, person) or employers
      g.add_edge(person, _prefer(rng, pool, lambda o: a(o)["founded_year"] < birth + 40),
                 key="worked_for")
    if rng.random() < 0.3:
      g.add_edge(person, _prefer(rng, by_type[on.AWARD],
                                 lambda w: a(w)["established_year"] < birth + 60), key="received")
  for work in by_type[on.WORK]:
    makers = on.WORK_KINDS[g.nodes[work]["noun"]][1]
    creator = _prefer(rng, by_type[on.PERSON], lambda p: g.nodes[p]["noun"] in makers)
    birth = a(creator)["birth_year"]
    a(work)["completed_year"] = min(2023, birth + rng.randint(20, 60))
    g.add_edge(work, creator, key="created_by")
  for award in by_type[on.AWARD]:
    g.add_edge(award, rng.choice(by_type[on.ORGANIZATION]), key="presented_by")


def build_graph(rng: random.Random, num_entities: int, locality: float = 0.0,
                short_names: bool = False) -> nx.MultiDiGraph:
  """`locality`: chance that a person studies at / works for an organization based in their
  birth city, when one exists (0 keeps the draws, and so the worlds, of earlier versions);
  `short_names`: one-token names (SHORT_NAMES), one-word people: a hop copies one token."""
  g = nx.MultiDiGraph()
  _add_entities(g, rng, _counts(num_entities), short_names)
  _add_relations(g, rng, locality)
  return g
