#!/usr/bin/python3
"""Hugging Face GPT-2 interop, proven against transformers (label interop; lib/interop/hf_gpt2.hpp).

usage: check_hf_gpt2.py MODE TRAIN_GPT CKPT_TOOL TRAIN_RESNET MPIEXEC REPO WORKDIR
  export  the tiny GPT trained 3 steps (model.bias = true, then false) -> ckpt_tool export --format hf ->
          GPT2LMHeadModel.from_pretrained: its logits on the tokens of the reference dump equal the logits of
          hpctrain's own forward at that checkpoint (train_gpt resumed with --dump: /logits/values) within
          1e-5 x max |logit|; --dtype bf16 loads too; round trip: model.init_from of the export gives back the
          checkpoint's tensors bit for bit (the dump's /init against index.h5)
  import  a tiny GPT-2 made and saved by transformers (vocab 50257, so the padding to 50304 is exercised; random
          biases and LayerNorms), imported with model.init_from: the step-1 loss of metrics.jsonl equals the loss
          transformers computes on that batch (relative 1e-5), at np 1, at TP 2 x PP 2 (np 4) and under ZeRO-3
          (np 2); also from a sharded checkpoint (model.safetensors.index.json) and from hub-style names (no
          "transformer." prefix, lm_head.weight and the attention buffers present)
  errors  every bad input: one line on stderr with the exact message, exit code 2
Prints VALID: <mode> ..., or FAILED: <what> (is X, should be Y).

Why 1e-5 (logits, x max |logit|; the step-1 loss, relative) holds on every CPU: both sides evaluate one forward at the
same weights, no training dynamics between them, so the difference is fp32 rounding alone, bounded whatever order a
CPU's kernels sum in. With u = 2^-24, a length-K dot product errs by at most K u sum|terms| in any order, and by about
sqrt(K) u in the probabilistic analysis (Higham and Mary 2019) that rounding errors of random sign obey; here K <= 4 C
= 256 (the tiny exported model) or 128 (the imported one), so ~1e-6 per GEMM, through ~6 GEMMs a block and 2 or 4
blocks whose LayerNorms rescale the errors instead of accumulating them: a few 1e-6 of the largest logit, which
measured 1e-7..2.4e-7 x max |logit| here and elsewhere. 1e-5 keeps a factor >= 3 over the typical bound and ~40
over what was measured, while a misread tensor (a transposed Conv1D weight, a dropped bias) moves logits by O(1).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import interop_venv  # noqa: E402

interop_venv.reexec_in_venv()

import json  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

import h5py  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

MODE, GPT, CKPT_TOOL, RESNET, MPIEXEC, REPO, WORK = sys.argv[1:8]
DECK = os.path.join(REPO, "inputs", "gpt_tiny.toml")
ENV = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")
torch.set_num_threads(2)
failures = []
T0 = time.time()


def check(ok, what):
    if not ok:
        failures.append(what)
        print(f"FAILED: {what}")
    return ok


def run(cmd, np_=1, expect=0):
    if np_ > 1:
        cmd = [MPIEXEC, "-np", str(np_), "--oversubscribe", "--bind-to", "none", *cmd]
    p = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=300)
    if p.returncode != expect:
        print(p.stdout[-3000:], p.stderr[-3000:])
        raise SystemExit(f"FAILED: {' '.join(cmd)} exited {p.returncode}, should be {expect}")
    return p


def train(out, *sets, np_=1, dump=None):
    cmd = [GPT, DECK, "--out", out, "--set", "sample.tokens=0", "--set", "log.every=100"]
    for s in sets:
        cmd += ["--set", s]
    if dump:
        cmd += ["--dump", dump]
    return run(cmd, np_)


def metrics(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def hf_logits(model, tokens):
    with torch.no_grad():
        return model(torch.from_numpy(tokens.astype(np.int64))).logits.double().numpy()


def hf_loss(model, inputs, targets):
    """Mean cross-entropy over every token of the batch, fp64 (the reference; see import_mode for why)."""
    m = model.double()
    with torch.no_grad():
        logits = m(torch.from_numpy(inputs.astype(np.int64))).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 torch.from_numpy(targets.astype(np.int64)).reshape(-1))
    model.float()
    return float(loss)


# ---- export: hpctrain -> transformers ------------------------------------------------------------------------------
def export_mode():
    worst = 0.0
    for bias in ("true", "false"):
        run_dir = os.path.join(WORK, f"run_bias_{bias}")
        train(run_dir, "train.steps=3", f"model.bias={bias}", "checkpoint.at_end=true", "checkpoint.resume=none")
        hf_dir = os.path.join(WORK, f"hf_bias_{bias}")
        p = run([CKPT_TOOL, "export", "--format", "hf", run_dir, hf_dir])
        print(p.stdout.strip())
        if bias == "true":  # the same checkpoint in bf16 (before the resume below moves `latest`)
            run([CKPT_TOOL, "export", "--format", "hf", "--dtype", "bf16", run_dir, os.path.join(WORK, "hf_bf16")])
        model = transformers.GPT2LMHeadModel.from_pretrained(hf_dir).eval()
        step_dir = open(os.path.join(run_dir, "checkpoints", "latest")).read().strip()
        with h5py.File(os.path.join(run_dir, "checkpoints", step_dir, "index.h5"), "r") as ck:
            ck_model = {n: ck["model"][n][()] for n in ck["model"].keys()}  # before the resume below adds a step
        cfg = json.load(open(os.path.join(hf_dir, "config.json")))
        check(cfg["vocab_size"] == 256 and cfg["n_positions"] == 64 and cfg["n_layer"] == 4,
              f"config.json of bias={bias}: {cfg}")
        # hpctrain's logits at the checkpoint's weights: resume it for one more step with the reference dump
        dump = os.path.join(WORK, f"dump_bias_{bias}.h5")
        train(run_dir, "train.steps=4", f"model.bias={bias}", "checkpoint.resume=latest", dump=dump)
        with h5py.File(dump, "r") as f:
            tokens, ours = f["logits/inputs"][()], f["logits/values"][()].astype(np.float64)
        theirs = hf_logits(model, tokens)
        V = cfg["vocab_size"]
        diff = np.abs(ours[..., :V] - theirs).max()
        scale = np.abs(theirs).max()
        worst = max(worst, diff / scale)
        print(f"bias={bias}: logits of {tokens.shape} tokens: max |hpctrain - transformers| = {diff:.3e}, "
              f"max |logit| = {scale:.3f}, ratio {diff / scale:.3e} (limit 1e-5)")
        check(diff <= 1e-5 * scale, f"bias={bias}: max |logit difference| (is {diff:.3e}, should be <= "
                                    f"{1e-5 * scale:.3e})")
        check(ours.shape[-1] == V or np.abs(ours[..., V:]).max() == 0.0, "padded logits are not zero")
        if bias == "false":
            check(all(float(p_.abs().max()) == 0.0 for n, p_ in model.named_parameters() if n.endswith(".bias")),
                  "bias=false: the exported biases are not all zero")
        # round trip: export -> model.init_from gives back the checkpoint's tensors bit for bit
        rt = os.path.join(WORK, f"roundtrip_bias_{bias}")
        rt_dump = os.path.join(WORK, f"roundtrip_bias_{bias}.h5")
        train(rt, "train.steps=1", f"model.bias={bias}", f"model.init_from={hf_dir}", "checkpoint.resume=none",
              dump=rt_dump)
        with h5py.File(rt_dump, "r") as d:
            names = list(d["init"].keys())
            bad = [n for n in names if not np.array_equal(ck_model[n], d["init"][n][()])]
        check(not bad and sorted(names) == sorted(ck_model),
              f"round trip bias={bias}: tensors differ after export + model.init_from: {bad}")
        print(f"round trip bias={bias}: {len(names)} tensors bitwise equal ({step_dir} -> hf -> model.init_from)")
    # bf16 export: loads, torch_dtype bfloat16, logits close to the f32 export's
    hf_bf16 = os.path.join(WORK, "hf_bf16")
    m16 = transformers.GPT2LMHeadModel.from_pretrained(hf_bf16, torch_dtype=torch.float32).eval()
    m32 = transformers.GPT2LMHeadModel.from_pretrained(os.path.join(WORK, "hf_bias_true")).eval()
    tok = np.arange(64, dtype=np.int64).reshape(1, 64)
    rel = np.abs(hf_logits(m16, tok) - hf_logits(m32, tok)).max() / np.abs(hf_logits(m32, tok)).max()
    check(json.load(open(os.path.join(hf_bf16, "config.json")))["torch_dtype"] == "bfloat16", "bf16 torch_dtype")
    # bf16 keeps 8 significant bits (relative rounding <= 2^-9 per weight): the logits move by ~1e-3 (measured 1.6e-3)
    check(rel < 1e-2, f"bf16 export's logits vs f32 (is {rel:.3e}, should be < 1e-2)")
    with open(os.path.join(hf_bf16, "model.safetensors"), "rb") as f:
        header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
    check(all(v["dtype"] == "BF16" for k, v in header.items() if k != "__metadata__"), "bf16 export: not all BF16")
    # each tensor is the f32 export rounded to nearest even, as torch rounds
    from safetensors.torch import load_file
    a = load_file(os.path.join(WORK, "hf_bias_true", "model.safetensors"))
    b = load_file(os.path.join(hf_bf16, "model.safetensors"))
    check(all(torch.equal(a[k].bfloat16(), b[k]) for k in a), "bf16 export: not the f32 tensors rounded to nearest")
    print(f"bf16 export: logits within {rel:.2e} (relative to max |logit|) of the f32 export's")
    if not failures:
        print(f"VALID: export (worst logit difference {worst:.3e} x max |logit|, limit 1e-5; {time.time() - T0:.1f} s)")


# ---- import: transformers -> hpctrain ------------------------------------------------------------------------------
IMPORT_SETS = ["model.n_layer=2", "model.vocab_size=50257", "model.seq_len=32", "train.global_batch=8",
               "train.micro_batch=2", "train.steps=1", "train.eval_every=0", "checkpoint.resume=none",
               "checkpoint.at_end=false", "data.eval_sequences=64"]


def tiny_gpt2(seed=0):
    cfg = transformers.GPT2Config(vocab_size=50257, n_positions=64, n_embd=64, n_layer=2, n_head=4,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                  initializer_range=0.2)  # logits far from uniform: the loss tells mappings apart
    torch.manual_seed(seed)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():  # every parameter non-trivial, so that a wrong mapping shows (biases are zero at init)
        for n, p in model.named_parameters():
            if n.endswith(".bias"):
                p.normal_(0.0, 0.02)
            elif ".ln_" in n:
                p.normal_(1.0, 0.1)
    return model


def import_mode():
    model = tiny_gpt2()
    hf_dir = os.path.join(WORK, "hf_tiny")
    shutil.rmtree(hf_dir, ignore_errors=True)
    model.save_pretrained(hf_dir)  # safetensors by default: transformer.* names, lm_head dropped (tied)
    check(os.path.exists(os.path.join(hf_dir, "model.safetensors")), "save_pretrained wrote no model.safetensors")
    # the sharded form (model.safetensors.index.json + shards)
    sharded = os.path.join(WORK, "hf_tiny_sharded")
    shutil.rmtree(sharded, ignore_errors=True)
    model.save_pretrained(sharded, max_shard_size="5MB")
    check(os.path.exists(os.path.join(sharded, "model.safetensors.index.json")), "no sharded checkpoint written")
    # hub-style names: no "transformer." prefix, lm_head.weight and the attention buffers present
    hub = os.path.join(WORK, "hf_tiny_hub")
    shutil.rmtree(hub, ignore_errors=True)
    os.makedirs(hub)
    shutil.copy(os.path.join(hf_dir, "config.json"), hub)
    sd = {k: v.contiguous().clone() for k, v in model.transformer.state_dict().items()}
    for l in range(2):
        sd[f"h.{l}.attn.bias"] = torch.tril(torch.ones(1, 1, 64, 64))
        sd[f"h.{l}.attn.masked_bias"] = torch.tensor(-1e4)
    sd["lm_head.weight"] = model.lm_head.weight.detach().clone()
    save_file(sd, os.path.join(hub, "model.safetensors"), metadata={"format": "pt"})

    dump = os.path.join(WORK, "import_np1.h5")
    runs = {}
    for name, np_, extra, d, src in [("np1", 1, ["checkpoint.at_end=true"], dump, hf_dir),
                                     ("np1 sharded", 1, [], None, sharded),
                                     ("np1 hub names", 1, [], None, hub),
                                     ("np4 tp2 pp2", 4, ["parallel.tp=2", "parallel.pp=2"], None, hf_dir),
                                     ("np2 zero3", 2, ["parallel.zero=3"], None, hf_dir)]:
        out = os.path.join(WORK, "import_" + name.replace(" ", "_"))
        p = train(out, *IMPORT_SETS, f"model.init_from={src}", *extra, np_=np_, dump=d)
        check("model.init_from: " in p.stdout, f"{name}: the log does not say what was imported")
        runs[name] = metrics(out)[0]["loss"]
    # on resume the checkpoint wins: model.init_from may differ (exempt from the must-match model keys) and is ignored
    out = os.path.join(WORK, "import_np1")
    p = train(out, *IMPORT_SETS, "train.steps=2", "checkpoint.resume=latest", f"model.init_from={sharded}")
    check(f"model.init_from = {sharded} ignored: the run resumes from its checkpoint at step 1" in p.stdout,
          "resume with model.init_from: no 'ignored' line in the log")
    check(len(metrics(out)) == 2, "resume with model.init_from: metrics.jsonl does not hold steps 1 and 2")
    with h5py.File(dump, "r") as f:
        inputs, targets = f["batches/inputs"][0], f["batches/targets"][0]  # step 1's global batch (8, 32)
        tokens, ours = f["logits/inputs"][()], f["logits/values"][()].astype(np.float64)
    # The reference loss in fp64 (transformers' model cast to double): what remains is hpctrain's fp32 rounding,
    # ~1e-7 relative per op over a 2-layer model; 1e-5 is the layout-equivalence tolerance of invariant 1.
    ref = hf_loss(model, inputs, targets)
    for name, loss in runs.items():
        rel = abs(loss - ref) / abs(ref)
        print(f"{name}: step-1 loss {loss:.9g}, transformers (fp64) {ref:.9g}, relative difference {rel:.2e}")
        check(rel <= 1e-5, f"{name}: step-1 loss (is {loss:.9g}, should be {ref:.9g} within 1e-5 relative)")
    theirs = hf_logits(model, tokens)
    diff, scale = np.abs(ours[..., :50257] - theirs).max(), np.abs(theirs).max()
    print(f"logits at the imported weights: max |difference| {diff:.3e}, max |logit| {scale:.3f}")
    check(diff <= 1e-5 * scale, f"imported logits (is {diff:.3e}, should be <= {1e-5 * scale:.3e})")
    check(np.abs(ours[..., 50257:]).max() == 0.0, "padded logits (rows 50257..50303) are not zero")
    if not failures:
        print(f"VALID: import (step-1 loss within {max(abs(v - ref) / abs(ref) for v in runs.values()):.2e} relative "
              f"of transformers' over {len(runs)} runs; {time.time() - T0:.1f} s)")


# ---- errors: bad inputs, exact messages ----------------------------------------------------------------------------
def expect_error(cmd, message, np_=1):
    p = run(cmd, np_, expect=2)
    lines = p.stderr.strip().splitlines()
    ok = len(lines) == 1 and lines[0].endswith(message)
    print(f"  exit 2: {lines[0] if lines else '(nothing on stderr)'}")
    check(ok, f"message of {' '.join(cmd[-4:])} (is {lines}, should end with {message!r})")
    return ok


def errors_mode():
    model = tiny_gpt2()
    good = os.path.join(WORK, "hf_good")
    shutil.rmtree(good, ignore_errors=True)
    model.save_pretrained(good)
    sd = {k: v.contiguous().clone() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    out = os.path.join(WORK, "bad_out")

    def variant(name, config=None, tensors=None):
        d = os.path.join(WORK, name)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        cfg = json.load(open(os.path.join(good, "config.json")))
        cfg.update(config or {})
        json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
        if tensors is not None:
            save_file(tensors, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
        return d

    def init_from(d, *sets):
        return [GPT, DECK, "--out", out, *[a for s in (*IMPORT_SETS, f"model.init_from={d}", *sets)
                                           for a in ("--set", s)]]

    missing = os.path.join(WORK, "no_such_dir")
    n = 0
    n += expect_error(init_from(missing), f"{missing}: no such directory (a Hugging Face GPT-2 directory holds "
                      "config.json and model.safetensors, as save_pretrained writes them)")
    d = variant("hf_no_weights")
    n += expect_error(init_from(d), f"{d}: no model.safetensors (nor model.safetensors.index.json); write the model "
                      "with save_pretrained(DIR) (safetensors is its default format)")
    d = variant("hf_no_config", tensors=sd)
    os.remove(os.path.join(d, "config.json"))
    n += expect_error(init_from(d), f"{d}: no config.json (a Hugging Face GPT-2 directory holds config.json and "
                      "model.safetensors)")
    n += expect_error(init_from(good, "model.n_embd=128"), f"{good}: config.json has n_embd = 64 but the deck's "
                      "model.n_embd = 128; set model.n_embd = 64")
    n += expect_error(init_from(good, "model.n_layer=3"), f"{good}: config.json has n_layer = 2 but the deck's "
                      "model.n_layer = 3; set model.n_layer = 2")
    n += expect_error(init_from(good, "model.vocab_size=256"), f"{good}: config.json has vocab_size = 50257 but the "
                      "deck's model.vocab_size = 256; set model.vocab_size = 50257")
    n += expect_error(init_from(good, "model.seq_len=128"), f"{good}: config.json has n_positions = 64 but the deck's "
                      "model.seq_len = 128 is longer (the model has no positions beyond 64); set model.seq_len <= 64")
    d = variant("hf_gelu", {"activation_function": "gelu"}, sd)
    n += expect_error(init_from(d), f"{d}: config.json has activation_function = \"gelu\" but hpctrain's GPT computes "
                      "the GELU's tanh approximation (gelu_new, gelu_pytorch_tanh); this model cannot be imported "
                      "exactly")
    d = variant("hf_eps", {"layer_norm_epsilon": 1e-6}, sd)
    n += expect_error(init_from(d), f"{d}: config.json has layer_norm_epsilon = 1e-06 but hpctrain's LayerNorm uses "
                      "1e-05; this model cannot be imported exactly")
    bad = dict(sd)
    bad["transformer.h.1.mlp.c_fc.weight"] = torch.zeros(64, 128)
    d = variant("hf_bad_shape", tensors=bad)
    n += expect_error(init_from(d), f"{d}: tensor transformer.h.1.mlp.c_fc.weight has shape (64, 128) but the deck's "
                      "model needs (64, 256) (hpctrain's h.1.mlp.fc.weight (256, 64), transposed)")
    bad = {k: v for k, v in sd.items() if k != "transformer.h.0.attn.c_proj.weight"}
    d = variant("hf_missing_tensor", tensors=bad)
    n += expect_error(init_from(d), f"{d}: model.safetensors has no tensor h.0.attn.c_proj.weight (nor "
                      "transformer.h.0.attn.c_proj.weight)")
    bad = dict(sd)
    bad["lm_head.weight"] = sd["transformer.wte.weight"] + 1.0
    d = variant("hf_untied", tensors=bad)
    n += expect_error(init_from(d), f"{d}: lm_head.weight differs from wte.weight (max |difference| 1): hpctrain ties "
                      "the output head to the token embedding, and this model's head is untied")
    n += expect_error(init_from(good, "model.bias=false"), f"{good}: tensor transformer.h.0.ln_1.bias is not zero "
                      f"(max |x| = {float(sd['transformer.h.0.ln_1.bias'].abs().max()):.6g}) but the deck's "
                      "model.bias = false (a model without biases imports only zero biases); set model.bias = true")
    # export: a ResNet checkpoint, an OUTDIR that cannot be created, --optimizer
    rn = os.path.join(WORK, "resnet_run")
    run([RESNET, os.path.join(REPO, "inputs", "resnet_tiny.toml"), "--out", rn, "--set", "train.steps=1",
         "--set", "checkpoint.at_end=true", "--set", "checkpoint.resume=none", "--set", "train.eval_every=0"])
    step = os.path.join(rn, "checkpoints", "step_00000001")
    n += expect_error([CKPT_TOOL, "export", "--format", "hf", rn, os.path.join(WORK, "hf_resnet")],
                      f"ckpt_tool export --format hf: checkpoint {step} is not a GPT checkpoint (written by "
                      "train_resnet; it has no model/wte, model/wpe and model/h.0.attn.qkv.weight): the Hugging Face "
                      "format holds train_gpt's GPT-2; export a ResNet with --format torchvision")
    gpt_run = os.path.join(WORK, "gpt_run")
    train(gpt_run, "train.steps=1", "checkpoint.at_end=true", "checkpoint.resume=none", "train.eval_every=0")
    blocker = os.path.join(WORK, "a_file")
    open(blocker, "w").write("not a directory\n")
    outdir = os.path.join(blocker, "hf")
    p = run([CKPT_TOOL, "export", "--format", "hf", gpt_run, outdir], expect=2)
    lines = p.stderr.strip().splitlines()
    want = f"ckpt_tool export --format hf: cannot create the output directory {outdir}: "
    n += check(len(lines) == 1 and want in lines[0], f"unwritable OUTDIR (is {lines}, should hold {want!r})")
    n += expect_error([CKPT_TOOL, "export", "--format", "hf", "--optimizer", gpt_run, os.path.join(WORK, "hf_o")],
                      "ckpt_tool export --format hf exports the model only: drop --optimizer")
    if not failures:
        print(f"VALID: errors ({n} bad inputs, each one line with the exact message, exit code 2; "
              f"{time.time() - T0:.1f} s)")


os.makedirs(WORK, exist_ok=True)
{"export": export_mode, "import": import_mode, "errors": errors_mode}[MODE]()
sys.exit(1 if failures else 0)
