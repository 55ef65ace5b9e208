"""Citation extraction, References cut, and cited-content collection from tool histories.

Run: python -m pytest tests/judge/test_citations.py -q
"""
import pytest

from judge.citations import build_context, collect_pages, extract_citations
from judge.example_world import TrajectoryBuilder, find_output, open_output, search_output
from judge.records import cut_references, exact_answer

A, B, C = "https://a.example/x", "https://b.example/y", "https://c.example/z"


@pytest.mark.parametrize("text,expected", [
    (f"fact [[1]({A})] and [[2]({B})].", [A, B]),
    (f"facts [[1]({A}), [2]({B})]", [A, B]),  # a list: the first link ends with ","
    (f"plain [1]({A}) link", []),  # the release does not count plain numbered links
    (f"repeat [[1]({A})] [[1]({A})] [[2]({B})]", [A, B]),
    (f"[[1](view-source:{A})] [[2](https://r.jina.ai/{B})]", [A, B]),
    ("[[1](https://en.wiki.example/Foo_(bar))]", ["https://en.wiki.example/Foo_(bar)"]),
    # The release's lazy regex would read one bogus URL spanning both links here.
    (f"[1]({A}) text [[2]({B})]", [B]),
    (f"[[1]( {A} )]", []),  # whitespace inside the parentheses: not a citation (release)
    ("[[1](https://a.example/x[1])]", ["https://a.example/x[1]"]),  # balanced brackets
    ("[[1](https://a.example/x]y)]", []),
    ("[[1](ftp://a.example)] [[2](not a url)]", []),
])
def test_extract_citations_release_form(text, expected):
  assert extract_citations(text, 20, False) == expected


def test_plain_links_are_opt_in():
  text = f"plain [1]({A}) and [[2]({B})]."
  assert extract_citations(text, 20, accept_plain_links=False) == [B]
  assert extract_citations(text, 20, accept_plain_links=True) == [A, B]


def test_at_most_max_citations_distinct_urls_in_order():
  text = " ".join(f"[[{i}](https://s{i}.example/)]" for i in range(30))
  urls = extract_citations(text + f" [[31]({A})]", max_citations=20, accept_plain_links=False)
  assert urls == [f"https://s{i}.example/" for i in range(20)]


def test_cut_references_keeps_only_text_before_last_heading():
  response = (f"## Explanation with Citations\nx [[1]({A})]\n## References\n[[2]({B})]\n"
              f"## References\n[[3]({C})]")
  judged = cut_references(response)
  assert extract_citations(judged, 20, False) == [A, B]
  assert "### References" not in cut_references("a\n### References\nb")
  assert cut_references("no heading, References mentioned inline") == (
      "no heading, References mentioned inline")


def test_exact_answer_section():
  assert exact_answer("## Exact Answer\n  Orla Venn \n\n## References\nx") == "Orla Venn"
  assert exact_answer("## Exact Answer:\nfoo") == "foo"
  assert exact_answer("no sections") is None
  assert exact_answer("## Exact Answer\n\n## References") is None


def _history_with_reopen():
  builder = TrajectoryBuilder("q")
  builder.search("q1", [("A title", A, "snippet about a"), ("B title", B, "snippet about b")])
  builder.search("q2", [("A title", A, "snippet about a"), ("C title", C, "snippet c")])
  builder.open(A, title="A", content="page A text")
  builder.find("alpha", ["alpha match on A"])
  builder.open(B, title="B", content="page B text")
  builder.find("beta", ["beta match on B"])
  builder.open(A, title="A", content="page A text")  # re-opened: finds go to A again
  builder.find("gamma", ["gamma match on A"])
  return builder.answer("done")["history"]


def test_collect_attributes_finds_to_the_page_open_at_the_time():
  pages, warnings = collect_pages(_history_with_reopen(), 10_000)
  assert warnings == []
  assert set(pages) == {A, B, C}
  assert pages[A].snippets == ["snippet about a", "snippet about a"]
  assert pages[A].finds == ["[Match 1] alpha match on A", "[Match 1] gamma match on A"]
  assert pages[B].finds == ["[Match 1] beta match on B"]
  assert pages[C].texts == [] and not pages[C].opened and pages[A].opened


def test_context_uses_each_text_once_and_only_cited_pages():
  pages, _ = collect_pages(_history_with_reopen(), 10_000)
  context, used = build_context([B, A, "https://never.example/"], pages, 100_000)
  assert used == [B, A]
  assert context.count("snippet about a") == 1
  assert context.count("page A text") == 1  # opened twice, same text
  assert "snippet c" not in context and "https://never.example/" not in context
  assert context.index("[Webpage 1]\nURL Source: " + B) < context.index("URL Source: " + A)
  for match in ("alpha match on A", "beta match on B", "gamma match on A"):
    assert match in context
  short, _ = build_context([A], pages, 40)
  assert short.endswith("[... cited content truncated ...]") and len(short) < 100


def test_prefixed_urls_in_tool_outputs_are_normalized():
  builder = TrajectoryBuilder("q").tool("browser.open", {"id": A},
                                        open_output("view-source:" + A, "A", "text a"))
  builder.tool("browser.search", {"query": "x"},
               search_output([("B", "https://r.jina.ai/" + B, "snip b")]))
  pages, _ = collect_pages(builder.answer("x")["history"], 10_000)
  assert set(pages) == {A, B}


def test_odd_tool_messages_are_skipped_with_warnings():
  builder = TrajectoryBuilder("q")
  builder.tool("browser.click", {"id": 1}, open_output(A, "A", "clicked"))  # unknown tool
  builder.tool("browser.open", "{not json", open_output(B, "B", "page b"))  # bad arguments
  builder.tool("browser.find", "{also not json", find_output(["match on b"]))
  builder.tool("browser.open", {"id": 7}, "Error: failed to open the page")  # failed open
  builder.tool("browser.find", {"pattern": "x"}, find_output(["orphan match"]))
  builder.tool("browser.find", {"pattern": "y"}, "No matches found.")
  history = builder.answer("x")["history"]
  history.append({"role": "tool", "content": [{"tool_call_id": "ghost", "output": "x"}]})
  history.append({"role": "tool", "content": [{"tool_call_id": history[1]["tool_calls"][0][
      "tool_call_id"], "output": b"\xff\xfe bytes"}]})
  history.insert(1, "not a message")
  pages, warnings = collect_pages(history, 10_000)
  assert set(pages) == {B}
  assert pages[B].texts == ["page b"] and pages[B].finds == ["[Match 1] match on b"]
  assert any("unknown tool 'browser.click'" in w for w in warnings)
  assert any("unknown call 'ghost'" in w for w in warnings)


def test_openai_style_tool_calls_are_accepted():
  history = [
      {"role": "assistant", "content": "", "tool_calls": [
          {"id": "c1", "type": "function",
           "function": {"name": "browser.open", "arguments": '{"id": "x"}'}}]},
      {"role": "tool", "tool_call_id": "c1", "content": open_output(A, "A", "text")},
  ]
  pages, warnings = collect_pages(history, 10_000)
  assert warnings == [] and pages[A].texts == ["text"]


def test_tool_outputs_are_bounded_before_parsing():
  huge = open_output(A, "A", "x" * 50_000 + " tail-evidence")
  history = TrajectoryBuilder("q").tool("browser.open", {"id": A}, huge).answer("x")["history"]
  pages, _ = collect_pages(history, 1_000)
  assert len(pages[A].texts[0]) < 1_000 and "tail-evidence" not in pages[A].texts[0]
