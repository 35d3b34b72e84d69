"""One router per route family of /api/v1 (each named in the catalogue's `routers` of the
function that serves it): admin, console, content, fs, packs, resources, search, sessions,
skill_search, skills, system, tasks, watches."""

__all__ = [
    "admin",
    "console",
    "content",
    "fs",
    "packs",
    "resources",
    "search",
    "sessions",
    "skill_search",
    "skills",
    "system",
    "tasks",
    "watches",
]
