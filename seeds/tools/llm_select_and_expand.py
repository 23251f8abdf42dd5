"""Bounded candidate selection.

Deduplicates the issued evidence references (first occurrence wins) and keeps
the first `max_items` in their existing order. Despite the legacy slug it is
deterministic: it calls no LLM and fetches no new evidence.
"""

from quarry import BaseModel, Field


class Settings(BaseModel):
    max_items: int = Field(30, ge=1, le=500, description="Most references kept.")


async def run(input, ctx):
    limit = ctx.settings["max_items"]
    chunks, seen = [], set()
    for candidate in input.get("candidates") or []:
        ref = candidate.get("evidence_ref")
        if not ref or ref in seen:
            continue
        seen.add(ref)
        chunks.append({"evidence_ref": ref})
        if len(chunks) >= limit:
            break
    return {"chunks": chunks}
