"""`python -m llm_replay.cli`: the same as the `llm-replay` command."""

import sys

from llm_replay.cli.commands import main

sys.exit(main())
