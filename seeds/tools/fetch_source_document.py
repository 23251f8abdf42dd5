"""Fetch source document.

Reads one bounded page of a known source's committed original text, as the
caller, and returns it with the evidence references admitted for that page
and a cursor when more remains.
"""

from typing import Optional

from quarry import BaseModel, Field


class Settings(BaseModel):
    page_chars: int = Field(
        4000, ge=500, le=20000, description="Most characters of text returned per page."
    )


class Inputs(BaseModel):
    sourceRef: str = Field(..., min_length=1, description="Opaque reference to the source.")
    cursor: Optional[str] = Field(
        None, description="Cursor from a previous page; omit for the first page."
    )


class Output(BaseModel):
    title: str = Field("", description="Document title.")
    path: str = Field("", description="Document path.")
    text: str = Field(..., description="Bounded page of the document's text.")
    evidence_refs: list[str] = Field(..., description="Evidence references for this page.")
    cursor: Optional[str] = Field(None, description="Cursor for the next page, if any.")


async def run(input, ctx):
    page = await ctx.fetch_source_document(
        input["sourceRef"],
        cursor=input.get("cursor"),
        max_chars=ctx.settings["page_chars"],
    )
    return {
        "title": page.get("title") or "",
        "path": page.get("path") or "",
        "text": page.get("text") or "",
        "evidence_refs": list(page.get("evidence_refs") or []),
        "cursor": page.get("cursor"),
    }
