"""The preset directories every account and user space starts with, and the description each
one's summary falls back to."""

from __future__ import annotations

USER_PRESET = ("memories", "resources", "skills", "privacy", "sessions", "peers")
PRESET_DESCRIPTIONS = {
    "resources": "Shared resources of the account: documents, code and data.",
    "agent": "Agent space: skills and endpoints shared by the account's agents.",
    "agent/skills": "Skills available to every agent of the account.",
    "user": "User spaces.",
    "memories": "Long-term memories extracted from conversations.",
    "user-resources": "Resources private to this user.",
    "skills": "Skills private to this user.",
    "privacy": "Private settings and data of this user.",
    "sessions": "Conversation sessions and their archives.",
    "peers": "Memories and resources about the people and agents this user talks with.",
}
