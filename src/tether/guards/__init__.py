"""Guards: what an agent is given, enforced in code rather than in its instructions.

Each guard is a tool wrapper, a call policy or a small helper, imported from its own module
(``tether.guards.approval``, ``.policy``, ``.callpolicy``, ``.store``, ``.normalize``,
``.instructions``, ``.provenance``, ``.objects``, ``.recording``, ``.registry``,
``.linear``, ...); importing this package loads nothing.
"""
