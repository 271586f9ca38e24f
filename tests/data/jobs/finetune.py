"""The `finetune` job of the failed scenario: it saves, then is SIGKILLed as the OOM killer
would kill it, on every attempt, until the queue's retries run out."""

import os
import signal
import sys
import time

bs = int(sys.argv[sys.argv.index("--bs") + 1])
print(f"epoch 1 step 200 loss 1.92 bs {bs}", flush=True)
with open(os.path.join(os.environ["GPUROOM_CKPT_DIR"], "ft_step_200.pt"), "wb") as f:
    f.truncate(1 << 30)
time.sleep(1.5)  # long enough for a poll to see it running
os.kill(os.getpid(), signal.SIGKILL)
