"""Who a connection is: Kafka's KafkaPrincipal, and the names TLS certificates map to.

A connection is `User:ANONYMOUS` until it proves otherwise: a SASL login names the user, and a
client certificate on an SSL listener gives its subject, turned into a name by
`ssl.principal.mapping.rules` (Kafka's SslPrincipalMapper rules: `RULE:pattern/replacement/[LU]`
entries tried in order, `DEFAULT` keeping the whole subject as RFC 2253 prints it).
"""

from __future__ import annotations

import re
from typing import NamedTuple

from cryptography import x509

USER_TYPE = "User"


class KafkaPrincipal(NamedTuple):
    """A principal type and name; `str()` gives Kafka's `User:alice` form."""

    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """`User:alice` -> KafkaPrincipal; ValueError when there is no type."""
        principal_type, sep, name = text.partition(":")
        if not sep or not principal_type:
            raise ValueError(f"principal {text!r} is not of the form Type:name")
        return cls(principal_type, name)


ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")


class NoMappingRule(ValueError):
    """No `ssl.principal.mapping.rules` entry applies to a certificate subject."""


class _Rule(NamedTuple):
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str
    case: str  # "", "L" or "U"


# One rule of the list and the comma after it; a rule's pattern and replacement may hold
# commas and escaped slashes, so the list is cut by this pattern, not by splitting on ",".
_RULE = re.compile(r"\s*(DEFAULT|RULE:((?:\\/|[^/])*)/((?:\\/|[^/])*)/([LU]?))\s*(?:,|$)")


def parse_mapping_rules(text: str) -> tuple[_Rule, ...]:
    """Parse ssl.principal.mapping.rules; ValueError names the part that is not a rule."""
    rules: list[_Rule] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        match = _RULE.match(text, pos)
        if match is None or match.end() == pos:
            raise ValueError(f"invalid ssl.principal.mapping.rules entry at {text[pos:]!r}")
        if match.group(1) == "DEFAULT":
            rules.append(_Rule(None, "", ""))
        else:
            pattern = match.group(2).replace("\\/", "/")
            # Java's $1 group references become Python's \g<1>.
            replacement = re.sub(r"\$(\d+)", r"\\g<\1>", match.group(3).replace("\\/", "/"))
            rules.append(_Rule(re.compile(pattern), replacement, match.group(4)))
        pos = match.end()
    return tuple(rules) or (_Rule(None, "", ""),)


def map_subject(subject: str, rules: tuple[_Rule, ...]) -> str:
    """The principal name of a certificate subject: the first rule matching the whole subject."""
    for rule in rules:
        if rule.pattern is None:
            return subject
        if rule.pattern.fullmatch(subject):
            name = rule.pattern.sub(rule.replacement, subject)
            return name.lower() if rule.case == "L" else name.upper() if rule.case == "U" else name
    raise NoMappingRule(f"no ssl.principal.mapping.rules entry applies to {subject}")


def certificate_subject(der: bytes) -> str:
    """A DER certificate's subject in RFC 2253 order (`CN=client,OU=ops,O=example`)."""
    return x509.load_der_x509_certificate(der).subject.rfc4514_string()
