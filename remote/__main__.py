import sys

from gpuroom.remote.cli import main

sys.exit(main())
