"""Content brought in whole: remote sources, skill packages, packs.

- remote.py: what an add_resource path names (a page, a repository) and where it lands
- repofiles.py: which files of a fetched repository are added, and their names
- crawl.py: which pages of a site a web source covers
- netguard.py: which network addresses a fetch may reach (the SSRF rules)
- skills.py: SKILL.md: read, validated and rendered back
- packs.py: the .ovpack format and the rules a pack must satisfy
"""

__all__ = ["crawl", "netguard", "packs", "remote", "repofiles", "skills"]
