"""The real decoding worker (`specviz.runtime.worker`), with autoregressive decoding's step made to hang
after SPECVIZ_TEST_HANG_AFTER steps, as a wedged kernel or a deadlocked library would: for the
app's watchdog test (tests/test_public_server.py). The hang holds the worker's main thread in a
sleep it never leaves, so the worker reads no "stop" and answers nothing."""

import os
import sys
import time

from specviz.autoregressive.decoder import AutoregressiveDecoder
from specviz.runtime import worker

HANG_AFTER = int(os.environ.get("SPECVIZ_TEST_HANG_AFTER", "3"))
original = AutoregressiveDecoder._step


def hanging_step(self):
    if len(self.trace.steps) >= HANG_AFTER:
        time.sleep(3600)
    return original(self)


AutoregressiveDecoder._step = hanging_step

if __name__ == "__main__":
    sys.exit(worker.main())
