"""The SSRF guard (issue 13, item 3): one parser, every address form, redirects, pinning.

Real listeners on 127.0.0.1: a fake reader that redirects, and an "internal" service that
must never be reached. No DNS is needed except for names that must fail to resolve.
Run: python -m pytest tests/rollout/tools/test_url_policy.py -q
"""
import asyncio
import dataclasses
import ipaddress

import fastapi
import httpx
import pytest
from fastapi.responses import PlainTextResponse, RedirectResponse

from judge.testing import ServedApp
from rollout.tools import BackendError, BrowserSession, WebBackend, WebConfig
from rollout.tools.url_policy import check_url, is_public_address, parse_target, pinned_request

REFUSED = [
    "http://93.184.216.34\\@127.0.0.1/",  # backslash: WHATWG reads host 93.184.216.34
    "http://127.0.0.1\\.example.com/", "http://user:pw@93.184.216.34/",
    "http://localhost./", "http://127.0.0.1./", "http://app.localhost./x",
    "http://no-such-host.invalid/",  # does not resolve
    "http://2130706433/", "http://0x7f.0.0.1/", "http://0177.0.0.1/", "http://127.1/",
    "http://[64:ff9b::7f00:1]/", "http://[64:ff9b::a9fe:a9fe]/",  # NAT64 of loopback, metadata
    "http://[2002:7f00:1::]/", "http://[2002:a00:1::1]/",  # 6to4 of 127.0.0.1, 10.0.0.1
    "http://[::127.0.0.1]/", "http://[::ffff:169.254.169.254]/",  # compatible, mapped
    "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/",  # Teredo, client 127.0.0.1
    "http://[64:ff9b:1::1]/", "http://[fe80::1%25eth0]/", "http://[ff02::1]/",
    "http://[3fff::1]/", "http://[5f00::1]/", "http://[fc00::1]/",
    "http://192.0.0.8/", "http://192.88.99.1/", "http://198.18.0.1/", "http://100.64.0.1/",
    "http://240.0.0.1/", "http://0.0.0.0/", "http://255.255.255.255/", "http://224.0.0.1/",
    "http://192.0.2.1/", "http://x..example/", "ftp://93.184.216.34/", "http://[::1]:99999/",
    # issue 26: leading-zero and short numeric forms, SIIT-translated IPv6, a cloud host
    # endpoint in public space, percent-encoded dotted hosts
    "http://0127.0.0.1/", "http://0x7f000001/", "http://127.0.1/", "http://93.184.216.034/",
    "http://[::ffff:0:7f00:1]/", "http://[::ffff:0:127.0.0.1]/", "http://[::ffff:0:a9fe:a9fe]/",
    "http://168.63.129.16/", "http://[::ffff:168.63.129.16]/", "http://127%2E0%2E0%2E1/",
    "http://%31%32%37.0.0.1/", "http://localhost%2E/",
]
ALLOWED = ["http://93.184.216.34/a?b=1", "https://[2606:4700:4700::1111]/",
           "http://[64:ff9b::5db8:d822]/", "http://[2002:5db8:d822::1]/"]


# Internal addresses (loopback, private, link-local metadata, shared, cloud host endpoint,
# reserved) in every spelling a URL parser might read as that address.
INTERNAL = ["127.0.0.1", "127.255.255.254", "10.0.0.1", "10.255.255.255", "172.16.0.1",
            "192.168.1.1", "169.254.169.254", "100.100.100.200", "0.0.0.0", "168.63.129.16",
            "192.0.0.170", "198.18.0.1"]


def spellings(ip: str) -> list[str]:
  octets = [int(o) for o in ip.split(".")]
  number = int(ipaddress.IPv4Address(ip))
  high, low = number >> 16, number & 0xFFFF
  return [f"http://{ip}/", f"http://{ip}:8080/x", f"http://{number}/", f"http://{hex(number)}/",
          "http://0{:o}.{}.{}.{}/".format(*octets),
          "http://" + ".".join(hex(o) for o in octets) + "/", f"http://{ip}./",
          f"http://[::ffff:{ip}]/", f"http://[::ffff:0:{ip}]/", f"http://[64:ff9b::{ip}]/",
          f"http://[2002:{high:x}:{low:x}::1]/", "http://" + ip.replace(".", "%2E") + "/",
          f"http://93.184.216.34@{ip}/", f"http://93.184.216.34\\@{ip}/"]


SPELLED = [url for ip in INTERNAL for url in spellings(ip)]


def test_at_least_150_url_forms_are_held():
  assert len(set(REFUSED + SPELLED)) >= 150


@pytest.mark.parametrize("url", SPELLED)
def test_every_spelling_of_an_internal_address_is_refused(url):
  with pytest.raises(BackendError) as info:
    asyncio.run(check_url(url))
  assert info.value.code == "refused_url"


@pytest.mark.parametrize("url", REFUSED)
def test_refused(url):
  with pytest.raises(BackendError) as info:
    asyncio.run(check_url(url))
  assert info.value.code == "refused_url"


@pytest.mark.parametrize("url", ALLOWED)
def test_public_addresses_allowed_and_pinned(url):
  target = asyncio.run(check_url(url))
  assert target.addresses and all(is_public_address(a) for a in target.addresses)


def test_one_parser_normalises_what_is_fetched():
  target = parse_target("HTTP://Example.COM.:80/a%20b?q=1")
  assert (target.url, target.host, target.port) == ("http://example.com/a%20b?q=1",
                                                    "example.com", 80)
  assert parse_target("http://bücher.example/x").host == "xn--bcher-kva.example"
  assert parse_target("https://[::1]:8443/").url == "https://[::1]:8443/"


class Listeners:
  """A fake reader that redirects as told, and an internal service that counts visitors."""

  def __init__(self):
    self.internal_hits: list[dict] = []
    self.reader_hits = 0
    self.internal_url = ""

  def reader(self) -> fastapi.FastAPI:
    app = fastapi.FastAPI()

    @app.get("/reader/{target:path}")
    async def read(target: str):
      self.reader_hits += 1
      if target.endswith("/to-internal"):
        return RedirectResponse(self.internal_url + "/secret", status_code=302)
      if target.endswith("/loop"):
        return RedirectResponse("/reader/http://93.184.216.34/loop", status_code=302)
      if target.endswith("/via-reader"):  # back to the reader, naming an internal page
        return RedirectResponse(f"/reader/{self.internal_url}/secret", status_code=302)
      if target.endswith("/backslash"):
        return PlainTextResponse("", status_code=302,
                                 headers={"location": "http:\\\\127.0.0.1\\secret"})
      if target.endswith("/octal"):
        return PlainTextResponse("", status_code=302,
                                 headers={"location": "http://0177.0.0.1/secret"})
      return PlainTextResponse(f"Title: T\nURL Source: {target}\n\nMarkdown Content:\nhello")

    return app

  def internal(self) -> fastapi.FastAPI:
    app = fastapi.FastAPI()

    @app.get("/{path:path}")
    async def secret(path: str, request: fastapi.Request):
      self.internal_hits.append(dict(request.headers))
      return PlainTextResponse("Title: Internal\n\nMarkdown Content:\nTOP SECRET")

    return app


@pytest.fixture
def listeners(monkeypatch):
  monkeypatch.setenv("JINA_TEST_KEY", "reader-key-abcdef")
  state = Listeners()
  with ServedApp(state.reader()) as reader, ServedApp(state.internal()) as internal:
    state.internal_url = internal.url
    yield state, reader.url


def _open(reader_url, url, **kw):
  backend = WebBackend(WebConfig(search_url=reader_url + "/search", search_key_env=None,
                                 reader_url=reader_url + "/reader", reader_key_env="JINA_TEST_KEY",
                                 trust_env=False, attempts=1, **kw))

  async def go():
    try:
      return await BrowserSession(backend).call("browser.open", {"id": url})
    finally:
      await backend.aclose()

  return asyncio.run(go())


def test_redirect_to_an_internal_address_is_refused(listeners):
  state, reader = listeners
  result = _open(reader, "http://93.184.216.34/to-internal")
  assert not result.ok and result.error == "refused_url", result.text
  assert state.reader_hits == 1 and state.internal_hits == []
  assert "TOP SECRET" not in result.text


@pytest.mark.parametrize("path", ["via-reader", "backslash", "octal"])
def test_redirect_hops_are_checked_and_refused_as_such(listeners, path):
  """A hop back to the reader's own origin still names the page the reader will fetch:
  that page is checked (it was trusted with the origin). A Location with a backslash or an
  octal address is the guard's refusal, not a transport error."""
  state, reader = listeners
  result = _open(reader, f"http://93.184.216.34/{path}")
  assert not result.ok and result.error == "refused_url", result.text
  assert state.internal_hits == [] and "TOP SECRET" not in result.text
  assert state.reader_hits == 1


def test_redirects_are_bounded(listeners):
  state, reader = listeners
  result = _open(reader, "http://93.184.216.34/loop", max_redirects=3)
  assert not result.ok and "more than 3 redirects" in result.text
  assert state.reader_hits == 4


def test_allowed_foreign_hop_gets_no_keys(listeners):
  state, reader = listeners
  result = _open(reader, "http://93.184.216.34/to-internal", allow_private=True)
  assert result.ok and "TOP SECRET" in result.text  # followed by hand when allowed
  assert len(state.internal_hits) == 1
  assert "authorization" not in state.internal_hits[0]


def test_pinned_request_connects_to_the_checked_address_without_a_lookup(listeners):
  state, _ = listeners
  port = int(state.internal_url.rsplit(":", 1)[1])
  target = parse_target(f"http://name-that-does-not-resolve.invalid:{port}/page")
  target = dataclasses.replace(target, addresses=("127.0.0.1",))  # as check_url left it
  url, headers, extensions = pinned_request(target)
  assert url == f"http://127.0.0.1:{port}/page"
  with httpx.Client(trust_env=False) as client:
    response = client.get(url, headers=headers, extensions=extensions)
  assert response.status_code == 200
  assert state.internal_hits[-1]["host"] == "name-that-does-not-resolve.invalid"
