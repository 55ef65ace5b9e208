"""What the synthetic world is made of: entity types, attributes, relations and their wording.

Every attribute has a true value (shown exactly on its entity's page) and an obfuscated key
used by questions: years become decades, counts become one of a fixed set of ranges. Every
relation has a subject type, an object type, the sentence stating it on the subject's page,
and two verb phrases so a question can walk it in either direction. All wording here is the
world's own. Nothing in this module is random: `graph.py` draws the values.
"""
from __future__ import annotations

import bisect
import dataclasses

PERSON, CITY, PROVINCE, ORGANIZATION, WORK, AWARD = (
    "person", "city", "province", "organization", "work", "award")
ENTITY_TYPES = (PERSON, CITY, PROVINCE, ORGANIZATION, WORK, AWARD)

# Nouns of the subtypes (a question says "a chemist", "a university", ...). Types with one
# noun ("city") get no noun rubric: the noun says nothing beyond the type.
OCCUPATIONS = ("painter", "novelist", "composer", "chemist", "architect", "botanist",
               "engineer", "cartographer", "poet", "astronomer")
ORG_KINDS = ("university", "trading company", "orchestra", "observatory", "museum",
             "shipyard", "publishing house")
UNIVERSITY = "university"
# Work kind -> (length attribute, occupations that produce it).
WORK_KINDS = {
    "novel": ("pages", ("novelist", "poet")),
    "treatise": ("pages", ("chemist", "botanist", "astronomer", "engineer", "architect")),
    "atlas": ("pages", ("cartographer",)),
    "symphony": ("minutes", ("composer",)),
    "opera": ("minutes", ("composer",)),
    "painting": ("width_cm", ("painter",)),
}
FIXED_NOUNS = {CITY: "city", PROVINCE: "province", AWARD: "award"}


@dataclasses.dataclass(frozen=True)
class AttrSpec:
  """One attribute. `buckets` (ascending edges) makes it a count; otherwise it is a year."""
  name: str
  question: str  # phrase after a noun; {v} = obfuscated value
  rubric: str  # {e} = placeholder, {v} = obfuscated value
  fact: str  # page sentence; {name}, {value} = exact value
  buckets: tuple[int, ...] | None = None

  def key(self, value: int) -> int:
    """Obfuscated key: the decade of a year, or the index of a count's range."""
    if self.buckets is None:
      return value // 10 * 10
    return bisect.bisect_right(self.buckets, value) - 1

  def vague(self, value: int) -> str:
    """The value as a question states it: '1880s' or 'between 1,000 and 5,000'."""
    k = self.key(value)
    if self.buckets is None:
      return f"{k}s"
    return f"between {self.buckets[k]:,} and {self.buckets[k + 1]:,}"

  def exact(self, value: int) -> str:
    return str(value) if self.buckets is None else f"{value:,}"


def _year(name, question, rubric, fact):
  return AttrSpec(name, question, rubric, fact)


ATTRS = {
    "birth_year": _year("birth_year", "born in the {v}", "{e} was born in the {v}.",
                        "{name} was born in {value}."),
    "death_year": _year("death_year", "who died in the {v}", "{e} died in the {v}.",
                        "{name} died in {value}."),
    "founded_year": _year("founded_year", "founded in the {v}", "{e} was founded in the {v}.",
                          "{name} was founded in {value}."),
    "established_year": _year("established_year", "established in the {v}",
                              "{e} was established in the {v}.",
                              "{name} was established in {value}."),
    "completed_year": _year("completed_year", "completed in the {v}",
                            "{e} was completed in the {v}.", "{name} was completed in {value}."),
    "population": AttrSpec(
        "population", "with {v} inhabitants", "{e} has {v} inhabitants.",
        "{name} has a population of {value}.",
        (1_000, 10_000, 50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000, 5_000_000)),
    "elevation_m": AttrSpec(
        "elevation_m", "lying {v} metres above sea level",
        "{e} lies {v} metres above sea level.",
        "{name} lies at an elevation of {value} metres.",
        (0, 100, 250, 500, 1_000, 2_000, 4_000)),
    "area_km2": AttrSpec(
        "area_km2", "covering {v} square kilometres", "{e} covers {v} square kilometres.",
        "{name} covers an area of {value} square kilometres.",
        (0, 1_000, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000)),
    "staff": AttrSpec(
        "staff", "employing {v} people", "{e} employs {v} people.",
        "{name} employs {value} people.",
        (10, 50, 100, 500, 1_000, 5_000, 10_000, 50_000, 100_000)),
    "pages": AttrSpec(
        "pages", "of {v} pages", "{e} runs to {v} pages.", "{name} runs to {value} pages.",
        (20, 100, 200, 400, 800, 1_600)),
    "minutes": AttrSpec(
        "minutes", "lasting {v} minutes", "{e} lasts {v} minutes.",
        "A performance of {name} lasts {value} minutes.", (5, 20, 40, 60, 120, 240)),
    "width_cm": AttrSpec(
        "width_cm", "measuring {v} centimetres across", "{e} measures {v} centimetres across.",
        "{name} measures {value} centimetres across.", (10, 50, 100, 200, 400, 800)),
    "purse": AttrSpec(
        "purse", "carrying a purse of {v} crowns", "{e} carries a purse of {v} crowns.",
        "{name} carries a purse of {value} crowns.",
        (1_000, 5_000, 10_000, 50_000, 100_000, 500_000, 1_000_000)),
}


@dataclasses.dataclass(frozen=True)
class RelSpec:
  """A typed relation subject -> object and its wording."""
  name: str
  subject: str
  object: str
  forward: str  # verb phrase with the subject as grammatical subject; {x} = the object
  backward: str  # verb phrase with the object as grammatical subject; {x} = the subject
  fact: str  # sentence on the subject's page; {s}, {o} = names
  mention: str  # sentence on the object's page listing subjects; {o}, {list}


RELATIONS = {r.name: r for r in (
    RelSpec("born_in", PERSON, CITY, "was born in {x}", "is the birthplace of {x}",
            "{s} was born in {o}.", "People born in {o} include {list}."),
    RelSpec("studied_at", PERSON, ORGANIZATION, "studied at {x}", "educated {x}",
            "{s} studied at {o}.", "Alumni of {o} include {list}."),
    RelSpec("worked_for", PERSON, ORGANIZATION, "worked for {x}", "employed {x}",
            "{s} worked for {o}.", "Former staff of {o} include {list}."),
    RelSpec("founded_by", ORGANIZATION, PERSON, "was set up by {x}", "set up {x}",
            "{s} was founded by {o}.", "{o} is remembered as a founder of {list}."),
    RelSpec("based_in", ORGANIZATION, CITY, "is based in {x}", "is home to {x}",
            "{s} is based in {o}.", "Institutions based in {o} include {list}."),
    RelSpec("located_in", CITY, PROVINCE, "lies in {x}", "contains {x}",
            "{s} lies in the province of {o}.", "Cities of {o} include {list}."),
    RelSpec("created_by", WORK, PERSON, "was created by {x}", "created {x}",
            "{s} was created by {o}.", "Works by {o} include {list}."),
    RelSpec("received", PERSON, AWARD, "received {x}", "was given to {x}",
            "{s} received the {o}.", "Recipients of the {o} include {list}."),
    RelSpec("presented_by", AWARD, ORGANIZATION, "is presented by {x}", "presents {x}",
            "The {s} is presented by {o}.", "{o} presents the {list}."),
)}


def article(noun: str) -> str:
  # "uni-" and "eu-" sound like "you": a university.
  return "an" if noun[0] in "aeiou" and not noun.startswith(("uni", "eu")) else "a"


def noun_fact(type_: str, name: str, noun: str) -> str:
  """The page sentence that states what an entity is (evidence of its noun rubric)."""
  if type_ == PERSON:
    return f"{name} was {article(noun)} {noun}."
  if type_ == AWARD:
    return f"The {name} is an award."
  return f"{name} is {article(noun)} {noun}."
