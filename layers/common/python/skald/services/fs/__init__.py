"""The viking:// tree of one account on its blob store.

- filesystem.py: VikingFS: directories, files, sidecars, attributes, reads and writes
- attributes.py: EntryAttributes: tags and creation time in hidden sidecars (VikingFS's base)
- entries.py: Entry, FsChange, WriteResult: the values VikingFS hands out
- scan.py: every visible file of a tree, by name (glob) or with its content (grep)
- transfer.py: moving and copying a file or a subtree
- write_batch.py: HeldWrites: unconditional blob writes held back and written together
- browse.py: BrowseService: ls, tree and stat as the API shows them
- parsing.py: ParsingService: documents and media as Markdown, kept as a sidecar
"""

__all__ = [
    "attributes",
    "browse",
    "entries",
    "filesystem",
    "parsing",
    "scan",
    "transfer",
    "write_batch",
]
