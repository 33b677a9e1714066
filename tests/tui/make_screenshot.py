"""Write docs/tui.svg: the TUI on the fake 8-GPU run at 200x50 (the README's screenshot).

    python tests/tui/make_screenshot.py [OUT.svg]
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import fake  # noqa: E402


async def shoot(out: Path) -> None:
    app = fake.make_app(fake.eight_gpu_run())
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.pause(0.3)
        app.save_screenshot(filename=out.name, path=str(out.parent))


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE.parent.parent / "docs" / "tui.svg"
    asyncio.run(shoot(target.resolve()))
    print(target)
