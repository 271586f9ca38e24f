"""The `train` job of the doctor recordings: a step line every half second and a checkpoint
every ten steps, until the builder tells it how to end, through a file in its directory:
`sigkill` (it is SIGKILLed, as by the OOM killer) or `gpu-lost` (CUDA fails, exit 1)."""

import os
import signal
import sys
import time

ckpt = os.environ["GPUROOM_CKPT_DIR"]
step = 0
while True:
    if os.path.exists("sigkill"):
        os.kill(os.getpid(), signal.SIGKILL)
    if os.path.exists("gpu-lost"):
        print("RuntimeError: CUDA error: unspecified launch failure", flush=True)
        sys.exit(1)
    step += 1
    print(f"step {step} loss {4.0 / step ** 0.5:.4f}", flush=True)
    if step % 10 == 0:
        with open(os.path.join(ckpt, "latest.pt"), "wb") as f:
            f.write(b"%d" % step)
    time.sleep(0.5)
