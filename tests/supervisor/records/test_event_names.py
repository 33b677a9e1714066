"""Event classes are named for their journal kinds by one rule (supervisor/records/events.py)."""

from __future__ import annotations

import re

from rlsup.supervisor.records.events import EVENT_CLASSES

SUBJECTS = "Component|Artefacts"
PARTICIPLES = "Received|Ended|Raised|Updated|Sampled"


def test_each_event_class_is_its_kind_by_one_rule() -> None:
    wrong = []
    for cls in EVENT_CLASSES:
        camel = "".join(w.capitalize() for w in cls.kind.split("_"))
        if not re.fullmatch(rf"(?:{SUBJECTS})?{camel}(?:{PARTICIPLES})?", cls.__name__):
            wrong.append(f"{cls.__name__} ({cls.kind!r})")
    assert not wrong, f"named against the rule in events.py: {wrong}"
    assert len(EVENT_CLASSES) >= 20
