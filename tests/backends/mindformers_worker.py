"""What msrun starts in place of run_mindformer.py in tests/backends.rs: each worker joins the
cluster msrun set up, loads the emitted config with MindFormerConfig, applies its parallel
context over the real communication group, checks the device count, and exits 0.
Usage (by launch.sh): mindformers_worker.py --config config.yaml --run_mode train"""

import argparse

import mindspore as ms
from mindformers.core.context.validators import execute_validator
from mindformers.tools.check_rules import _check_parallel
from mindformers.tools.register.config import MindFormerConfig
from mindspore.communication import get_group_size, get_rank, init

parser = argparse.ArgumentParser()
parser.add_argument("--config", required=True)
parser.add_argument("--run_mode", required=True)
args = parser.parse_args()

ms.set_context(device_target="CPU")
init()
cfg = MindFormerConfig(args.config)
execute_validator(cfg)
kwargs = dict(cfg.parallel)
kwargs["pipeline_stages"] = cfg.parallel_config.pipeline_stage
kwargs["device_num"] = get_group_size()
ms.set_auto_parallel_context(**kwargs)
_check_parallel(cfg)
print(f"mpipec worker ok: rank {get_rank()} of {get_group_size()}, run_mode {args.run_mode}", flush=True)
