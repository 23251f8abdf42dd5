"""Fetch neighbors.

Returns the chunks adjacent to an admitted chunk in the same document, as the
caller, within the requested radius, which is capped at `max_radius`.
"""

from quarry import BaseModel, Field


class Settings(BaseModel):
    max_radius: int = Field(4, ge=1, le=16, description="Largest radius allowed.")


class Inputs(BaseModel):
    evidence_ref: str = Field(..., min_length=1, description="An admitted evidence reference.")
    radius: int = Field(
        1, ge=1, description="Chunks to fetch on each side; capped at max_radius (4 by default)."
    )


class Chunk(BaseModel):
    evidence_ref: str = Field(..., description="Evidence reference for the chunk.")
    ordinal: int = Field(..., description="Position of the chunk in its document.")
    text: str = Field(..., description="Chunk text.")


class Output(BaseModel):
    chunks: list[Chunk] = Field(..., description="Neighbouring chunks in document order.")
    radius: int = Field(..., description="The radius actually used.")


async def run(input, ctx):
    radius = min(input.get("radius") or 1, ctx.settings["max_radius"])
    result = await ctx.fetch_neighbors(input["evidence_ref"], radius=radius)
    chunks = [
        {"evidence_ref": c["evidence_ref"], "ordinal": c["ordinal"], "text": c["text"]}
        for c in result.get("chunks") or []
    ]
    # The host may cap the radius further (its hard maximum): report the one it used.
    return {"chunks": chunks, "radius": int(result.get("radius") or radius)}
