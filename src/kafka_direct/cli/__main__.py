"""``python -m kafka_direct.cli``: the ``kafka-direct`` command. Runs in the user's process."""

from kafka_direct.cli import main

raise SystemExit(main())
