"""`rlsup check`: everything that would make a run fail early, found before anything starts."""
