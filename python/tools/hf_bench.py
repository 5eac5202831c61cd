#!/usr/bin/env python3
"""HF transformers on the same checkpoint and GPU as `gearbox bench`, written as the same
JSON, so that bench_table.py can put them side by side (docs/PERFORMANCE.md).

  python3 python/tools/hf_bench.py CHECKPOINT_DIR --mode eager|compile --json OUT
      [--context 128] [--steps 64] [--prefill 128,512] [--rounds 5] [--round-decodes 64]

eager:   the checkpoint's transformers model (AutoModelForCausalLM) in bf16 with its default (dynamic) KV cache.
compile: the same with a static KV cache and the forward compiled with torch.compile
         (--compile-mode, default "reduce-overhead": CUDA graphs), the setup transformers
         documents for fast decoding. A failure is recorded in the JSON instead of numbers;
         the JSON is written before the run starts, so even a crash leaves a record.
Times are CUDA-event times per call, median and p10/p90, after warm-up.
"""
import argparse
import json
import statistics
import sys
import traceback

import torch
import transformers
from transformers import AutoModelForCausalLM


def percentile(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, max(0, round(q * (len(v) - 1))))]


class Model:
    def __init__(self, directory, mode, max_len, compile_mode):
        self.mode = mode
        self.model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.bfloat16).cuda().eval()
        self.max_len = max_len
        if mode == "compile":
            self.model.forward = torch.compile(self.model.forward, mode=compile_mode, fullgraph=True)
        self.cache = None

    def reset(self):
        if self.mode == "compile":
            from transformers import StaticCache
            if self.cache is None:
                self.cache = StaticCache(config=self.model.config, max_batch_size=1, max_cache_len=self.max_len,
                                         device="cuda", dtype=torch.bfloat16)
            self.cache.reset()
        else:
            from transformers import DynamicCache
            self.cache = DynamicCache()

    @torch.no_grad()
    def call(self, ids, start):
        t = torch.tensor([ids], device="cuda")
        pos = torch.arange(start, start + len(ids), device="cuda")
        out = self.model(input_ids=t, past_key_values=self.cache, cache_position=pos, use_cache=True,
                         logits_to_keep=1)
        return out.logits


def timed(fn):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    fn()
    b.record()
    b.synchronize()
    return a.elapsed_time(b)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("checkpoint")
    p.add_argument("--mode", choices=["eager", "compile"], required=True)
    p.add_argument("--json", required=True)
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--steps", type=int, default=64)
    p.add_argument("--prefill", default="128,512")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--round-decodes", type=int, default=64)
    p.add_argument("--compile-mode", default="reduce-overhead", help="torch.compile mode (--mode compile)")
    a = p.parse_args()
    lengths = [int(x) for x in a.prefill.split(",")]
    if min([a.context, a.steps, a.rounds, a.round_decodes] + lengths) < 1:
        p.error("every count and length must be >= 1")
    name = f"hf-{a.mode}" + (f" ({a.compile_mode})" if a.mode == "compile" else "")
    result = {"engine": name, "transformers": transformers.__version__, "torch": torch.__version__,
              "device": torch.cuda.get_device_name()}
    with open(a.json, "w") as f:  # replaced below; what stays if the process dies
        json.dump(dict(result, error="the process ended before writing results (crash or timeout)"), f)
    try:
        m = Model(a.checkpoint, a.mode, max(lengths + [a.context + max(a.steps, a.round_decodes)]) + 8,
                  a.compile_mode)
        vocab = m.model.config.vocab_size
        prompt = [(3 + i * 7919) % vocab for i in range(a.context)]
        # Decode at `context`, after a prefill, with warm-up (compilation happens here).
        m.reset()
        m.call(prompt, 0)
        for i in range(8):
            m.call([7], a.context + i)
        m.reset()
        m.call(prompt, 0)
        ms = [timed(lambda i=i: m.call([7], a.context + i)) for i in range(a.steps)]
        result["decode"] = [{"profile": a.mode, "ms": statistics.median(ms), "p10": percentile(ms, 0.1),
                             "p90": percentile(ms, 0.9)}]
        result["prefill"] = []
        for n in lengths:
            ids = [(3 + i * 7919) % vocab for i in range(n)]
            runs = []
            for i in range(8):
                m.reset()
                t = timed(lambda: m.call(ids, 0))
                if i >= 2:
                    runs.append(t)
            result["prefill"].append({"tokens": n, "ms": statistics.median(runs)})
        totals = []
        for _ in range(a.rounds):
            m.reset()

            def one_round():
                m.call(prompt, 0)
                for i in range(a.round_decodes):
                    m.call([7], a.context + i)
            totals.append(timed(one_round))
        result["round_ms"] = statistics.median(totals)
    except Exception as e:  # report, do not hide: the table shows the reason
        result["error"] = f"{type(e).__name__}: {e}"
        traceback.print_exc()
    with open(a.json, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result))
    return 0 if "error" not in result else 1


if __name__ == "__main__":
    sys.exit(main())
