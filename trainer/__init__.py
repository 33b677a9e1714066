"""rlsup's reference RL stack (the demo's inference server, orchestrator and trainer).

numpy is not one of rlsup's dependencies (a laptop that only attaches needs none); torch warns
"Failed to initialize NumPy" when it is imported without it, though nothing here uses numpy. That
warning was the first line the Quickstart demo showed, so it is silenced for this package only.
"""

import warnings

warnings.filterwarnings("ignore", message="Failed to initialize NumPy", category=UserWarning)
