"""Text rendering of a run for people: status tables, bars, the incident report. Imports the core, never the reverse."""
