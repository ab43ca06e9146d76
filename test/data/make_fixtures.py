"""Exports small Hugging Face causal LMs to ONNX the way a user would
(torch.onnx.export; the dynamo exporter by default) and records a PyTorch
training reference: logits, mean cross-entropy loss, the gradient of every
parameter, and the loss before each of five AdamW steps.

Layout per case (ONNX test-data conventions, TensorProto .pb files):
  CASE/model.onnx, CASE/ref/{input_ids,targets,logits,loss,losses_adamw}.pb,
  CASE/ref/grad/<param name>.pb, CASE/meta.json
CASE is MODEL-EXPORTER-ATTN[-opN][-noopt]; the folders of test/data are cases renamed:
  llama, gpt2, llama_small   <- llama-dynamo-eager, gpt2-dynamo-eager, llama_small-dynamo-eager
  llama_noopt, gpt2_noopt    <- the same with --no-optimize
  llama_sdpa, llama_op23     <- --attn sdpa, and --attn sdpa --opset 23
(meta.json's initializer_map and the ref/*bf16* files were added later by megac, see
test/data/README.md). Needs torch and transformers (not part of tools/setup.sh; CI does not run
this). From the repo root, into a scratch directory, then copy the cases wanted:
Usage: test/data/make_fixtures.py OUTDIR [--models llama,gpt2] [--attn eager|sdpa] [--opset N]
                                  [--exporters dynamo,legacy] [--no-optimize]
To export your own Hugging Face model for megac, use tools/export_hf.py (or, without weights,
tools/export_shapes_only.py) instead.
"""
import collections, json, os, sys, time, traceback
import torch, onnx
from onnx import numpy_helper
import transformers as tf

import argparse
ap = argparse.ArgumentParser(description=__doc__)
ap.add_argument("out"); ap.add_argument("--models", default="")
ap.add_argument("--attn", default="eager", choices=["eager", "sdpa"])
ap.add_argument("--opset", type=int, default=None, help="ONNX opset for the dynamo exporter (default: its own)")
ap.add_argument("--exporters", default="dynamo", help="comma list of dynamo,legacy")
ap.add_argument("--no-optimize", action="store_true", help="export with optimize=False: keeps every parameter as a named initializer")
args = ap.parse_args()
OUT = args.out
B, T = 2, 16
summary = {"torch": torch.__version__, "transformers": tf.__version__, "onnx": onnx.__version__, "cases": {}}

def configs():
    yield "llama", tf.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                  rms_norm_eps=1e-5, tie_word_embeddings=False)
    yield "gpt2", tf.GPT2Config(vocab_size=256, n_embd=64, n_layer=2, n_head=4, n_positions=128,
                                resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    yield "qwen2", tf.Qwen2Config(vocab_size=256, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                  tie_word_embeddings=True)
    yield "mistral", tf.MistralConfig(vocab_size=256, hidden_size=64, intermediate_size=144, num_hidden_layers=3,
                                      num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=128,
                                      sliding_window=None)
    yield "gemma", tf.GemmaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=1, head_dim=16, max_position_embeddings=128)
    yield "phi3", tf.Phi3Config(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128,
                                pad_token_id=0, tie_word_embeddings=False)
    yield "llama_small", tf.LlamaConfig(vocab_size=1024, hidden_size=192, intermediate_size=512, num_hidden_layers=3,
                                        num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=1024,
                                        tie_word_embeddings=False)

class Logits(torch.nn.Module):
    def __init__(self, m):
        super().__init__(); self.m = m
    def forward(self, input_ids):
        return self.m(input_ids=input_ids, use_cache=False).logits

def save(t, path, name):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(t.detach().cpu().numpy(), name).SerializeToString())

def reference(model, ids, tgt, d):
    model.zero_grad(set_to_none=True)
    logits = model(input_ids=ids, use_cache=False).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1))
    loss.backward()
    save(ids, f"{d}/ref/input_ids.pb", "input_ids"); save(tgt, f"{d}/ref/targets.pb", "targets")
    save(logits, f"{d}/ref/logits.pb", "logits"); save(loss, f"{d}/ref/loss.pb", "loss")
    for n, p in model.named_parameters():
        if p.numel() > 200_000:
            continue  # keep large cases small: loss and trajectory suffice there
        save(p.grad, f"{d}/ref/grad/{n}.pb", n)
    # five AdamW steps on the same batch, from a copy of the weights
    state = {k: v.clone() for k, v in model.state_dict().items()}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    losses = []
    for _ in range(5):
        opt.zero_grad(set_to_none=True)
        lg = model(input_ids=ids, use_cache=False).logits
        l = torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]), tgt.reshape(-1))
        losses.append(l.item()); l.backward(); opt.step()
    save(torch.tensor(losses), f"{d}/ref/losses_adamw.pb", "losses_adamw")
    model.load_state_dict(state)
    return loss.item(), losses

def scrub(path):
    """Drop the exporter's per-node Python stack traces: they leak local file paths."""
    m = onnx.load(path, load_external_data=False)
    for n in m.graph.node:
        keep = [e for e in n.metadata_props if e.key != "pkg.torch.onnx.stack_trace"]
        del n.metadata_props[:]
        n.metadata_props.extend(keep)
    onnx.save(m, path)

def ops(path):
    m = onnx.load(path, load_external_data=False)
    c = collections.Counter(f"{n.domain + '.' if n.domain else ''}{n.op_type}" for n in m.graph.node)
    inits = [(i.name, list(i.dims)) for i in m.graph.initializer]
    return dict(sorted(c.items())), [o.version for o in m.opset_import if o.domain in ("", "ai.onnx")], len(m.graph.initializer), inits

for name, cfg in configs():
    if args.models and name not in args.models.split(","):
        continue
    torch.manual_seed(0)
    try:
        cfg._attn_implementation = args.attn
    except Exception:
        pass
    model = tf.AutoModelForCausalLM.from_config(cfg).float().eval()
    # Fresh norm scales are all ones and biases all zeros: an exporter may fold them away,
    # and trained models never look like that. Perturb them the way training would.
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1 and bool((p == 1).all()):
                p.add_(0.1 * torch.randn_like(p))
            elif p.dim() == 1 and bool((p == 0).all()):
                p.add_(0.1 * torch.randn_like(p))
    nparams = sum(p.numel() for p in model.parameters())
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, cfg.vocab_size, (B, T), generator=g)
    tgt = torch.randint(0, cfg.vocab_size, (B, T), generator=g)
    for variant in args.exporters.split(","):
        case = f"{name}-{variant}-{args.attn}" + (f"-op{args.opset}" if args.opset else "") + ("-noopt" if args.no_optimize else ""); d = f"{OUT}/{case}"; os.makedirs(d, exist_ok=True)
        info = {"model": name, "exporter": variant, "attn": args.attn, "opset_asked": args.opset, "optimize": not args.no_optimize, "params": nparams, "B": B, "T": T, "config": cfg.to_dict()}
        t0 = time.time()
        try:
            wrap = Logits(model).eval()
            ext = name == "llama_small"
            if variant == "legacy":
                torch.onnx.export(wrap, (ids,), f"{d}/model.onnx", dynamo=False, opset_version=17,
                                  input_names=["input_ids"], output_names=["logits"],
                                  dynamic_axes={"input_ids": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}})
            else:
                bd, sd = torch.export.Dim("batch", max=64), torch.export.Dim("seq", max=1024)
                try:
                    prog = torch.onnx.export(wrap, (ids,), dynamo=True, input_names=["input_ids"], output_names=["logits"],
                                             dynamic_shapes=({0: bd, 1: sd},), opset_version=args.opset,
                                             optimize=not args.no_optimize)
                    info["dynamic"] = True
                except Exception as e:
                    info["dynamic_error"] = repr(e)[:300]
                    prog = torch.onnx.export(wrap, (ids,), dynamo=True, input_names=["input_ids"], output_names=["logits"],
                                             opset_version=args.opset, optimize=not args.no_optimize)
                    info["dynamic"] = False
                prog.save(f"{d}/model.onnx", external_data=ext)
            if ext and variant == "legacy":
                m = onnx.load(f"{d}/model.onnx")
                onnx.save_model(m, f"{d}/model.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
                                location="model.onnx.data", size_threshold=1024)
            scrub(f"{d}/model.onnx")
            info["ops"], info["opset"], info["n_initializers"], info["first_initializers"] = ops(f"{d}/model.onnx")
            info["export_s"] = round(time.time() - t0, 1)
            info["loss"], info["losses_adamw"] = reference(model, ids, tgt, d)
            info["param_names"] = [n for n, _ in model.named_parameters()]
        except Exception:
            info["error"] = traceback.format_exc()[-1500:]
        json.dump(info, open(f"{d}/meta.json", "w"), indent=1, default=str)
        summary["cases"][case] = {k: info.get(k) for k in ("params", "opset", "n_initializers", "export_s", "loss", "error", "dynamic", "dynamic_error")}
        print(case, json.dumps({k: v for k, v in summary["cases"][case].items() if k != "error"}, default=str), flush=True)
        if info.get("error"):
            print("ERROR", case, info["error"][-900:], flush=True)
json.dump(summary, open(f"{OUT}/summary-{args.attn}-{args.opset}.json", "w"), indent=1, default=str)
