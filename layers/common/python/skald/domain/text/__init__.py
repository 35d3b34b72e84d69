"""Text and file formats.

- decoding.py: which bytes are text (and may reach sidecars, the index and the embedder)
- tokens.py: the token estimate budgets use
- formats.py: file formats: documents, media, where an added media file goes
- parsed.py: what parsing a file gives, kept as a sidecar stamped with its source's hash
- sections.py: heading-aware sections of long files
- outline.py: deterministic summaries (headings, code signatures, memory summaries)
- memoryfile.py: the provenance frontmatter and hidden trailer of memory files
- edits.py: exact string replacement, the rule behind an agent's edit
"""

__all__ = ["decoding", "edits", "formats", "memoryfile", "outline", "parsed", "sections", "tokens"]
