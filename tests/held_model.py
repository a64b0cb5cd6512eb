"""A model that a test can hold: ``model=held`` (a ./conf yaml naming :func:`mlp`) builds decpriv's MLP,
but in a job of submitit's local executor it first waits while the file named by ``DECPRIV_TEST_HOLD``
exists (the sweep's own process builds the model too, to check the config, and is not held). A sweep's
job then stays running until the test lets it go or stops it, however fast the machine simulates."""

import functools
import os
import time
from pathlib import Path

from decpriv.models import architectures


@functools.wraps(architectures.mlp)
def mlp(*args, **kwargs):
    hold = Path(os.environ.get("DECPRIV_TEST_HOLD", "/nonexistent"))
    while "SUBMITIT_LOCAL_JOB_ID" in os.environ and hold.exists():
        time.sleep(0.05)
    return architectures.mlp(*args, **kwargs)
