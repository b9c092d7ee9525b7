"""`python -m webhook`: what the `foo-operator-webhook` console script runs (webhook.launcher)."""

import sys

from .launcher import main

sys.exit(main())
