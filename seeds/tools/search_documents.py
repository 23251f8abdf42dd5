"""Search documents.

Finds documents, one match per document, for a query when the relevant source
is not yet known. Returns bounded matches with snippets and opaque source
references, never full documents.
"""

from typing import Optional

from quarry import BaseModel, Field


class Settings(BaseModel):
    max_results: int = Field(10, ge=1, le=50, description="Most document matches returned.")


class Inputs(BaseModel):
    query: str = Field(..., min_length=1, max_length=500, description="What to look for.")
    limit: Optional[int] = Field(
        None, ge=1, le=50, description="Matches wanted; capped at max_results (10 by default)."
    )


class DocumentMatch(BaseModel):
    sourceRef: str = Field(..., description="Opaque reference to the document.")
    title: str = Field("", description="Document title.")
    path: str = Field("", description="Document path.")
    snippet: str = Field("", description="Bounded excerpt that matched.")
    score: float = Field(0.0, description="Match score.")


class Output(BaseModel):
    matches: list[DocumentMatch] = Field(..., description="Best matching documents first.")


async def run(input, ctx):
    cap = ctx.settings["max_results"]
    limit = min(input.get("limit") or cap, cap)
    hits = await ctx.search_documents(input["query"], limit=limit)
    matches = [
        {
            "sourceRef": hit["source_ref"],
            "title": hit.get("title") or "",
            "path": hit.get("path") or "",
            "snippet": hit.get("snippet") or "",
            "score": float(hit.get("score") or 0.0),
        }
        for hit in hits[:limit]
    ]
    return {"matches": matches}
