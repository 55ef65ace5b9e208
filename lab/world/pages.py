"""Renders one markdown page per entity of the synthetic world, with stable URLs.

A page states every attribute and outgoing relation of its entity in one sentence each (the
"facts", kept in a dict so rubrics can point at their exact evidence sentence), lists the
entities that point at it ("People born in X include ..."), and mixes in distractor sentences
that name unrelated entities, so a name search returns several pages and `find` has work to do.
Deterministic for a given `random.Random` and graph.
"""
from __future__ import annotations

import dataclasses
import random
import re

import networkx as nx

from lab.world import ontology as on

DOMAIN = "synthwiki.example"  # .example is reserved: these URLs never reach a real site
MAX_MENTIONS = 6
_TOPICS = ("river birds", "tide tables", "folk songs", "glassmaking", "star charts",
           "mountain flowers", "old maps", "clockwork", "weaving patterns", "salt trade")
_ADJECTIVES = ("quiet", "crowded", "celebrated", "narrow", "restored", "windswept")
_SEASONS = ("spring", "summer", "autumn", "winter")
_SECTIONS = {on.PERSON: ("Life", "Work and connections"),
             on.CITY: ("Profile", "People and institutions"),
             on.PROVINCE: ("Profile", "Settlements"),
             on.ORGANIZATION: ("History", "People and places"),
             on.WORK: ("Details", "Creation"), on.AWARD: ("Details", "Recipients")}
_ALIAS = {on.PERSON: 'Letters by {name} were often signed "{alias}".',
          on.CITY: "{name} was formerly known as {alias}.",
          on.PROVINCE: "{name} is also called {alias}.",
          on.ORGANIZATION: "{name} is commonly abbreviated {alias}.",
          on.WORK: 'Catalogues often list {name} simply as "{alias}".'}
# Distractors: {name} this entity, {other} another entity of the same type, {city}/{person}
# random entities of those types. None of them states an attribute or a relation.
_DISTRACTORS = {
    on.PERSON: ("In {year}, {name} spent a long winter in {city}.",
                "Letters exchanged between {name} and {other} are kept in a private collection.",
                "Critics have often compared {name} with {other}.",
                "{name} kept detailed notebooks on {topic}.",
                "A portrait of {name} hangs in a gallery in {city}.",
                "Later in life {name} corresponded with {person} about {topic}.",
                "Biographers disagree about how often {name} visited {city}."),
    on.CITY: ("The old market of {name} draws traders from {other}.",
              "A stone bridge in {name} was rebuilt in {year}.",
              "{name} is twinned with {other}.",
              "Travellers often praise the {adj} gardens of {name}.",
              "A small museum in {name} is devoted to {topic}.",
              "The main square of {name} was paved in {year}.",
              "{person} described {name} as a {adj} place in a travel diary."),
    on.PROVINCE: ("The landscape of {name} is known for its {topic}.",
                  "A road census of {name} was taken in {year}.",
                  "{name} shares a long trade history with {other}.",
                  "The largest fair in {name} is held near {city} every {season}.",
                  "Old survey maps of {name} were redrawn in {year}."),
    on.ORGANIZATION: ("In {year}, {name} moved its archive to a new building.",
                      "{name} has a long rivalry with {other}.",
                      "Visitors to {name} are shown a collection of {topic}.",
                      "A lecture series at {name} was once opened by {person}.",
                      "A branch office of {name} operated in {city} for some years.",
                      "The emblem of {name} shows a {adj} tower."),
    on.WORK: ("A revised edition of {name} appeared in {year}.",
              "{name} is often discussed alongside {other}.",
              "Reviewers praised the {adj} opening of {name}.",
              "A copy of {name} was owned by {person}.",
              "A translation of {name} was printed in {city} in {year}.",
              "Scholars link {name} to an interest in {topic}."),
    on.AWARD: ("The ceremony for the {name} is held each {season}.",
               "The {name} was briefly suspended in {year}.",
               "Past juries of the {name} included {person}.",
               "The {name} is sometimes confused with the {other}.",
               "A medal of the {name} is on display in {city}.",
               "In {year}, the rules of the {name} were rewritten."),
}


@dataclasses.dataclass(frozen=True)
class EntityPage:
  node: str
  url: str
  title: str
  content: str
  published_time: str
  facts: dict  # ("noun",) | ("attr", name) | ("rel", relation, object) -> sentence

  def record(self) -> dict:
    return {"url": self.url, "title": self.title, "content": self.content,
            "published_time": self.published_time}


def page_url(name: str) -> str:
  return f"https://{DOMAIN}/wiki/{name.replace(' ', '_')}"


def _join(names: list[str]) -> str:
  return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _subject(g: nx.MultiDiGraph, node: str) -> str:
  """How sentences open on this entity ("The X Prize" for awards)."""
  d = g.nodes[node]
  return f"The {d['name']}" if d["type"] == on.AWARD else d["name"]


def _facts(g: nx.MultiDiGraph, node: str) -> dict:
  d = g.nodes[node]
  facts = {("noun",): on.noun_fact(d["type"], d["name"], d["noun"])}
  for attr, value in d["attrs"].items():
    facts[("attr", attr)] = on.ATTRS[attr].fact.format(
        name=_subject(g, node), value=on.ATTRS[attr].exact(value))
  for _, obj, rel in g.out_edges(node, keys=True):
    facts[("rel", rel, obj)] = on.RELATIONS[rel].fact.format(
        s=d["name"], o=g.nodes[obj]["name"])
  return facts


def _mentions(g: nx.MultiDiGraph, node: str) -> list[str]:
  by_rel: dict[str, list[str]] = {}
  for subj, _, rel in g.in_edges(node, keys=True):
    by_rel.setdefault(rel, []).append(g.nodes[subj]["name"])
  return [on.RELATIONS[rel].mention.format(o=g.nodes[node]["name"],
                                           list=_join(names[:MAX_MENTIONS]))
          for rel, names in by_rel.items()]


def _distractors(g, node, rng, by_type, count) -> list[str]:
  d = g.nodes[node]
  others = [n for n in by_type[d["type"]] if n != node]
  templates = rng.sample(_DISTRACTORS[d["type"]], min(count, len(_DISTRACTORS[d["type"]])))
  pick = lambda t: g.nodes[rng.choice(by_type[t])]["name"]  # noqa: E731
  return [t.format(name=d["name"], other=g.nodes[rng.choice(others)]["name"],
                   city=pick(on.CITY), person=pick(on.PERSON), year=rng.randint(1650, 2020),
                   topic=rng.choice(_TOPICS), adj=rng.choice(_ADJECTIVES),
                   season=rng.choice(_SEASONS)) for t in templates]


def render_page(g: nx.MultiDiGraph, node: str, rng: random.Random,
                by_type: dict[str, list[str]], distractors: int = 6) -> EntityPage:
  d = g.nodes[node]
  facts = _facts(g, node)
  distractors = _distractors(g, node, rng, by_type, distractors) if distractors else []
  lead = [facts[("noun",)]]
  if d["aliases"] and d["type"] in _ALIAS:
    lead.append(_ALIAS[d["type"]].format(name=d["name"], alias=d["aliases"][0]))
  attr_part = [s for k, s in facts.items() if k[0] == "attr"] + distractors[:2]
  rel_part = [s for k, s in facts.items() if k[0] == "rel"] + _mentions(g, node)
  rng.shuffle(attr_part)
  rng.shuffle(rel_part)
  first, second = _SECTIONS[d["type"]]
  blocks = [f"# {d['name']}", " ".join(lead), f"## {first}", " ".join(attr_part)]
  if rel_part:
    blocks += [f"## {second}", " ".join(rel_part)]
  if distractors[2:]:
    blocks += ["## Notes", " ".join(distractors[2:4])]
  if distractors[4:]:
    blocks.append(" ".join(distractors[4:]))
  published = f"{rng.randint(2008, 2024)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
  return EntityPage(node, page_url(d["name"]), d["name"], "\n\n".join(blocks), published,
                    facts)


def name_pattern(g: nx.MultiDiGraph) -> re.Pattern:
  """Matches any entity name as whole words, longest first ("Kel Observatory" before "Kel")."""
  names = sorted({d["name"] for _, d in g.nodes(data=True)}, key=len, reverse=True)
  return re.compile(r"(?<![\w*])(" + "|".join(map(re.escape, names)) + r")(?![\w*])")


def mark_names(text: str, pattern: re.Pattern, own: str = "") -> str:
  """Every entity name but `own` in bold, the way wiki text marks links to other pages:
  "lies in the province of **Bin**".

  A small policy learns to copy a marked name (the token after a fixed marker) within minutes
  and an unmarked one not in the same budget (docs/results.md), so the CPU demo marks them."""
  return pattern.sub(lambda m: m[0] if m[0] == own else f"**{m[0]}**", text)


def marked_page(page: EntityPage, pattern: re.Pattern) -> EntityPage:
  """The page with every other entity's name marked in its body and facts."""
  return dataclasses.replace(
      page, content=mark_names(page.content, pattern, page.title),
      facts={k: mark_names(v, pattern, page.title) for k, v in page.facts.items()})


def render_pages(g: nx.MultiDiGraph, rng: random.Random,
                 distractors: int = 6) -> dict[str, EntityPage]:
  """Every entity's page, each with up to `distractors` distractor sentences."""
  by_type = {t: [n for n, d in g.nodes(data=True) if d["type"] == t] for t in on.ENTITY_TYPES}
  return {node: render_page(g, node, rng, by_type, distractors) for node in g.nodes}
