#!/usr/bin/env python3
"""Hostile and careless input to the gearbox CLI, one table of cases.

Each case makes its inputs in a directory of its own, runs gearbox commands and checks that
each one ends with a clear error (exit 1 or 2 and a message naming the path or the field),
no abort or crash, no hang (a timeout per command), every file that existed before the
command byte-identical after it, and no temporary file left behind. A few cases check a
success that the same rules guard (an output keeps its mode, a capped context builds).

  hostile_input.py --list                      the case names, by kind
  hostile_input.py --gearbox G --engine-edit E --mini M --checkpoint D --work W CASE...
"""
import argparse
import hashlib
import json
import os
import re
import shutil
import stat
import struct
import subprocess
import sys

TIMEOUT_S = 120  # per command; sanitizer builds are slow
CRASH_PATTERNS = ("internal check failed", "terminate called", "Aborted", "AddressSanitizer", "runtime error:",
                  "Segmentation fault", "std::bad_alloc")


class Ctx:
    def __init__(self, args, name):
        self.gearbox = args.gearbox
        self.engine_edit = args.engine_edit
        self.mini = args.mini
        self.checkpoint = args.checkpoint
        self.dir = os.path.join(args.work, name)
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    def copy_mini(self, name="mini.gbx"):
        shutil.copyfile(self.mini, self.path(name))
        return self.path(name)

    def copy_checkpoint(self, name="ckpt"):
        dest = self.path(name)
        shutil.copytree(self.checkpoint, dest)
        return dest

    def edit(self, *argv):
        subprocess.run([self.engine_edit, *argv], check=True, timeout=TIMEOUT_S)


# ---- inputs --------------------------------------------------------------------------------------

def safetensors_bytes(tensors):
    """tensors: list of (name, dtype, shape, raw bytes)."""
    header, offset, data = {}, 0, b""
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        data += raw
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    return blob, json.loads(blob[8:8 + n]), 8 + n


def poke_tensor(path, tensor, value):
    """Writes `value` (a float) into element 0 of `tensor` in a safetensors file."""
    blob, header, data_start = read_safetensors(path)
    entry = header[tensor]
    at = data_start + entry["data_offsets"][0]
    if entry["dtype"] == "F32":
        raw = struct.pack("<f", value)
    elif entry["dtype"] == "BF16":
        raw = struct.pack("<f", value)[2:]
    else:
        raw = struct.pack("<e", value)
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(raw)


def edit_config(ckpt, **fields):
    path = os.path.join(ckpt, "config.json")
    with open(path) as f:
        config = json.load(f)
    config.update(fields)
    with open(path, "w") as f:
        json.dump(config, f)


def nested(depth):
    return "[" * depth + "]" * depth


def sparse(path, size):
    with open(path, "wb") as f:
        f.truncate(size)


def network_files(ctx, embed_value=0.25):
    """A network description and its weights: embedding [8, 4], a norm, a tied head."""
    table = struct.pack("<32f", *[embed_value] + [i * 0.25 for i in range(1, 32)])
    weights = ctx.path("weights.safetensors")
    with open(weights, "wb") as f:
        f.write(safetensors_bytes([("embed", "F32", [8, 4], table), ("norm", "F32", [4], struct.pack("<4f", 1, 1, 1, 1))]))
    doc = {
        "format": "gearbox-network", "version": 1, "max_context": 16,
        "inputs": [{"name": "tokens", "dtype": "i64", "dims": [1, -1], "dim_names": ["batch", "seq"]}],
        "outputs": ["logits"],
        "nodes": [
            {"op": "embedding", "name": "embed", "inputs": ["tokens"], "outputs": ["h"], "weights": ["embed"]},
            {"op": "rms_norm", "name": "norm", "inputs": ["h"], "outputs": ["n"], "weights": ["norm"],
             "attrs": {"eps": 1e-6}},
            {"op": "linear", "name": "head", "inputs": ["n"], "outputs": ["logits"], "weights": ["embed"]},
        ],
        "metadata": {"model.vocab": "8"},
    }
    network = ctx.path("network.json")
    with open(network, "w") as f:
        json.dump(doc, f)
    return network, weights


# ---- the table -----------------------------------------------------------------------------------
# Each case returns a list of steps: (argv, allowed exit codes, regex the output must match).
# Files a step may create are listed by the case in CREATES (relative to its directory).

CASES = {}
CREATES = {}


def case(kind, creates=()):
    def register(fn):
        CASES[fn.__name__] = (kind, fn)
        CREATES[fn.__name__] = set(creates)
        return fn
    return register


def fail(code=(1,)):
    return set(code)


# Non-regular files where an input file is expected: FIFO, directory, device, symlink loop.
ENGINE_COMMANDS = {
    "run": ["run", "{f}", "--seq", "1", "--device", "cpu"],
    "inspect": ["inspect", "{f}"],
    "generate": ["generate", "{f}", "--prompt-ids", "2,3", "--device", "cpu"],
    "score": ["score", "{f}", "--prompt-ids", "2,3", "--device", "cpu"],
    "bench": ["bench", "{f}", "--device", "cpu"],
}
NODES = {
    "fifo": (lambda p: os.mkfifo(p), r"is a FIFO \(named pipe\)"),
    "directory": (lambda p: os.mkdir(p), r"is a directory"),
    "dev_zero": (lambda p: os.symlink("/dev/zero", p), r"is a character device"),
    "symlink_loop": (lambda p: os.symlink(os.path.basename(p), p), r"[Tt]oo many levels of symbolic links"),
}


def engine_node_case(command, node):
    def fn(ctx):
        make, message = NODES[node]
        f = ctx.path("engine.gbx")
        make(f)
        argv = [a.replace("{f}", f) for a in ENGINE_COMMANDS[command]]
        return [(argv, fail(), re.escape(f) + ".*" + message if node != "symlink_loop" else message)]
    fn.__name__ = f"engine_{node}_{command}"
    case("non-regular input")(fn)


for _command in ENGINE_COMMANDS:
    for _node in NODES:
        engine_node_case(_command, _node)

CHECKPOINT_FILES = ["config.json", "model.safetensors", "tokenizer.model", "tokenizer.json", "generation_config.json"]


def checkpoint_node_case(file, node):
    def fn(ctx):
        ckpt = ctx.copy_checkpoint()
        target = os.path.join(ckpt, file)
        if os.path.exists(target):
            os.remove(target)
        make, message = NODES[node]
        make(target)
        argv = ["build", "--hf", ckpt, "-o", ctx.path("out.gbx"), "--max-seq", "64", "--device", "cpu"]
        return [(argv, fail(), (re.escape(target) + ".*" if node != "symlink_loop" else "") + message)]
    fn.__name__ = f"checkpoint_{file.replace('.', '_')}_{node}"
    case("non-regular input")(fn)


for _file in CHECKPOINT_FILES:
    for _node in NODES:
        checkpoint_node_case(_file, _node)


def network_node_case(which, node):
    def fn(ctx):
        network, weights = network_files(ctx)
        target = network if which == "network" else weights
        os.remove(target)
        make, message = NODES[node]
        make(target)
        argv = ["build", "--network", network, "--weights", weights, "-o", ctx.path("out.gbx"), "--device", "cpu"]
        if which == "weights" and node == "directory":
            message = "holds neither model.safetensors nor"  # --weights may name a checkpoint directory
        return [(argv, fail(), (re.escape(target) + ".*" if node != "symlink_loop" else "") + message)]
    fn.__name__ = f"{which}_{node}"
    case("non-regular input")(fn)


for _which in ("network", "weights"):
    for _node in NODES:
        network_node_case(_which, _node)


@case("non-regular input")
def checkpoint_dir_symlink_loop(ctx):
    d = ctx.path("loop")
    os.symlink("loop", d)
    return [(["build", "--hf", d, "-o", ctx.path("out.gbx"), "--device", "cpu"], fail(), "loop.*symbolic links")]


# Files larger than their kind's bound (sparse: no disk used).
def too_large_case(file, size, bound_text):
    def fn(ctx):
        ckpt = ctx.copy_checkpoint()
        target = os.path.join(ckpt, file)
        sparse(target, size)
        argv = ["build", "--hf", ckpt, "-o", ctx.path("out.gbx"), "--max-seq", "64", "--device", "cpu"]
        return [(argv, fail(), re.escape(target) + f" is {size} bytes; a .* file is at most {bound_text}")]
    fn.__name__ = f"too_large_{file.replace('.', '_')}"
    case("size bound")(fn)


too_large_case("tokenizer.model", 20 << 20, "16 MiB")
too_large_case("tokenizer.json", 65 << 20, "64 MiB")
too_large_case("config.json", 17 << 20, "16 MiB")
too_large_case("generation_config.json", 17 << 20, "16 MiB")


@case("size bound")
def too_large_network(ctx):
    network, weights = network_files(ctx)
    sparse(network, 65 << 20)
    argv = ["build", "--network", network, "--weights", weights, "-o", ctx.path("out.gbx"), "--device", "cpu"]
    return [(argv, fail(), re.escape(network) + " is .* at most 64 MiB")]


# Deeply nested JSON.
def deep_json_case(file, text_fn, expect_rc=(1,), regex="nests deeper than 64"):
    def fn(ctx):
        ckpt = ctx.copy_checkpoint()
        with open(os.path.join(ckpt, file), "w") as f:
            f.write(text_fn())
        argv = ["build", "--hf", ckpt, "-o", ctx.path("out.gbx"), "--max-seq", "64", "--device", "cpu"]
        return [(argv, fail(expect_rc), regex)]
    fn.__name__ = f"deep_{file.replace('.', '_')}"
    case("deep JSON", creates=("out.gbx",) if 0 in expect_rc else ())(fn)


deep_json_case("config.json", lambda: nested(100000))
deep_json_case("generation_config.json", lambda: '{"bos_token_id": ' + nested(100000) + "}")
# A tokenizer.json gearbox cannot read is not stored, with a warning naming it (the build goes on).
deep_json_case("tokenizer.json", lambda: nested(100000), expect_rc=(0,),
               regex=r"warning: .*tokenizer.json is not stored in the engine: .*nests deeper than 64")


@case("deep JSON")
def deep_tokenizer_json_normalizers(ctx):
    ckpt = ctx.copy_checkpoint()
    os.remove(os.path.join(ckpt, "tokenizer.model"))
    normalizer = {"type": "Lowercase"}
    for _ in range(20000):
        normalizer = {"type": "Sequence", "normalizers": [normalizer]}
    doc = {"version": "1.0", "normalizer": normalizer,
           "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}
    with open(os.path.join(ckpt, "tokenizer.json"), "w") as f:
        # json.dumps recurses; write the nesting by hand.
        f.write('{"version": "1.0", "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "normalizer": ')
        f.write('{"type": "Sequence", "normalizers": [' * 20000 + '{"type": "Lowercase"}' + "]}" * 20000 + "}")
    del doc
    argv = ["build", "--hf", ckpt, "-o", ctx.path("out.gbx"), "--max-seq", "64", "--device", "cpu"]
    return [(argv, {0}, r"warning: .*tokenizer.json is not stored in the engine: .*nests deeper than 64")]


CREATES["deep_tokenizer_json_normalizers"] = {"out.gbx"}


@case("deep JSON")
def deep_safetensors_header(ctx):
    ckpt = ctx.copy_checkpoint()
    text = nested(100000).encode()
    with open(os.path.join(ckpt, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
    argv = ["build", "--hf", ckpt, "-o", ctx.path("out.gbx"), "--device", "cpu"]
    return [(argv, fail(), r"model.safetensors: header: JSON nests deeper than 64")]


@case("deep JSON")
def deep_network(ctx):
    network, weights = network_files(ctx)
    with open(network, "w") as f:
        f.write('{"nodes": ' + nested(100000) + "}")
    argv = ["build", "--network", network, "--weights", weights, "-o", ctx.path("out.gbx"), "--device", "cpu"]
    return [(argv, fail(), re.escape(network) + r".*nests deeper than 64")]


@case("deep JSON")
def deep_engine_tokenizer(ctx):
    engine = ctx.copy_mini()
    deep = ctx.path("deep.json")
    with open(deep, "w") as f:
        f.write(nested(100000))
    ctx.edit("metadata", engine, ctx.path("deep.gbx"), "tokenizer.hf_json", deep)
    return [(["generate", ctx.path("deep.gbx"), "--prompt", "hi", "--device", "cpu"], fail(),
             "tokenizer.json: JSON nests deeper than 64")]


CREATES["deep_engine_tokenizer"] = {"deep.gbx"}


# Outputs.
def build_mini(out):
    return ["build", "--mini", "-o", out, "--max-seq", "32", "--device", "cpu"]


@case("output")
def output_fifo(ctx):
    os.mkfifo(ctx.path("out.gbx"))
    return [(build_mini(ctx.path("out.gbx")), fail((2,)), r"out.gbx' is a FIFO \(named pipe\), not a file gearbox may")]


@case("output")
def output_directory(ctx):
    os.mkdir(ctx.path("out.gbx"))
    return [(build_mini(ctx.path("out.gbx")), fail((2,)), r"out.gbx' is a directory")]


@case("output")
def output_symlink(ctx):
    with open(ctx.path("target.gbx"), "w") as f:
        f.write("keep me")
    os.symlink("target.gbx", ctx.path("link.gbx"))
    return [(build_mini(ctx.path("link.gbx")), fail((2,)), r"link.gbx' is a symbolic link")]


@case("output")
def output_symlink_to_device(ctx):
    os.symlink("/dev/null", ctx.path("null.gbx"))
    return [(build_mini(ctx.path("null.gbx")), fail((2,)), r"null.gbx' is a symbolic link")]


@case("output")
def output_in_proc(ctx):
    return [(build_mini("/proc/gearbox_hostile.gbx"), fail((2,)), r"cannot create a file in '/proc'")]


@case("output")
def output_missing_directory(ctx):
    out = ctx.path("missing", "dir", "x.gbx")
    return [(build_mini(out), fail((2,)), r"the directory '.*missing/dir' does not exist")]


@case("output")
def output_parent_is_a_file(ctx):
    with open(ctx.path("file"), "w") as f:
        f.write("x")
    return [(build_mini(ctx.path("file", "x.gbx")), fail((2,)), r"file' is not a directory|Not a directory")]


@case("output")
def output_is_checkpoint_weights(ctx):
    ckpt = ctx.copy_checkpoint()
    out = os.path.join(ckpt, "model.safetensors")
    return [(["build", "--hf", ckpt, "-o", out, "--max-seq", "64", "--device", "cpu"], fail((2,)),
             re.escape(out) + "' is (the input|a file this command reads)")]


@case("output")
def output_is_checkpoint_config(ctx):
    ckpt = ctx.copy_checkpoint()
    out = os.path.join(ckpt, "config.json")
    return [(["build", "--hf", ckpt, "-o", out, "--max-seq", "64", "--device", "cpu"], fail((2,)),
             re.escape(out) + "' is (the input|a file this command reads)")]


@case("output")
def output_is_checkpoint_tokenizer(ctx):
    ckpt = ctx.copy_checkpoint()
    out = os.path.join(ckpt, "tokenizer.model")
    return [(["build", "--hf", ckpt, "-o", out, "--max-seq", "64", "--device", "cpu"], fail((2,)),
             re.escape(out) + "' is (the input|a file this command reads)")]


@case("output")
def output_is_network(ctx):
    network, weights = network_files(ctx)
    return [(["build", "--network", network, "--weights", weights, "-o", network, "--device", "cpu"], fail((2,)),
             re.escape(network) + "' is the input")]


@case("output")
def output_is_network_weights(ctx):
    network, weights = network_files(ctx)
    return [(["build", "--network", network, "--weights", weights, "-o", weights, "--device", "cpu"], fail((2,)),
             re.escape(weights) + "' is the input")]


def bench_output_case(flag):
    def fn(ctx):
        engine = ctx.copy_mini()
        return [(["bench", engine, flag, engine, "--device", "cpu"], fail((2,)), re.escape(engine) + "' is the input")]
    fn.__name__ = f"bench_{flag.strip('-')}_is_engine"
    case("output")(fn)


bench_output_case("--json")
bench_output_case("--svg")


@case("output")
def bench_json_missing_directory(ctx):
    engine = ctx.copy_mini()
    out = ctx.path("missing", "x.json")
    # Refused before the benchmark: nothing of it is printed.
    return [(["bench", engine, "--json", out, "--device", "cpu"], fail((2,)),
             r"^gearbox bench: cannot write the benchmark JSON .*missing' does not exist\n$")]


@case("output")
def bench_json_and_svg_same(ctx):
    engine = ctx.copy_mini()
    out = ctx.path("x.out")
    return [(["bench", engine, "--json", out, "--svg", out, "--device", "cpu"], fail((2,)), "name the same file")]


@case("output", creates=("out.gbx",))
def output_keeps_mode(ctx):
    out = ctx.path("out.gbx")
    with open(out, "w") as f:
        f.write("old")
    os.chmod(out, 0o640)
    CHECK_AFTER[ctx.dir] = lambda: stat.S_IMODE(os.stat(out).st_mode) == 0o640 or "the mode changed"
    return [(build_mini(out), {0}, r"wrote .*out.gbx")]


CHECK_AFTER = {}
# output_keeps_mode replaces out.gbx (that is the point): its content may change.
REPLACED = {"output_keeps_mode": {"out.gbx"}}


# Sizes from config.json against the checkpoint.
def config_size_case(name, regex, code=(1,), **fields):
    def fn(ctx):
        ckpt = ctx.copy_checkpoint()
        edit_config(ckpt, **fields)
        argv = ["build", "--hf", ckpt, "-o", ctx.path("out.gbx"), "--max-seq", "64", "--device", "cpu"]
        return [(argv, fail(code), regex)]
    fn.__name__ = f"config_{name}"
    case("config size")(fn)


config_size_case("hidden_size_huge", r"hidden_size|head_dim", hidden_size=2147483647)
config_size_case("vocab_size_huge", r"vocab_size, hidden_size give tensor 'model.embed_tokens.weight'",
                 vocab_size=10000000)
config_size_case("intermediate_size_huge", r"intermediate_size, hidden_size give tensor .*mlp.gate_proj",
                 intermediate_size=2147483647)
config_size_case("intermediate_size_outside_int32", r"config.json: intermediate_size is 1099511627776, outside",
                 intermediate_size=1 << 40)
config_size_case("layers_more_than_tensors", r"no tensor 'model.layers.3.", num_hidden_layers=1000)
config_size_case("heads_huge", r"num_attention_heads|head_dim", num_attention_heads=1 << 31, num_key_value_heads=1)
config_size_case("max_position_below_max_seq", r"--max-seq 64 exceeds max_position_embeddings 1 of .*config.json",
                 code=(2,), max_position_embeddings=1)


@case("config size", creates=("out.gbx",))
def config_max_position_caps_default(ctx):
    ckpt = ctx.copy_checkpoint()
    edit_config(ckpt, max_position_embeddings=16)
    out = ctx.path("out.gbx")
    return [(["build", "--hf", ckpt, "-o", out, "--device", "cpu"], {0}, r"the context is 16, max_position_embeddings"),
            (["inspect", out], {0}, r"max context 16")]


# Integer flags.
def flag_case(name, argv_fn, code, regex):
    def fn(ctx):
        engine = ctx.copy_mini()
        return [(argv_fn(engine), fail(code), regex)]
    fn.__name__ = f"flag_{name}"
    case("flag range")(fn)


flag_case("seq_zero", lambda e: ["run", e, "--seq", "0", "--device", "cpu"], (2,), r"--seq: '0' is outside \[1,")
flag_case("seq_negative", lambda e: ["run", e, "--seq", "-5", "--device", "cpu"], (2,), r"--seq: '-5' is outside")
flag_case("seq_int64_max", lambda e: ["run", e, "--seq", "9223372036854775807", "--device", "cpu"], (2,),
          r"--seq 9223372036854775807 exceeds the engine's context")
flag_case("seq_overflow", lambda e: ["run", e, "--seq", "9223372036854775808", "--device", "cpu"], (2,),
          r"is not a whole number")
flag_case("seq_float", lambda e: ["run", e, "--seq", "1e11", "--device", "cpu"], (2,), r"'1e11' is not a whole number")
flag_case("profile_empty", lambda e: ["run", e, "--seq", "1", "--profile", "", "--device", "cpu"], (2,),
          r"--profile: the name is empty")
flag_case("repeat_zero", lambda e: ["run", e, "--seq", "1", "--repeat", "0", "--device", "cpu"], (2,),
          r"--repeat: '0' is outside")
flag_case("max_new_tokens_int64_max",
          lambda e: ["generate", e, "--prompt-ids", "2", "--max-new-tokens", "9223372036854775807", "--device", "cpu"],
          (1, 2), r"exceed the engine's context")
flag_case("max_new_tokens_zero", lambda e: ["generate", e, "--prompt-ids", "2", "--max-new-tokens", "0"], (2,),
          r"--max-new-tokens: '0' is outside")
flag_case("bench_context_int64_max",
          lambda e: ["bench", e, "--context", "9223372036854775807", "--device", "cpu"], (2,),
          r"exceed the engine's context")
flag_case("bench_steps_int64_max",
          lambda e: ["bench", e, "--steps", "9223372036854775807", "--device", "cpu"], (2,),
          r"exceed the engine's context")
flag_case("build_max_seq_zero", lambda e: ["build", "--mini", "-o", e + ".x", "--max-seq", "0"], (2,),
          r"--max-seq")
flag_case("build_max_seq_huge", lambda e: ["build", "--mini", "-o", e + ".x", "--max-seq", "9223372036854775807",
                                           "--device", "cpu"], (1, 2), r"kv_cache': 9223372036854775807 x .* is 1 TiB or more")


# Engines edited with their checksums recomputed: inspect may show them, run must refuse them.
@case("edited engine", creates=("edited.gbx",))
def engine_weight_dtype_i32(ctx):
    engine = ctx.copy_mini()
    edited = ctx.path("edited.gbx")
    ctx.edit("weight-dtype", engine, edited, "model.embed_tokens.weight", "i32")
    return [(["inspect", edited], fail(), r"'model.embed_tokens.weight' has dtype i32; weights an op computes with are f32, bf16 or f16"),
            (["run", edited, "--seq", "1", "--device", "cpu"], fail(), r"has dtype i32")]


@case("edited engine", creates=("edited.gbx",))
def engine_weight_dtype_i64(ctx):
    engine = ctx.copy_mini()
    edited = ctx.path("edited.gbx")
    ctx.edit("weight-dtype", engine, edited, "model.norm.weight", "i64")
    return [(["run", edited, "--seq", "1", "--device", "cpu"], fail(), r"has dtype i64|weight")]


@case("edited engine", creates=("edited.gbx",))
def engine_prefill_tactic_small_m(ctx):
    engine = ctx.copy_mini()
    edited = ctx.path("edited.gbx")
    ctx.edit("tactic", engine, edited, "prefill", "layers.0.down_proj", "small_m")
    return [(["run", edited, "--seq", "200", "--profile", "prefill", "--device", "cpu"], fail(),
             r"node layers.0.down_proj: tactic .*small_m.*cannot run the node for every shape")]


@case("edited engine", creates=("bare.gbx", "bare.gbx.cpu.tactics"))
def tactic_cache_small_m(ctx):
    engine = ctx.copy_mini()
    bare = ctx.path("bare.gbx")
    ctx.edit("no-tactics", engine, bare)
    ctx.edit("cache", bare, bare + ".cpu.tactics", "prefill", "layers.0.down_proj", "small_m")
    return [(["run", bare, "--seq", "200", "--profile", "prefill", "--device", "cpu"], fail(),
             r"tactic cache .*bare.gbx.cpu.tactics is damaged: delete it")]


# Non-finite weights and what they produce.
def nan_case(name, value, regex, dtype=None):
    def fn(ctx):
        ckpt = ctx.copy_checkpoint()
        poke_tensor(os.path.join(ckpt, "model.safetensors"), "model.layers.1.mlp.up_proj.weight", value)
        argv = ["build", "--hf", ckpt, "-o", ctx.path("out.gbx"), "--max-seq", "64", "--device", "cpu"]
        if dtype:
            argv += ["--dtype", dtype]
        return [(argv, fail(), regex)]
    fn.__name__ = f"weights_{name}"
    case("non-finite")(fn)


nan_case("nan", float("nan"), r"tensor 'model.layers.1.mlp.up_proj.weight' holds a non-finite value .*--allow-non-finite")
nan_case("inf", float("inf"), r"tensor 'model.layers.1.mlp.up_proj.weight' holds a non-finite value")
nan_case("f16_overflow", 1e10, r"up_proj.weight' holds a non-finite value .* once rounded to f16", dtype="f16")


@case("non-finite")
def network_weights_nan(ctx):
    network, weights = network_files(ctx, embed_value=float("nan"))
    argv = ["build", "--network", network, "--weights", weights, "-o", ctx.path("out.gbx"), "--device", "cpu"]
    return [(argv, fail(), r"weight 'embed' holds a non-finite value")]


@case("non-finite", creates=("nan.gbx",))
def nan_logits_generate_score_run(ctx):
    ckpt = ctx.copy_checkpoint()
    poke_tensor(os.path.join(ckpt, "model.safetensors"), "model.layers.1.mlp.up_proj.weight", float("nan"))
    engine = ctx.path("nan.gbx")
    return [(["build", "--hf", ckpt, "-o", engine, "--max-seq", "64", "--device", "cpu", "--allow-non-finite"], {0},
             r"wrote"),
            (["generate", engine, "--prompt-ids", "2,3", "--device", "cpu"], fail(), r"non-finite logit"),
            (["generate", engine, "--prompt-ids", "2,3", "--temperature", "0.7", "--device", "cpu"], fail(),
             r"non-finite logit"),
            (["score", engine, "--prompt-ids", "2,3,4", "--device", "cpu"], fail(), r"non-finite logit"),
            (["run", engine, "--seq", "3", "--auto", "--device", "cpu"], fail(), r"non-finite logit .* at position 2"),
            (["run", engine, "--device", "cpu"], fail(), r"non-finite logit.*\n(.*\n)*FAILED")]


# ---- the checks ----------------------------------------------------------------------------------

def snapshot(root):
    """Every entry under root: (kind, sha256 of a regular file's bytes, mode)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            digest = None
            if stat.S_ISREG(st.st_mode):
                with open(p, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
            out[os.path.relpath(p, root)] = (stat.S_IFMT(st.st_mode), digest, stat.S_IMODE(st.st_mode))
    return out


def run_case(args, name):
    kind, fn = CASES[name]
    ctx = Ctx(args, name)
    steps = fn(ctx)
    problems = []
    tries = 0
    for argv, codes, regex in steps:
        before = snapshot(ctx.dir)
        command = [args.gearbox, *argv]
        tries += 1
        try:
            done = subprocess.run(command, capture_output=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            problems.append(f"{argv}: no answer in {TIMEOUT_S} s (a hang)")
            continue
        out = done.stdout.decode(errors="replace") + done.stderr.decode(errors="replace")
        shown = f"$ gearbox {' '.join(argv)}\n(exit {done.returncode})\n{out}"
        print(shown)
        if done.returncode not in codes:
            problems.append(f"exit {done.returncode}, expected one of {sorted(codes)}")
        if any(p in out for p in CRASH_PATTERNS):
            problems.append("the output shows a crash or an internal error")
        if not re.search(regex, out, re.MULTILINE):
            problems.append(f"the output does not match {regex!r}")
        after = snapshot(ctx.dir)
        for path, entry in before.items():
            if path in REPLACED.get(name, set()):
                continue
            if after.get(path) != entry:
                problems.append(f"{path} changed (before {entry}, after {after.get(path)})")
        for path in after:
            if path in before:
                continue
            if ".tmp." in path:
                problems.append(f"a temporary file is left: {path}")
            elif path not in CREATES.get(name, set()):
                problems.append(f"a new file appeared: {path}")
        if os.path.exists("/proc/gearbox_hostile.gbx"):
            problems.append("/proc/gearbox_hostile.gbx exists")
    check = CHECK_AFTER.get(ctx.dir)
    if check is not None and check() is not True:
        problems.append(str(check()))
    return kind, tries, problems


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--gearbox")
    parser.add_argument("--engine-edit")
    parser.add_argument("--mini")
    parser.add_argument("--checkpoint")
    parser.add_argument("--work")
    parser.add_argument("cases", nargs="*")
    args = parser.parse_args()
    if args.list:
        print(";".join(CASES))
        return 0
    failed = 0
    counts = {}
    for name in args.cases or list(CASES):
        kind, tries, problems = run_case(args, name)
        counts[kind] = counts.get(kind, 0) + tries
        if problems:
            failed += 1
            print(f"FAILED {name}:\n  " + "\n  ".join(problems))
        else:
            print(f"ok {name}")
    print("commands run, by kind: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
