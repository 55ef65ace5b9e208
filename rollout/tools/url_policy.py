"""Which URLs the web backend may hand to its page reader, or connect to itself.

One strict parser (`parse_target`) serves both the check and the fetch: the fetch sends the
URL the parser re-serialised (`Target.url`), never the agent's raw string, so no second parser
can read a different host out of it. It refuses what parsers disagree on: backslashes,
whitespace and control characters, user info (`a@b`), non-http(s) schemes, bad ports. Host
names are lower-cased, IDNA-encoded and lose one trailing dot (`localhost.` is `localhost`).

`check_url` then requires every address of the host to be public: an IP literal is checked
as is; a name is resolved once and must resolve (a name that does not resolve is refused),
and all its addresses must pass. Refused: everything Python does not call global, multicast,
the IANA special-purpose ranges Python misses (192.0.0.0/24, 192.88.99.0/24, 64:ff9b:1::/48,
::/96, 3fff::/20, 5f00::/16, ...), and every IPv6 form that embeds a forbidden IPv4 address
(IPv4-mapped, NAT64 64:ff9b::/96, 6to4 2002::/16, Teredo). The checked addresses come back in
`Target.addresses`, so a caller that connects itself can pin one (`pinned_request`) instead
of resolving again (DNS rebinding). `allow_private=True` turns the address checks off (tests
on 127.0.0.1, self-hosted pages); the parsing rules still apply.
"""
from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import re
import socket
from urllib.parse import urlsplit, urlunsplit

from rollout.tools.backend import BackendError

RESOLVE_TIMEOUT_S = 3.0
_FORBIDDEN_NETWORKS = tuple(ipaddress.ip_network(n) for n in (
    "0.0.0.0/8", "100.64.0.0/10", "192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24",
    "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24", "240.0.0.0/4",
    "::/96", "64:ff9b:1::/48", "100::/64", "2001::/23", "2001:db8::/32", "3fff::/20",
    "5f00::/16", "fc00::/7", "fe80::/10", "fec0::/10", "ff00::/8",
    "168.63.129.16/32"))  # a cloud platform's host endpoint (public space, internal use)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")  # SIIT IPv4-translated, RFC 2765
_NUMERIC_LABEL = re.compile(r"0x[0-9a-f]*|[0-9]+")
_BACKSLASH = "\\"  # WHATWG parsers read it as "/" in http(s) authorities, urlsplit does not


@dataclasses.dataclass(frozen=True)
class Target:
  """A parsed http(s) URL: what was checked is what gets fetched."""
  url: str  # re-serialised from the parts below; send this, not the raw string
  scheme: str
  host: str  # lower-case, IDNA, no trailing dot; IPv6 without brackets
  port: int
  addresses: tuple[str, ...] = ()  # checked addresses (empty when not resolved)


def _refuse(url: str, why: str) -> BackendError:
  return BackendError(f"Refused to open {url}: {why}.", code="refused_url")


def _normal_host(raw: str, url: str) -> str:
  host = raw.lower()
  if host.endswith("."):
    host = host[:-1]
  if not host or host.endswith(".") or ".." in host:
    raise _refuse(url, "the URL has no valid host")
  if "%" in host and ":" not in host:  # a WHATWG parser decodes it; urlsplit does not
    raise _refuse(url, "percent-encoded host names are not allowed")
  try:
    ipaddress.ip_address(host)
    return host
  except ValueError:
    pass
  if _NUMERIC_LABEL.fullmatch(host.rsplit(".", 1)[-1]):
    # WHATWG reads a host whose last label is a number as IPv4 (octal, hex, fewer parts);
    # only the canonical dotted quad, accepted above, means the same to every parser.
    raise _refuse(url, "numeric hosts must be written as a plain dotted-quad address")
  try:
    return host.encode("idna").decode("ascii")
  except UnicodeError:
    raise _refuse(url, "the host name is not valid") from None


def has_ambiguous_characters(url: str) -> bool:
  """A backslash, whitespace or a non-printable character: parsers read such a URL
  differently, and a line break in one could forge the next line of a tool's output."""
  return any(c == _BACKSLASH or c.isspace() or not c.isprintable() for c in url)


def refuse_ambiguous_characters(url: str) -> None:
  """Raises the refusal for `has_ambiguous_characters` (also in a relative redirect Location,
  before anything joins it)."""
  if has_ambiguous_characters(url):
    raise _refuse(url, "the URL contains characters that parsers read differently")


def parse_target(url: str) -> Target:
  """The one URL parser for checks and fetches; raises BackendError(code="refused_url")."""
  refuse_ambiguous_characters(url)
  try:
    parts = urlsplit(url)
    raw_host, port = parts.hostname, parts.port
  except ValueError as e:
    raise _refuse(url, f"malformed URL ({e})") from None
  scheme = parts.scheme.lower()
  if scheme not in ("http", "https"):
    raise _refuse(url, "only http and https URLs can be opened")
  if "@" in parts.netloc:
    raise _refuse(url, "user names and passwords in URLs are not allowed")
  if not raw_host:
    raise _refuse(url, "the URL has no host")
  host = _normal_host(raw_host, url)
  port = port if port is not None else (443 if scheme == "https" else 80)
  default = port == (443 if scheme == "https" else 80)
  shown = f"[{host}]" if ":" in host else host
  netloc = shown if default else f"{shown}:{port}"
  clean = urlunsplit((scheme, netloc, parts.path, parts.query, parts.fragment))
  return Target(url=clean, scheme=scheme, host=host, port=port)


def embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
  """The IPv4 address an IPv6 address carries (mapped, NAT64, 6to4, Teredo), or None."""
  if ip.ipv4_mapped is not None:
    return ip.ipv4_mapped
  if ip in _NAT64 or ip in _TRANSLATED:
    return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
  if ip.sixtofour is not None:
    return ip.sixtofour
  if ip.teredo is not None:
    return ip.teredo[1]
  return None


def is_public_address(address: str) -> bool:
  """True only for a global unicast address outside every forbidden range, embeddings too."""
  try:
    ip = ipaddress.ip_address(address.split("%", 1)[0])  # drop an IPv6 zone id
  except ValueError:
    return False
  if isinstance(ip, ipaddress.IPv6Address):
    inner = embedded_ipv4(ip)
    if inner is not None and not is_public_address(str(inner)):
      return False
  if ip.is_multicast or any(ip in net for net in _FORBIDDEN_NETWORKS
                            if net.version == ip.version):
    return False
  return ip.is_global


async def resolve(host: str, port: int) -> tuple[str, ...]:
  """Addresses of `host` (one lookup, bounded in time); empty when it does not resolve."""
  loop = asyncio.get_running_loop()
  try:
    infos = await asyncio.wait_for(
        loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), RESOLVE_TIMEOUT_S)
  except (OSError, asyncio.TimeoutError, UnicodeError):
    return ()
  return tuple(dict.fromkeys(info[4][0] for info in infos))


async def check_url(url: str, allow_private: bool = False) -> Target:
  """The parsed Target with its checked addresses; raises BackendError(code="refused_url")
  unless `url` may be fetched (see the module docstring)."""
  target = parse_target(url)
  if allow_private:
    return target
  if target.host == "localhost" or target.host.endswith(".localhost"):
    raise _refuse(url, "local addresses are not allowed")
  try:
    ipaddress.ip_address(target.host)
    addresses: tuple[str, ...] = (target.host,)
  except ValueError:
    addresses = await resolve(target.host, target.port)
    if not addresses:
      raise _refuse(url, f"{target.host} does not resolve")
  if not all(is_public_address(a) for a in addresses):
    raise _refuse(url, f"{target.host} is or resolves to a private, loopback or reserved "
                       "address")
  return dataclasses.replace(target, addresses=addresses)


def pinned_request(target: Target) -> tuple[str, dict[str, str], dict[str, str]]:
  """(url, headers, httpx extensions) that connect to the checked address itself.

  The URL's host becomes `target.addresses[0]`; `Host` and the TLS server name keep the real
  name, so virtual hosting and certificate checks still work, and no second lookup happens.
  """
  if not target.addresses:
    return target.url, {}, {}
  parts = urlsplit(target.url)
  address = target.addresses[0].split("%", 1)[0]
  shown = f"[{address}]" if ":" in address else address
  url = urlunsplit((parts.scheme, f"{shown}:{target.port}", parts.path, parts.query, ""))
  host = f"[{target.host}]" if ":" in target.host else target.host
  return url, {"Host": host}, {"sni_hostname": target.host}
