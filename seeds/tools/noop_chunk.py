"""Pass-through chunk.

Returns the issued evidence references in their existing order without any
selection, deduplication or reordering.
"""


async def run(input, ctx):
    return {
        "chunks": [
            {"evidence_ref": c["evidence_ref"]} for c in input.get("candidates") or []
        ]
    }
