"""The live run: the single authority over its components, carrying out what the rules decide; the control server."""
