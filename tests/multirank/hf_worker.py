"""Scenario ``hf`` of scenarios.py, for tests/test_hf_callback.py: a real ``transformers.Trainer`` on 2
gloo ranks, in the process group the scenarios share (the Trainer takes it as it finds it).

Each rank trains a tiny GPT-2 for 3 steps with ``FlopsightCallback(profile_step=1)`` (its second step), its
``output_dir`` its own (``OUT/rank<r>``, so what each rank wrote can be told apart), and
writes ``OUT/rank<r>.json``: the number of results its ``callback.result.ranks`` holds,
the world size recorded, the files in its output_dir, the logged flopsight entries.
"""

import json
import os
import sys

from helpers import Tokens, tiny_gpt2  # tests/ is on the path of scenarios.py
from transformers import Trainer, TrainingArguments

from flopsight.integrations.hf import FlopsightCallback

out = sys.argv[1]
rank = int(os.environ["RANK"])
args = TrainingArguments(output_dir=f"{out}/rank{rank}", use_cpu=True, ddp_backend="gloo", report_to=[],
                         save_strategy="no", per_device_train_batch_size=2, max_steps=3, logging_steps=1, seed=0,
                         disable_tqdm=True)
callback = FlopsightCallback(profile_step=1, output=["profile.json", "profile.html"], gather_timeout=30)
trainer = Trainer(model=tiny_gpt2(), args=args, train_dataset=Tokens(), callbacks=[callback])
trainer.train()

result = callback.result
report = {
    "ranks": len(result.ranks),
    "gathered": [r.metadata.rank for r in result.ranks if r is not None],
    "world_size": result.metadata.world_size,
    "written": callback.written,
    "files": sorted(os.listdir(args.output_dir)) if os.path.isdir(args.output_dir) else [],
    "logged": [e for e in trainer.state.log_history if any(k.startswith("flopsight/") for k in e)],
}
with open(f"{out}/rank{rank}.json", "w") as f:
    json.dump(report, f)
