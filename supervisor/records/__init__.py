"""The shared model: events, the state reducer, the control protocol, progress, redaction, the clock.

The ground floor: imports nothing else of rlsup; every floor above and the TUI read these records."""
