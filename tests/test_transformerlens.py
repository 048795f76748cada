"""export-tl (miiii/transformerlens.py). Without torch: the hand-written safetensors reads back exactly, the export
holds every weight by TransformerLens's name and shape, miiii's task slices cover each task's classes, config.json has
HookedTransformerConfig's fields, `--step` exports exactly that kept step, and bad input exits 2 with one line. With
TransformerLens 3 (`make test-tl`) or 4 (`make test-tl4`, its own venv): the documented lines for the installed
version load the export, and TransformerLens's logits and every hook point this project names equal
`run.model.run_with_cache`'s on every input."""

from __future__ import annotations

import json
import struct
import textwrap
from importlib.metadata import version

import jax
import numpy as np
import pytest
from _runhelp import ROOT, finished_run

from miiii.cli import main as cli_main
from miiii.transformerlens import LOADERS, export_tl, load_lines, read_safetensors, split_logits, write_safetensors

# Short runs: an export is the run's weights whatever they learnt. The book's runs record nothing and keep no log-spaced
# checkpoints (nothing here reads them), and hold fewer samples (less to evaluate and decode at the end): seconds of
# compiling and saving each; miiii-tiny's is the resume tests' run (_runhelp.RESUME_ARGS) cut to 40 steps, so it loads
# the programs they compiled (the persistent compile cache).
STEPS = "train.steps=10"  # every weight moved off its initial value (the LayerNorms' off 1 and 0)
BOOK = (STEPS, "ckpt.keep_log=0", "record.acts=", "record.params=", "task.n_train=1024", "task.n_valid=128")
RUNS = {  # name: (preset, --set overrides); nanda-tiny's is the finished run other tests read
    "nanda-tiny": ("nanda-tiny",),  # MLP biases, one task of p classes
    # no biases, 8 tasks of 2 ... 19 classes
    "miiii-tiny": ("miiii-tiny", "steps=40", "chunk=20", "ckpt.every=20", "batch_size=64", "ckpt.keep_log=0"),
    "addition-tiny": ("addition-tiny", *BOOK),  # the book: pre-LN, causal, one head, FFN biases, final LN, tied head
    # the book's model without LayerNorm, positions, tied head or biases: W_pos and every bias exported as zeros
    "addition-bare": ("addition-tiny", *BOOK, "model.layer_norm=false", "model.pos_embed=false",
                      "model.tie_head=false", "model.mlp_bias=false"),
}


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    """name -> (the finished run, its export directory), trained and exported once per module."""
    done = {}

    def get(name):
        if name not in done:
            preset, *sets = RUNS[name]
            run = finished_run(preset, *sets)
            out = tmp_path_factory.mktemp(name) / "tl"
            export_tl(run.path, out)
            done[name] = run, out
        return done[name]

    return get


# ---------------------------------------------------------------- without torch


def test_safetensors_written_by_hand_reads_back_exactly(tmp_path):
    rng = np.random.default_rng(0)
    tensors = {"w": rng.normal(size=(3, 4, 5)).astype(np.float32), "steps": np.arange(7, dtype=np.int64),
               "scalar": np.array(2.5, np.float32), "empty": np.zeros((0, 3), np.float32),
               "big_endian": rng.normal(size=4).astype(">f8"), "half": rng.normal(size=(2, 2)).astype(np.float16),
               "mask": np.array([True, False, True])}
    path = tmp_path / "t.safetensors"
    write_safetensors(path, tensors, {"format": "pt"})
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    assert (8 + n) % 8 == 0 and header.pop("__metadata__") == {"format": "pt"}
    spans = [h["data_offsets"] for h in header.values()]
    assert spans[0][0] == 0 and spans[-1][1] == len(raw) - 8 - n
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))  # contiguous, in order
    back, meta = read_safetensors(path)
    assert meta == {"format": "pt"} and list(back) == list(tensors)
    for k, v in tensors.items():
        assert back[k].dtype == v.dtype.newbyteorder("<") and back[k].shape == v.shape, k
        np.testing.assert_array_equal(back[k], v, err_msg=k)


def tl_shapes(cfg: dict) -> dict[str, tuple]:
    """TransformerLens's HookedTransformer parameters (not its buffers) for a config, written out by hand."""
    d, H, e, f = cfg["d_model"], cfg["n_heads"], cfg["d_head"], cfg["d_mlp"]
    want = {"embed.W_E": (cfg["d_vocab"], d), "pos_embed.W_pos": (cfg["n_ctx"], d)}
    for i in range(cfg["n_layers"]):
        b = f"blocks.{i}"
        if cfg["normalization_type"] == "LN":
            want |= {f"{b}.{ln}.{w}": (d,) for ln in ("ln1", "ln2") for w in "wb"}
        want |= {f"{b}.attn.W_{n}": (H, d, e) for n in "QKV"} | {f"{b}.attn.b_{n}": (H, e) for n in "QKV"}
        want |= {f"{b}.attn.W_O": (H, e, d), f"{b}.attn.b_O": (d,), f"{b}.mlp.W_in": (d, f), f"{b}.mlp.b_in": (f,),
                 f"{b}.mlp.W_out": (f, d), f"{b}.mlp.b_out": (d,)}
    if cfg["normalization_type"] == "LN":
        want |= {"ln_final.w": (d,), "ln_final.b": (d,)}
    return want | {"unembed.W_U": (d, cfg["d_vocab_out"]), "unembed.b_U": (cfg["d_vocab_out"],)}


@pytest.mark.parametrize("name", RUNS)
def test_the_export_is_the_run_by_transformerlens_names(export, name):
    run, out = export(name)
    sd, _ = read_safetensors(out / "model.safetensors")
    cfg = json.loads((out / "config.json").read_text())
    m, task, p = run.config.model, run.task, run.params
    meta = cfg["miiii"]
    # config.json: HookedTransformerConfig's keyword arguments, then the miiii section
    assert cfg == {**cfg, "n_layers": m.n_layers, "d_model": m.d_model, "n_ctx": run.model.n_ctx, "d_head": m.d_head,
                   "n_heads": m.n_heads, "d_mlp": m.mlp_dim, "d_vocab": task.d_vocab, "act_fn": "relu",
                   "normalization_type": "LN" if m.layer_norm else None, "positional_embedding_type": "standard",
                   "attention_dir": "causal" if m.causal else "bidirectional", "default_prepend_bos": False}
    assert meta["task"] == run.config.task.name and meta["task_names"] == list(task.task_names)
    assert {k: v.shape for k, v in sd.items()} == tl_shapes(cfg) and all(v.dtype == np.float32 for v in sd.values())
    # every weight exactly; zeros where this model has none
    zeros = [k for k in sd if k.split(".")[-1] in ("b_Q", "b_K", "b_V", "b_O", "b_U")]
    zeros += [] if m.mlp_bias else [k for k in sd if k.endswith(("mlp.b_in", "mlp.b_out"))]
    zeros += [] if m.pos_embed else ["pos_embed.W_pos"]
    assert all(not sd[k].any() for k in zeros)
    same = {"embed.W_E": p["W_E"]} | ({"pos_embed.W_pos": p["W_pos"]} if m.pos_embed else {})
    for i in range(m.n_layers):
        b, w = f"blocks.{i}", p[f"blocks_{i}"]
        same |= {f"{b}.attn.W_{n}": w["attn"][f"W_{n}"] for n in "QKVO"}
        same |= {f"{b}.mlp.{k}": v for k, v in w["mlp"].items()}
        if m.layer_norm:
            same |= {f"{b}.{ln}.{t}": w[ln][k] for ln in ("ln1", "ln2") for t, k in (("w", "scale"), ("b", "bias"))}
    if m.layer_norm:
        same |= {"ln_final.w": p["ln_final"]["scale"], "ln_final.b": p["ln_final"]["bias"]}
    assert set(same) | set(zeros) | {"unembed.W_U"} == set(sd)
    for k, v in same.items():
        np.testing.assert_array_equal(sd[k], v, err_msg=k)
    W_U = sd["unembed.W_U"]
    if m.tie_head:
        np.testing.assert_array_equal(W_U, p["W_E"].T)
    elif m.readout == "all":
        np.testing.assert_array_equal(W_U, p["W_U"])
    if m.readout == "all":
        assert meta["position"] == "all" and "slices" not in meta
        return
    # readout "last": each task's own classes, side by side, in slot order, covering d_vocab_out
    assert meta["position"] == "last" and list(meta["slices"]) == list(task.task_names)
    spans = list(meta["slices"].values())
    assert spans[0][0] == 0 and spans[-1][1] == cfg["d_vocab_out"] == int(task.n_classes.sum())
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))
    for s, (name, cols) in enumerate(split_logits(W_U, meta["slices"]).items()):
        assert cols.shape[1] == task.n_classes[s], name
        np.testing.assert_array_equal(cols, p["W_U"][s, :, :task.n_classes[s]], err_msg=name)


def test_the_command_writes_the_same_export_and_prints_how_to_load_it(export, tmp_path, capsys):
    run, out = export("miiii-tiny")
    assert cli_main(["export-tl", str(run.path), str(tmp_path / "tl")]) == 0
    printed = capsys.readouterr().out
    assert all(load_lines(tmp_path / "tl", tl) in printed for tl in LOADERS)
    for f in ("model.safetensors", "config.json"):
        assert (tmp_path / "tl" / f).read_bytes() == (out / f).read_bytes(), f
    with pytest.raises(SystemExit):
        cli_main(["export-tl", "--help"])
    help_text = capsys.readouterr().out
    assert all(textwrap.indent(lines, "  ") in help_text for lines in LOADERS.values())
    assert "RUN_DIR" in help_text and "OUT_DIR" in help_text and "--step N" in help_text
    readme = (ROOT / "docs" / "extending.md").read_text()  # the README's guide to extending
    assert "### Export to TransformerLens" in readme and all(lines in readme for lines in LOADERS.values())
    assert "make test-tl " in readme and "make test-tl4" in readme


def test_step_exports_exactly_that_kept_step(export, tmp_path, capsys):
    """--step N: the weights of params_at(N) and "steps": N; the last kept step is the final export, byte for byte."""
    run, out = export("nanda-tiny")
    first, last = run.kept_steps[0], run.kept_steps[-1]
    assert last == run.summary["steps"] and first < last
    assert cli_main(["export-tl", str(run.path), str(tmp_path / "first"), "--step", str(first)]) == 0
    assert f"step {first}," in capsys.readouterr().out
    sd, _ = read_safetensors(tmp_path / "first" / "model.safetensors")
    cfg = json.loads((tmp_path / "first" / "config.json").read_text())
    early = run.params_at(first)
    assert cfg["miiii"]["steps"] == first
    np.testing.assert_array_equal(sd["embed.W_E"], early["W_E"])
    np.testing.assert_array_equal(sd["blocks.0.mlp.W_in"], early["blocks_0"]["mlp"]["W_in"])
    assert not np.array_equal(sd["embed.W_E"], run.params["W_E"])  # training moved it: a different model
    export_tl(run.path, tmp_path / "last", step=last)
    for f in ("model.safetensors", "config.json"):
        assert (tmp_path / "last" / f).read_bytes() == (out / f).read_bytes(), f


def test_bad_input_exits_2_with_one_line(export, tmp_path, capsys):
    run, _ = export("nanda-tiny")
    capsys.readouterr()  # the training's start-up lines, when this test is the first to need the run
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("mine")
    (tmp_path / "not-a-run").mkdir()
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    (unfinished / "config.json").write_text((run.path / "config.json").read_text())
    absent = min(set(range(1, run.kept_steps[-1])) - set(run.kept_steps))  # a step inside the run, not kept
    cases = [(run.path, full, "not empty"), (tmp_path / "not-a-run", tmp_path / "o1", "not a run directory"),
             (tmp_path / "missing", tmp_path / "o2", "not a run directory"),
             (unfinished, tmp_path / "o3", "not a finished run"),
             ((run.path, "--step", str(absent)), tmp_path / "o4",
              f"no checkpoint at step {absent} (kept: {', '.join(map(str, run.kept_steps))})")]
    for run_dir, out, why in cases:
        run_dir, *more = run_dir if isinstance(run_dir, tuple) else (run_dir,)
        assert cli_main(["export-tl", str(run_dir), str(out), *more]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error:") and len(err.strip().splitlines()) == 1 and why in err, err
    assert [p.name for p in full.iterdir()] == ["keep.txt"] and (full / "keep.txt").read_text() == "mine"
    assert not any((tmp_path / o).exists() for o in ("o1", "o2", "o3", "o4"))


# ---------------------------------------------------------------- TransformerLens's round trip


@pytest.mark.filterwarnings("ignore:HookedTransformer is deprecated:DeprecationWarning")
@pytest.mark.parametrize("name", RUNS)
def test_transformerlens_computes_what_this_project_computes(export, name):
    """The documented lines for the installed TransformerLens (3: HookedTransformer; 4: TransformerBridge.boot_native)
    load the export; on every input (grid tasks: all p^2; addition: the validation split) TransformerLens's logits
    (at the last position, per task, for the paper's tasks) and every hook point this project names equal
    run_with_cache's to 1e-5 of their scale."""
    pytest.importorskip("transformer_lens")
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file

    major = int(version("transformer-lens").split(".")[0])
    assert major in LOADERS, f"TransformerLens {version('transformer-lens')}: no documented loading lines for it"
    run, out = export(name)
    ns: dict = {}
    exec(load_lines(out, major), ns)  # the lines, as documented
    model, meta = ns["model"], ns["miiii"]
    if next(model.parameters()).device.type != "cpu":
        model = model.to("cpu", print_details=False) if major == 3 else model.to("cpu")
    weights = load_file(out / "model.safetensors")
    mine, _ = read_safetensors(out / "model.safetensors")
    assert list(weights) == list(mine) and all(np.array_equal(weights[k].numpy(), v) for k, v in mine.items())
    if major == 3:
        missed = model.load_state_dict(weights, strict=False)  # only TransformerLens's own buffers are left to it
        assert not missed.unexpected_keys
        assert all(k.endswith((".attn.mask", ".attn.IGNORE")) for k in missed.missing_keys)
    else:  # the strict load took every weight: the bridge holds exactly the converted export
        from transformer_lens.conversion_utils import convert_tl_checkpoint

        held, converted = model.state_dict(), convert_tl_checkpoint(weights, model.cfg)
        assert set(held) == set(converted) and all(torch.equal(held[k], v) for k, v in converted.items())
    assert all(w.dtype == torch.float32 for w in model.parameters())

    x = run.inputs("valid")[:2000] if run.config.task.is_sequence else run.inputs("grid")
    ours, cache = jax.jit(run.model.run_with_cache)(run.params, x)
    ours = np.asarray(ours)
    with torch.set_grad_enabled(False):
        logits, tl_cache = model.run_with_cache(torch.as_tensor(np.asarray(x), dtype=torch.long))
    logits = logits.numpy()

    def close(got, want, what):
        scale = max(float(np.abs(want[np.isfinite(want)]).max()), 1.0)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * scale, err_msg=f"{name}: {what}")

    if meta["position"] == "all":
        close(logits, ours, "logits")
    else:
        assert meta["position"] == "last"
        for s, (task, got) in enumerate(split_logits(logits[:, -1], meta["slices"]).items()):
            close(got, ours[:, s, :run.task.n_classes[s]], f"logits of {task}")
    names = [n for n in run.model.hook_names() if n != "logits"]
    for n in names:
        want = np.asarray(cache[n])
        got = np.broadcast_to(tl_cache[n].numpy(), want.shape)  # hook_pos_embed may come with batch 1
        if major == 4 and n.endswith("attn.hook_attn_scores") and not np.allclose(got, want, rtol=0, atol=1e-3):
            # TransformerLens 4 (4.3.0) fires a boot_native model's hook_attn_scores on the attention module's second
            # output, the pattern after softmax (model_bridge/generalized_components/attention.py); docs/extending.md
            want = np.asarray(cache[n.replace("hook_attn_scores", "hook_pattern")])
        close(got, want, n)
