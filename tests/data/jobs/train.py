"""The `llama-1b` job of the scenarios. Its first attempt saves a checkpoint and dies (exit 1,
so the queue retries it); the next one resumes from that checkpoint and trains until the
builder kills it. The log carries what a real trainer's does and the room must strip: a
colour CSI, tqdm-style \\r redraws and an OSC 52 clipboard write."""

import os
import sys
import time

ckpt = os.path.join(os.environ["GPUROOM_CKPT_DIR"], "step_4000.pt")
config = sys.argv[sys.argv.index("--config") + 1]
print(f"loading config {config}", flush=True)
print("\x1b[32mINFO\x1b[0m world_size=8 micro_batch=4 grad_accum=8", flush=True)
if not os.path.exists(ckpt):
    with open(ckpt, "wb") as f:
        f.truncate(2 << 30)  # a sparse 2 GiB file: a checkpoint's size without the disk
    print("step 4000 saved " + ckpt, flush=True)
    print("RuntimeError: NCCL communicator was aborted on rank 3", flush=True)
    sys.exit(1)
print(f"resumed from {ckpt} (step 4000)", flush=True)
print("step 4010 loss 2.3412 lr 3.0e-04 tok/s 412k", flush=True)
print("step 4020 loss 2.3377 lr 3.0e-04 tok/s 409k", flush=True)
sys.stdout.write("eval  12%|#2        | 6/50\reval  54%|#####4    | 27/50\r"
                 "eval 100%|##########| 50/50\n")
sys.stdout.write("\x1b]52;c;cm0gLXJmIH4=\x07step 4030 loss 2.3301 lr 3.0e-04 tok/s 411k\n")
print("step 4040 loss 2.3290 lr 3.0e-04 tok/s 410k", flush=True)
time.sleep(3600)
