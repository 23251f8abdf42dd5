"""Query expansion with the tool's chat model.

Keeps the question at weight 1.0 and asks the model (ctx.llm, one grammar-constrained call)
for a keyword query (for BM25), the question asked another way, and a short passage that
would answer it (HyDE, for the vector side), each added at its own weight.
"""

from quarry import BaseModel, Field


class Settings(BaseModel):
    max_query_variants: int = Field(4, ge=1, le=4, description="Most streams, the question included.")
    max_tokens: int = Field(200, ge=16, le=256, description="Most tokens the model writes.")
    keyword_weight: float = Field(0.6, gt=0.0, le=1.0)
    rephrase_weight: float = Field(0.6, gt=0.0, le=1.0)
    passage_weight: float = Field(0.5, gt=0.0, le=1.0)


SCHEMA = {
    "type": "object",
    "properties": {
        "keywords": {"type": "string", "maxLength": 60},
        "question": {"type": "string", "maxLength": 120},
        "passage": {"type": "string", "maxLength": 200},
    },
    "required": ["keywords", "question", "passage"],
}

SYSTEM = (
    "You help a search engine find documentation pages. For the user's question, write: "
    "keywords: the technical terms a page answering it would use; question: the question "
    "asked again in the documentation's own words; passage: two sentences a page answering "
    "it would contain. Reply with JSON only."
)


async def run(input, ctx):
    query = " ".join((input.get("query") or "").split())
    if not query:
        return {"kind": "query_variants", "queries": []}
    settings = ctx.settings
    queries = [{"query": query, "weight": 1.0}]
    out = await ctx.llm(query, system=SYSTEM, max_tokens=settings["max_tokens"], json_schema=SCHEMA)
    found = out.get("json") or {}
    for key, weight in (
        ("keywords", settings["keyword_weight"]),
        ("question", settings["rephrase_weight"]),
        ("passage", settings["passage_weight"]),
    ):
        text = " ".join(str(found.get(key) or "").split())
        if text and text.casefold() != query.casefold():
            queries.append({"query": text, "weight": float(weight)})
    return {"kind": "query_variants", "queries": queries[: settings["max_query_variants"]]}
