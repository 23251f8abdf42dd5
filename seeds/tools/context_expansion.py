"""Context expansion.

Runs one bounded batch of targeted searches, one per query (at most
`max_queries`, `per_query` results each), as the caller, and returns the
distinct evidence references found, in query then rank order, capped at
`max_refs`. Use it when the evidence gap is broad, comparative, conflicting
or coverage-sensitive.
"""

from quarry import BaseModel, Field


class Settings(BaseModel):
    max_queries: int = Field(4, ge=1, le=8, description="Most searches run per call.")
    per_query: int = Field(5, ge=1, le=20, description="Results requested per search.")
    max_refs: int = Field(12, ge=1, le=100, description="Most references returned.")


class Inputs(BaseModel):
    queries: list[str] = Field(
        ...,
        min_length=1,
        max_length=8,
        description="Targeted, non-empty search queries; only the first max_queries "
        "(4 by default) are run.",
    )


class Output(BaseModel):
    evidence_refs: list[str] = Field(..., description="Distinct evidence references found.")
    queries_run: int = Field(..., description="How many searches were run.")


async def run(input, ctx):
    settings = ctx.settings
    queries = [q.strip() for q in input["queries"] if q and q.strip()]
    queries = queries[: settings["max_queries"]]

    refs, seen = [], set()
    for query in queries:
        for hit in await ctx.search(query, top_k=settings["per_query"]):
            ref = hit.get("evidence_ref")
            if ref and ref not in seen:
                seen.add(ref)
                refs.append(ref)

    return {"evidence_refs": refs[: settings["max_refs"]], "queries_run": len(queries)}
