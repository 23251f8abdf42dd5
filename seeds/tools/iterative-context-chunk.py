"""Score-ordered candidate selection.

Deduplicates the issued evidence references (first occurrence wins), orders
them by server-issued score, highest first, with ties keeping their input
order, and keeps up to `max_items`. It fetches no new evidence.
"""

from quarry import BaseModel, Field


class Settings(BaseModel):
    max_items: int = Field(80, ge=1, le=500, description="Most references kept.")


def score_of(candidate):
    try:
        return float(candidate.get("score") or 0.0)
    except (TypeError, ValueError):
        return 0.0


async def run(input, ctx):
    unique, seen = [], set()
    for candidate in input.get("candidates") or []:
        ref = candidate.get("evidence_ref")
        if ref and ref not in seen:
            seen.add(ref)
            unique.append(candidate)

    # sorted() is stable, so equal scores keep their input order.
    ranked = sorted(unique, key=lambda c: -score_of(c))
    limit = ctx.settings["max_items"]
    return {"chunks": [{"evidence_ref": c["evidence_ref"]} for c in ranked[:limit]]}
