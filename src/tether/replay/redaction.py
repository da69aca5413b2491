"""Redaction: what a cassette must never hold, removed from anything JSON-ready.

Four rules, each a documented pattern (docs/workflows.md, "Secrets never reach the file"):

- **by value**: the values of environment variables named like a credential
  (:data:`SECRET_NAME`: ``OPENAI_API_KEY``, ``DB_PASS``, ``GITHUB_TOKEN``...), the password of
  any URL in the environment (``DATABASE_URL=postgresql://app:pw@db/app``), and the values the
  app marks secret, with every fragment of 8 characters or more of a marked value (a model
  that echoes half a token leaks it too);
- **by key**: the whole value of a mapping key named like a credential
  (:data:`SENSITIVE_FIELD`: ``Authorization``, ``x_api_key``, ``private_key``, ``passwd``,
  ``pwd``, ``*_token``, ``*secret``...);
- **by shape** (:data:`SHAPES`): provider keys (``sk-...``, ``sk-ant-...``), GitHub
  (``ghp_...``, ``github_pat_...``), Stripe (``sk_live_...``, ``rk_live_...``), AWS access key
  ids (``AKIA...``), Slack (``xox.-...``), Google (``AIza...``), JSON web tokens, PEM private
  keys, ``Bearer``/``Basic`` credentials and ``key=value`` pairs of credential names;
- **DSN passwords**: ``scheme://user:password@host`` keeps everything but the password.

Secret-detection libraries were weighed: detect-secrets reports partial values for several
of these shapes (``ghp`` for a GitHub token), which cannot drive a redaction, and its
settings are process-wide; so the shapes are written here, tested one by one.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

from tether.errors import ConfigError

REDACTED = "[redacted]"
SECRET_NAME = re.compile(
    r"KEY|TOKEN|SECRET|PASS|PWD|CREDENTIAL|AUTH|PRIVATE|DSN|COOKIE", re.IGNORECASE
)
"""Environment variables whose values are redacted wherever they appear."""
NOT_SECRET_NAMES = frozenset({"PWD", "OLDPWD"})
"""The shell's working directories: named like a password, they are paths."""
SENSITIVE_FIELD = re.compile(
    r"^(authorization|proxy_authorization|cookie|set_cookie|credentials?|dsn"
    r"|pass|passwd|pwd|.*_pass|.*password|.*secret|.*token"
    r"|(.*_)?(api|x_api|access|private|secret|signing|encryption|client)_?key)$",
    re.IGNORECASE,
)
"""Mapping keys whose values are redacted whole (matched with ``-`` read as ``_``)."""
_CREDENTIAL_NAMES = (
    r"api[-_]?key|x-api-key|authorization|access[-_]?token|client[-_]?secret"
    r"|private[-_]?key|password|passwd|pwd|secret"
)
SHAPES: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S),
        REDACTED,
    ),
    (re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"), REDACTED),
    (re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})"), REDACTED),
    (re.compile(r"\b(?:sk|rk|pk|whsec)_(?:live|test)_[A-Za-z0-9]{10,}"), REDACTED),
    (re.compile(r"\b(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}\b"), REDACTED),
    (re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}"), REDACTED),
    (re.compile(r"\bAIza[0-9A-Za-z_-]{35}"), REDACTED),
    (re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), REDACTED),
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}"), r"\1 " + REDACTED),
    (
        re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*://[^\s:/@\"']+:)([^\s@/\"']+)(@)"),
        r"\1" + REDACTED + r"\3",
    ),
    (
        re.compile(rf"(?i)\b({_CREDENTIAL_NAMES})([\"']?\s*[:=]\s*[\"']?)([^\s\"',;&}}]{{4,}})"),
        r"\1\2" + REDACTED,
    ),
)
"""Values shaped like a credential, and what replaces them."""
_MIN_SECRET = 8
_FRAGMENT = 8


class Redactor:
    """Removes secrets from anything JSON-ready (the rules are in the module docstring).

    ``secrets``: values the app marks secret (from 4 characters; their fragments of 8 or
    more are redacted too). ``environ`` (default ``os.environ``) supplies the credentials to
    redact by value (8 characters or more), each replaced by ``[redacted:NAME]``.
    """

    def __init__(
        self, secrets: Iterable[str] = (), *, environ: Mapping[str, str] | None = None
    ) -> None:
        env = os.environ if environ is None else environ
        named: dict[str, str] = {}
        for name, value in env.items():
            secret_name = SECRET_NAME.search(name) and name.upper() not in NOT_SECRET_NAMES
            if secret_name and len(value.strip()) >= _MIN_SECRET:
                named[value] = f"[redacted:{name}]"
            password = _url_password(value)
            if password is not None and len(password) >= 4:
                named.setdefault(password, f"[redacted:{name}]")
        marked = []
        for value in secrets:
            if len(value) < 4:
                raise ConfigError("a secret to redact must have at least 4 characters")
            named[value] = REDACTED
            marked.append(value)
        self._values = sorted(named.items(), key=lambda kv: -len(kv[0]))
        self._marked = [m for m in marked if len(m) > _FRAGMENT]
        windows = {m[i : i + _FRAGMENT] for m in self._marked for i in range(len(m) - 7)}
        self._windows = (
            re.compile("|".join(re.escape(w) for w in sorted(windows))) if windows else None
        )

    def text(self, text: str) -> str:
        """``text`` with every secret value, fragment and credential shape replaced."""
        for value, label in self._values:
            if value in text:
                text = text.replace(value, label)
        if self._windows is not None:
            text = self._fragments(text)
        for pattern, replacement in SHAPES:
            text = pattern.sub(replacement, text)
        return text

    def value(self, value: Any) -> Any:
        """A copy of a JSON-ready value with secrets removed (sensitive keys blanked)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {k: REDACTED if v and _sensitive(k) else self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(v) for v in value]
        return value

    def _fragments(self, text: str) -> str:
        """Each run of text that is a piece (of 8 characters or more) of a marked secret."""
        assert self._windows is not None
        out, end = [], 0
        for match in self._windows.finditer(text):
            if match.start() < end:
                continue
            start, stop = match.start(), match.end()
            for secret in self._marked:
                at = secret.find(match.group())
                if at < 0:
                    continue
                left, right = at, at + _FRAGMENT
                while left > 0 and start > end and text[start - 1] == secret[left - 1]:
                    start, left = start - 1, left - 1
                while right < len(secret) and stop < len(text) and text[stop] == secret[right]:
                    stop, right = stop + 1, right + 1
                break
            out.append(text[end:start] + REDACTED)
            end = stop
        return "".join(out) + text[end:] if out else text


def _sensitive(key: object) -> bool:
    return isinstance(key, str) and bool(SENSITIVE_FIELD.match(key.replace("-", "_")))


def _url_password(value: str) -> str | None:
    """The password of a URL (``scheme://user:password@host``), if ``value`` is one."""
    if "://" not in value or "@" not in value:
        return None
    try:
        return urlsplit(value.strip()).password
    except ValueError:
        return None
