"""The viking:// namespace.

- uri.py: VikingURI: parse, validate, normalise, expand short forms, classify
- names.py: the names the product manages in the tree (sidecars), a record's stable id
- presets.py: the preset directories every account and user space starts with
- tags.py: `key=value` tags and their rules
- summaries.py: which directory summaries a path's content reaches
"""

__all__ = ["names", "presets", "summaries", "tags", "uri"]
