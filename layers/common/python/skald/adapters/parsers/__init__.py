"""Documents and media turned into Markdown text, or the reason there is none. Each format's
library is imported on first use only.

- library.py: LibraryParsers: the parser the services use, dispatching on the format
- pdf.py, office.py (DOCX, PPTX, XLSX), web.py (HTML, EPUB), notebook.py, delimited.py (CSV,
  TSV), media.py (images, audio, video described from their metadata)
- common.py: the bounded Markdown writer, the zip guard, tables
"""

__all__ = ["common", "delimited", "library", "media", "notebook", "office", "pdf", "web"]
