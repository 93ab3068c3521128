"""Integrations that run llm-replay's methods inside other training libraries.

Each one wraps the other library's trainer (subclass, `super()` calls, input transforms) and never
copies its code, so it keeps working as that library changes. Each needs its optional extra.
"""
