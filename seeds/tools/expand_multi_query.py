"""Multi-query expansion.

Keeps the normalised original query (Unicode NFKC, whitespace collapsed) at
weight 1.0 and, when the query contains product-like identifiers such as
"XR-200", "iPhone15", "SKU_4471" or "v2.3.1", adds one identifier-only variant
at the configured identifier weight. No governed context is used.
"""

import re
import unicodedata

from quarry import BaseModel, Field


class Settings(BaseModel):
    max_query_variants: int = Field(
        2, ge=1, le=8, description="Most query streams emitted, the original included."
    )
    identifier_weight: float = Field(
        0.8, gt=0.0, le=1.0, description="Weight of the identifier-only variant."
    )


# A run of letters, digits and the joiners - _ . / that starts and ends with a
# letter or digit; it counts as an identifier only if it has both kinds.
TOKEN = re.compile(r"[^\W_](?:[\w./-]*[^\W_])?")


def normalise(text):
    return " ".join(unicodedata.normalize("NFKC", text or "").split())


def identifiers(query):
    found, seen = [], set()
    for token in TOKEN.findall(query):
        has_letter = any(ch.isalpha() for ch in token)
        has_digit = any(ch.isdigit() for ch in token)
        key = token.casefold()
        if len(token) >= 2 and has_letter and has_digit and key not in seen:
            seen.add(key)
            found.append(token)
    return found


async def run(input, ctx):
    settings = ctx.settings
    query = normalise(input.get("query"))
    if not query:
        return {"kind": "query_variants", "queries": []}

    queries = [{"query": query, "weight": 1.0}]
    ids = " ".join(identifiers(query))
    if ids and ids.casefold() != query.casefold():
        queries.append({"query": ids, "weight": float(settings["identifier_weight"])})

    return {"kind": "query_variants", "queries": queries[: settings["max_query_variants"]]}
