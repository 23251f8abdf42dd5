"""Fetch document chunks.

Reads the next bounded page of indexed chunks from one or more known sources,
each from its optional cursor, as the caller, and returns each page with a
cursor when more remains. It does not rerun a Pipeline.
"""

from typing import Optional

from quarry import BaseModel, Field


class Settings(BaseModel):
    page_size: int = Field(8, ge=1, le=32, description="Most chunks returned per source.")
    max_sources: int = Field(4, ge=1, le=16, description="Most sources read per call.")


class SourcePage(BaseModel):
    sourceRef: str = Field(..., min_length=1, description="Opaque reference to the source.")
    cursor: Optional[str] = Field(
        None, description="Cursor from a previous page; omit for the first page."
    )


class Inputs(BaseModel):
    sources: list[SourcePage] = Field(
        ...,
        min_length=1,
        max_length=16,
        description="Sources to page; only the first max_sources (4 by default) are read.",
    )


class Chunk(BaseModel):
    evidence_ref: str = Field(..., description="Evidence reference for the chunk.")
    ordinal: int = Field(..., description="Position of the chunk in its document.")
    text: str = Field(..., description="Chunk text.")


class ChunkPage(BaseModel):
    sourceRef: str = Field(..., description="The source this page came from.")
    chunks: list[Chunk] = Field(..., description="Chunks in document order.")
    cursor: Optional[str] = Field(None, description="Cursor for the next page, if any.")


class Output(BaseModel):
    pages: list[ChunkPage] = Field(..., description="One page per source read.")


async def run(input, ctx):
    settings = ctx.settings
    pages = []
    for source in input["sources"][: settings["max_sources"]]:
        page = await ctx.fetch_document_chunks(
            source["sourceRef"], cursor=source.get("cursor"), limit=settings["page_size"]
        )
        chunks = [
            {"evidence_ref": c["evidence_ref"], "ordinal": c["ordinal"], "text": c["text"]}
            for c in page.get("chunks") or []
        ]
        pages.append(
            {"sourceRef": source["sourceRef"], "chunks": chunks, "cursor": page.get("cursor")}
        )
    return {"pages": pages}
