"""Agent skills, and what an agent does in one step.

- service.py: SkillService (add, replace, list, show, remove)
- search.py: SkillSearch (find)
- agent.py: AgentService: edit, remember, add from text or a URL, composed from the other
  services (the MCP tools call it)
"""

__all__ = ["agent", "search", "service"]
