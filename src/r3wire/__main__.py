"""``python -m r3wire``: see :mod:`r3wire.cli`."""

import sys

from r3wire.cli import main

sys.exit(main())
