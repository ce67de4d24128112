import sys

from beam_shards.cli.commands import main

sys.exit(main())
