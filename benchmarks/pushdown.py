#!/usr/bin/env python
"""Filter pushdown's measured gain, on its own: ``python benchmarks/pushdown.py``.

5,000,000 records on a 10-partition topic by default: ``partition = k`` and ``timestamp >= T``
(the last 1%), with and without pushdown; rows read by the tasks and wall time. What each row
means, and why the timestamp case needs a correct lookup: ``kafka_direct_bench/pushdown.py``.
"""

import sys

from kafka_direct_bench.pushdown import main

if __name__ == "__main__":
    sys.exit(main())
