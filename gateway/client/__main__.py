import sys

from gateway.client.cli import main

sys.exit(main())
