"""The run's provenance store: every value that entered the run, and where it came from.

The store lives in ``ctx.memo`` (plain JSON data), so it travels in the run state and a
resumed run needs no rebuild. Origins:

* ``user``: the user's prompt; ``application``: what the application vouches for (the
  authenticated account, its known records);
* ``system``: a system-of-record field of a tool result (an order's number, a mail's id);
* ``third_party``: a field written by someone else (a mail's body, a review, a ticket);
* ``credential``: anything read through a credential-class tool.

A value keeps the origin it was *first* seen with: a value named in a mail and then read
back from a system of record stays third-party. Matching is normalised
(:mod:`tether.guards.normalize`), sees through simple disguises (spelled out, split,
encoded), and finds copied spans of third-party free text (windows of six words).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from tether.guards.normalize import (
    compact,
    decodings,
    digits,
    disguised,
    fold,
    plausible,
    value_keys,
    values,
)
from tether.guards.objects import named_phrase, record_request, third_party_tokens
from tether.tools import RunContext

__all__ = [
    "COPY_MIN_CHARS",
    "COPY_MIN_WORDS",
    "MEMO_KEY",
    "SECRET_WINDOW",
    "TRUSTED",
    "WINDOW",
    "Origin",
    "ProvenanceStore",
    "Seen",
]

Origin = Literal["user", "application", "system", "third_party", "credential"]
TRUSTED: frozenset[str] = frozenset({"user", "application", "system"})
UNTRUSTED: frozenset[str] = frozenset({"third_party", "credential"})
MEMO_KEY = "tether.provenance"
WINDOW = 6
"""Words in a copy window: content that shares this many consecutive words with
third-party text is a copy of it."""
COPY_MIN_WORDS = 3
COPY_MIN_CHARS = 16
"""A shorter content argument is a copy only when all of it is inside third-party text and
it has at least this many words and letters or digits."""
_MAX_TEXTS = 256
_MAX_CHARS = 20_000
_MAX_NGRAMS = 4_000
_WORD = re.compile(r"[^\W_]+")
_BLIND = ("reversed", "rot13")
_PUNCT = ".,;:!?()[]{}'\"«»"


SECRET_WINDOW = 12
"""A secret leaks when this many of its consecutive letters or digits (all of it, when it is
shorter) appear in an argument, whatever separates them there."""
_MIN_SECRET = 6
_MAX_SECRETS = 64
_DIGIT_RUNS = re.compile(r"\d+")


def _stretch(secret: str, text: str) -> bool:
    n = min(len(secret), SECRET_WINDOW)
    return any(secret[i : i + n] in text for i in range(len(secret) - n + 1))


def _assembled(secret: str, pieces: list[str]) -> bool:
    """Whether ``secret`` is the concatenation of some of ``pieces``, in order (pieces of
    two characters or more; others in between are skipped)."""
    at = 0
    for piece in pieces:
        if len(piece) >= 2 and secret.startswith(piece, at):
            at += len(piece)
            if at == len(secret):
                return True
        elif piece and secret in piece:
            return True
    return False


@dataclass(frozen=True, slots=True)
class Seen:
    """One sighting: the value's key, where it was first seen, and how it was written."""

    key: str
    origin: str
    source: str
    how: str = "verbatim"

    def describe(self) -> str:
        """``third_party (read_inbox: body, spelled out)``."""
        how = "" if self.how == "verbatim" else f", {self.how}"
        return f"{self.origin} ({self.source}{how})"


def _window_hashes(text: str) -> list[str]:
    words = _WORD.findall(fold(text))
    out = []
    for i in range(max(0, len(words) - WINDOW + 1)):
        digest = hashlib.blake2b(" ".join(words[i : i + WINDOW]).encode(), digest_size=6)
        out.append(digest.hexdigest())
    return out


class ProvenanceStore:
    """A view over ``memo[MEMO_KEY]``; every method keeps the data JSON-ready."""

    def __init__(self, memo: dict[str, Any]) -> None:
        data = memo.get(MEMO_KEY)
        if not isinstance(data, dict):
            data = memo[MEMO_KEY] = {}
        data.setdefault("values", {})
        data.setdefault("texts", [])
        self.data: dict[str, Any] = data

    @classmethod
    def of(cls, ctx: RunContext[Any]) -> ProvenanceStore:
        """The store of ``ctx``'s run."""
        return cls(ctx.memo)

    # --- recording ---------------------------------------------------------------------

    def _put(self, key: str, origin: str, source: str, how: str = "verbatim") -> None:
        first = self.data["values"].setdefault(key, [origin, source, how])
        if first[0] != origin and origin in UNTRUSTED:  # a later third-party mention
            also = self.data.setdefault("also", {}).setdefault(key, [])
            if origin not in also:
                also.append(origin)

    def add_seen(self, key: str, origin: str, source: str) -> None:
        """Record one key (``obj:file:13``, ``tok:13``) as seen with ``origin``."""
        self._put(key, origin, source)

    @property
    def read_third_party(self) -> bool:
        """Whether the run has read any third-party text so far."""
        return bool(self.data.get("third_party_read") or self.data.get("flags"))

    def add_value(self, value: str, origin: Origin, source: str) -> None:
        """Record one field value: its whole folded text and the values inside it."""
        if len(value) <= 200:
            self._put(f"text:{fold(value)}", origin, source)
        self._add_values(value, origin, source)

    def add_text(self, text: str, origin: Origin, source: str) -> None:
        """Record free text: its values (also disguised ones) and, for trusted text, the
        words and short phrases it names; for untrusted text, what copy checks need."""
        self.add_value(text, origin, source)
        words = _WORD.findall(fold(text))
        if origin == "user":
            record_request(self, text)
        elif origin == "third_party":
            self.data["third_party_read"] = True
            third_party_tokens(self, text, origin, source)
        if origin in TRUSTED:
            for token in fold(text).split():
                self._put(f"text:{token.strip(_PUNCT)}", origin, source)
            count = 0
            for n in (1, 2, 3, 4):
                for i in range(len(words) - n + 1):
                    if count >= _MAX_NGRAMS:
                        return
                    self._put(f"text:{' '.join(words[i : i + n])}", origin, source)
                    count += 1
            return
        texts = self.data["texts"]
        if len(texts) < _MAX_TEXTS:
            texts.append(
                {
                    "origin": origin,
                    "source": source,
                    "compact": compact(text)[:_MAX_CHARS],
                    "digits": digits(text)[:_MAX_CHARS],
                    "windows": _window_hashes(text[: _MAX_CHARS * 2]),
                }
            )

    def _add_values(self, text: str, origin: str, source: str) -> None:
        for v in values(text):
            self._put(v.key, origin, source)
        if origin in TRUSTED:
            return
        for how, plain in decodings(text):
            for v in values(plain):
                if how not in _BLIND or plausible(v):
                    self._put(v.key, origin, source, how)

    def add_secret(self, text: str, source: str) -> None:
        """Record one secret field (a card number, a code, a key) for :meth:`leaks`."""
        d, c = digits(text), compact(text)
        secrets = self.data.setdefault("secrets", [])
        if (len(d) >= _MIN_SECRET or len(c) >= _MIN_SECRET) and len(secrets) < _MAX_SECRETS:
            entry = {"source": source, "digits": d[:512], "compact": c[:512]}
            if entry not in secrets:
                secrets.append(entry)

    def leaks(self, value: str) -> Seen | None:
        """The secret ``value`` carries, however it is spaced, split or interleaved with
        other numbers: a long enough stretch of it (:data:`SECRET_WINDOW` characters, or
        all of a shorter one), or all of it put together from pieces in order."""
        if not self.data.get("secrets"):
            return None
        d, c = digits(value), compact(value)
        digit_runs = _DIGIT_RUNS.findall(unicodedata.normalize("NFKC", value))
        word_runs = [compact(w) for w in fold(value).split()]
        for secret in self.data["secrets"]:
            sd, sc = secret["digits"], secret["compact"]
            hit = (len(sd) >= _MIN_SECRET and (_stretch(sd, d) or _assembled(sd, digit_runs))) or (
                len(sc) >= _MIN_SECRET
                and sc != sd
                and (_stretch(sc, c) or _assembled(sc, word_runs))
            )
            if hit:
                return Seen(f"secret:{secret['source']}", "credential", secret["source"])
        return None

    def merge(self, other: ProvenanceStore) -> None:
        """Add what ``other`` recorded after what this store holds (first sightings kept)."""
        for key, (origin, source, how) in other.data["values"].items():
            self._put(key, origin, source, how)
        for key, origins in other.data.get("also", {}).items():
            also = self.data.setdefault("also", {}).setdefault(key, [])
            also.extend(o for o in origins if o not in also)
        texts = self.data["texts"]
        texts.extend(other.data["texts"][: max(0, _MAX_TEXTS - len(texts))])
        for entry in other.data.get("secrets", ()):
            secrets = self.data.setdefault("secrets", [])
            if entry not in secrets and len(secrets) < _MAX_SECRETS:
                secrets.append(entry)
        if other.data.get("tok_count"):
            self.data["tok_count"] = self.data.get("tok_count", 0) + other.data["tok_count"]
        if other.data.get("third_party_read"):
            self.data["third_party_read"] = True
        for name in ("links", "owners"):
            for key, items in other.data.get(name, {}).items():
                mine = self.data.setdefault(name, {}).setdefault(key, [])
                mine.extend(i for i in items if i not in mine)
        for name in ("flags", "warnings"):
            if other.data.get(name):
                mine = self.data.setdefault(name, [])
                mine.extend(e for e in other.data[name] if e not in mine)

    # --- looking up ----------------------------------------------------------------------

    def seen(self, key: str) -> Seen | None:
        """The first sighting of ``key``, if any."""
        found = self.data["values"].get(key)
        return Seen(key, *found) if found else None

    def first(self, value: str) -> Seen | None:
        """Where ``value`` (one argument value) was first seen: its whole text, else the
        first of the values in it that the run has seen."""
        whole = self.seen(f"text:{fold(value)}")
        if whole is not None:
            return whole
        for v in values(value):
            if v.kind in ("host",) or v.key.startswith("tail:"):
                continue
            hit = self.seen(v.key)
            if hit is not None:
                return hit
        return None

    def mentioned_by(self, value: str, origins: Iterable[str] = UNTRUSTED) -> bool:
        """Whether ``value`` was ever seen with one of ``origins``, first or later."""
        wanted = frozenset(origins)
        also: Mapping[str, list[str]] = self.data.get("also", {})
        for key in value_keys(value):
            hit = self.seen(key)
            if hit is not None and hit.origin in wanted:
                return True
            if wanted.intersection(also.get(key, ())):
                return True
        return False

    def trusted(self, value: str) -> Seen | None:
        """The trusted sighting of ``value``, if it was first seen with a trusted origin.

        A value written with look-alike or invisible characters is never trusted, even
        when it folds to a trusted one: it is another address that only looks the same."""
        if disguised(value):
            return None
        hit = self.first(value)
        return hit if hit is not None and hit.origin in TRUSTED else None

    def untrusted(self, value: str, origins: Iterable[str] = UNTRUSTED) -> list[Seen]:
        """Every untrusted sighting behind ``value``: its values written plainly or
        disguised, and values assembled from pieces of an untrusted text."""
        wanted = frozenset(origins)
        hits: dict[str, Seen] = {}
        if self.trusted(value) is not None:
            return []
        keys = set(value_keys(value))
        for how, plain in decodings(value):
            keys.update(v.key for v in values(plain) if how not in _BLIND or plausible(v))
        for key in keys:
            hit = self.seen(key)
            if hit is not None and hit.origin in wanted:
                hits.setdefault(hit.key, hit)
        c, d = compact(value), digits(value)
        for text in self._texts(wanted):
            if len(c) >= 8 and c in text["compact"]:
                hits.setdefault(f"compact:{c}", self._assembled(f"compact:{c}", text))
            elif len(d) >= 6 and d in text["digits"]:
                hits.setdefault(f"digits:{d}", self._assembled(f"digits:{d}", text))
        return list(hits.values())

    def copied(self, text: str, origins: Iterable[str] = UNTRUSTED) -> dict[str, int]:
        """Per untrusted source, how many six-word windows of ``text`` it contains."""
        mine = set(_window_hashes(text))
        out: dict[str, int] = {}
        if not mine:
            return out
        for stored in self._texts(frozenset(origins)):
            n = len(mine.intersection(stored["windows"]))
            if n:
                out[stored["source"]] = out.get(stored["source"], 0) + n
        return out

    def copied_from(self, text: str) -> list[str]:
        """The third-party sources ``text`` copies: a run of :data:`WINDOW` words or more of
        one of them, or all of ``text`` (:data:`COPY_MIN_WORDS` words and
        :data:`COPY_MIN_CHARS` letters or digits at least) inside one. Text the user's
        request holds is the user's own."""
        if named_phrase(self, text):
            return []
        sources = list(self.copied(text, {"third_party"}))
        if sources:
            return sources
        c = compact(text)
        if len(_WORD.findall(fold(text))) >= COPY_MIN_WORDS and len(c) >= COPY_MIN_CHARS:
            return [
                t["source"] for t in self._texts(frozenset({"third_party"})) if c in t["compact"]
            ]
        return []

    def _texts(self, origins: frozenset[str]) -> Iterator[Mapping[str, Any]]:
        for text in self.data["texts"]:
            if text["origin"] in origins:
                yield text

    @staticmethod
    def _assembled(key: str, text: Mapping[str, Any]) -> Seen:
        return Seen(key, text["origin"], text["source"], "assembled from pieces")
