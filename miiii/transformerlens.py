"""A run as a TransformerLens model: `python -m miiii export-tl RUN_DIR OUT_DIR [--step N]` writes

    OUT_DIR/model.safetensors   the weights by TransformerLens's state-dict names, float32
    OUT_DIR/config.json         HookedTransformerConfig's keyword arguments, and a "miiii" section saying how to
                                read the logits: the task, its names, the position the answer is read at, and
                                (readout "last") each task's columns of the unembedding

of the final parameters, or of a kept step's (`--step N`, one of `run.kept_steps`). The lines in `LOADERS` (also in
docs/extending.md and in `export-tl --help`) load it: in TransformerLens 3.x as a HookedTransformer (`strict=False`:
the file holds every parameter, not TransformerLens's attention buffers `mask` and `IGNORE`, which it builds
itself), in 4.x (which removed HookedTransformer) as a `TransformerBridge.boot_native` model whose
`convert_tl_checkpoint` reads these names. `model.run_with_cache(tokens)` then has every hook point
`hooks.HookedModel` names, with the same values (tests/test_transformerlens.py checks them on every input).

What changes on the way: TransformerLens has attention and MLP biases and an unembedding bias everywhere; a
model without them gets zeros. Without a positional embedding W_pos is zeros. The book's tied head becomes
W_U = W_E.T. The paper's per-task unembedding (n_tasks, d, d_out), read at the last position, becomes one
(d, sum of n_classes) matrix: each task's own n_classes columns side by side, without the columns past its
class count that training pads its bucket with; `miiii["slices"]` says where each task's columns are:
`logits[:, -1, slice(*miiii["slices"]["q=2"])]`. Nothing here imports torch: safetensors is written by hand.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

from miiii.config import ConfigError
from miiii.errors import shown
from miiii.files import io_fault, write_atomic, write_text_atomic
from miiii.rundir import flatten_params, inside_run

WEIGHTS, CONFIG = "model.safetensors", "config.json"
LOAD = '''import json
from safetensors.torch import load_file
from transformer_lens import HookedTransformer, HookedTransformerConfig
cfg = json.load(open("OUT_DIR/config.json")); miiii = cfg.pop("miiii")
model = HookedTransformer(HookedTransformerConfig(**cfg)); model.load_state_dict(load_file("OUT_DIR/model.safetensors"), strict=False)'''  # noqa: E501
# TransformerLens 4: boot_native builds its own small model from the config (its head's bias a zero buffer, b_U here);
# convert_tl_checkpoint maps HookedTransformer's names and per-head shapes onto it; the load is strict
LOAD_TL4 = '''import json
from safetensors.torch import load_file
from transformer_lens.conversion_utils import convert_tl_checkpoint
from transformer_lens.model_bridge import TransformerBridge
cfg = json.load(open("OUT_DIR/config.json")); miiii = cfg.pop("miiii")
model = TransformerBridge.boot_native(cfg); model.load_state_dict(convert_tl_checkpoint(load_file("OUT_DIR/model.safetensors"), model.cfg))'''  # noqa: E501
LOADERS = {3: LOAD, 4: LOAD_TL4}  # TransformerLens's major version -> the lines that load an export in it


def load_lines(out_dir: str | Path = "OUT_DIR", tl: int = 3) -> str:
    """The lines that load an export in TransformerLens `tl` (3 or 4), for the export at `out_dir`: each path a
    Python string literal (repr), so a folder named with quotes, backslashes or code reads back as that path and
    runs nothing."""
    text = LOADERS[tl]
    for name in (CONFIG, WEIGHTS):
        text = text.replace(f'"OUT_DIR/{name}"', repr(f"{out_dir}/{name}"))
    return text


# ---------------------------------------------------------------- safetensors, numpy only

# https://github.com/huggingface/safetensors: an 8-byte little-endian header length, a JSON header
# {name: {dtype, shape, data_offsets: [begin, end)} relative to the data}, then the raw little-endian bytes
_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "U8": "|u1", "BOOL": "|b1"}
_NAMES = {np.dtype(v): k for k, v in _DTYPES.items()}


def _write_parts(f, parts) -> None:
    """The one place an export's bytes go to disk (tests patch it to simulate a full disk)."""
    for part in parts:
        f.write(part)


def write_safetensors(path: Path, tensors: dict[str, np.ndarray], metadata: dict[str, str] | None = None) -> None:
    """`tensors` in the safetensors format, in their order; written to a temporary file, synced, then renamed (a
    failed write removes the temporary file and raises the OSError)."""
    header: dict = {"__metadata__": dict(metadata)} if metadata else {}
    blobs, offset = [], 0
    for name, a in tensors.items():
        a = np.asarray(a)
        dtype = a.dtype.newbyteorder("<") if a.dtype.byteorder == ">" else a.dtype
        if dtype not in _NAMES:
            raise TypeError(f"{name}: dtype {a.dtype} has no safetensors name here ({', '.join(_DTYPES)})")
        blob = np.ascontiguousarray(a, dtype).tobytes()
        header[name] = {"dtype": _NAMES[dtype], "shape": list(a.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned (the format allows trailing spaces)
    write_atomic(path, path.with_name(path.name + ".tmp"),
                 lambda f: _write_parts(f, [struct.pack("<Q", len(text)) + text, *blobs]))


def read_safetensors(path: Path) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """(tensors by name, in the file's order; the header's __metadata__) of a safetensors file."""
    data = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    metadata = header.pop("__metadata__", {})
    body = memoryview(data)[8 + n:]
    out = {}
    for name, h in header.items():
        begin, end = h["data_offsets"]
        out[name] = np.frombuffer(body[begin:end], _DTYPES[h["dtype"]]).reshape(h["shape"]).copy()
    return out, metadata


# ---------------------------------------------------------------- the mapping


def unembed_slices(task_names, n_classes) -> dict[str, list[int]]:
    """readout "last": each task's [start, stop) columns of the concatenated unembedding, in slot order."""
    ends = np.cumsum([int(c) for c in n_classes])
    return {str(k): [int(e - c), int(e)] for k, c, e in zip(task_names, n_classes, ends, strict=True)}


def split_logits(logits, slices: dict[str, list[int]]) -> dict:
    """TransformerLens's logits at the read position (..., d_vocab_out) -> {task name: (..., n_classes)}."""
    return {k: logits[..., a:b] for k, (a, b) in slices.items()}


def tl_state_dict(params: dict, model, n_classes) -> dict[str, np.ndarray]:
    """The run's parameters (model.py's tree) by TransformerLens's names, float32; `model` a hooks.HookedModel,
    `n_classes` (n_slots,) the classes of each slot (readout "last"). Every parameter must be used: a parameter
    this mapping does not know is an error, not a silent omission."""
    c = model.cfg
    d, H, e, m = c.d_model, c.n_heads, c.d_head, c.mlp_dim
    flat = flatten_params(params)
    used = set()

    def take(key, default_shape=None):
        if key not in flat and default_shape is not None:  # a weight this model does not have: TL's neutral zeros
            return np.zeros(default_shape, np.float32)
        used.add(key)
        return np.asarray(flat[key], np.float32)

    sd = {"embed.W_E": take("W_E"),
          "pos_embed.W_pos": take("W_pos") if c.pos_embed else np.zeros((model.n_ctx, d), np.float32)}
    for i in range(c.n_layers):
        p, b = f"blocks_{i}", f"blocks.{i}"
        lns = ("ln1", "ln2") if c.layer_norm else ()
        sd |= {f"{b}.{ln}.{w}": take(f"{p}/{ln}/{v}") for ln in lns for w, v in (("w", "scale"), ("b", "bias"))}
        sd |= {f"{b}.attn.W_{n}": take(f"{p}/attn/W_{n}") for n in "QKVO"}
        sd |= {f"{b}.attn.b_{n}": np.zeros((H, e), np.float32) for n in "QKV"}
        sd[f"{b}.attn.b_O"] = np.zeros(d, np.float32)
        sd |= {f"{b}.mlp.W_in": take(f"{p}/mlp/W_in"), f"{b}.mlp.b_in": take(f"{p}/mlp/b_in", (m,)),
               f"{b}.mlp.W_out": take(f"{p}/mlp/W_out"), f"{b}.mlp.b_out": take(f"{p}/mlp/b_out", (d,))}
    if c.layer_norm:
        sd |= {"ln_final.w": take("ln_final/scale"), "ln_final.b": take("ln_final/bias")}
    if c.tie_head:
        W_U = sd["embed.W_E"].T.copy()  # logits = resid @ W_E.T
    elif c.readout == "all":
        W_U = take("W_U")
    else:  # (n_slots, d, d_out) -> each slot's own classes side by side: (d, sum n_classes)
        W_U = np.concatenate([w[:, :int(k)] for w, k in zip(take("W_U"), n_classes, strict=True)], axis=1)
    sd |= {"unembed.W_U": W_U, "unembed.b_U": np.zeros(W_U.shape[1], np.float32)}
    unknown = sorted(set(flat) - used)
    if unknown:
        raise ConfigError(f"export-tl does not know how to map parameter(s) {unknown} to TransformerLens")
    return sd


def tl_config(run, d_vocab_out: int, step: int | None = None) -> dict:
    """HookedTransformerConfig's keyword arguments for `run` (a run.Run) at `step` (None: its final parameters),
    plus the "miiii" section ("steps": the updates the exported parameters had)."""
    m, t, model = run.config.model, run.config.task, run.model
    task = run.task
    meta = {"run": Path(run.path).resolve().name, "steps": run.summary.get("steps") if step is None else step,
            "task": t.name,
            "task_names": list(task.task_names),
            "position": "last" if m.readout == "last" else "all"}
    if t.is_sequence:
        from miiii.tokens import TOKEN_TEXT

        meta |= {"n_digits": t.n_digits, "tokens": TOKEN_TEXT}
    else:
        first, second = ("x0", "x1") if t.digit_positions[0] == 0 else ("x1", "x0")
        meta |= {"p": t.p, "variant": t.variant, "inputs": f"tokens [{first}, {second}, p] for n = x0 + x1 * p"}
    if m.readout == "last":
        meta["slices"] = unembed_slices(task.task_names, task.n_classes)
    return dict(
        model_name=f"miiii-{Path(run.path).resolve().name}", n_layers=m.n_layers, d_model=m.d_model,
        n_ctx=model.n_ctx, d_head=m.d_head, n_heads=m.n_heads, d_mlp=m.mlp_dim, d_vocab=model.d_vocab,
        d_vocab_out=int(d_vocab_out), act_fn="relu", normalization_type="LN" if m.layer_norm else None,
        eps=1e-5, attention_dir="causal" if m.causal else "bidirectional", positional_embedding_type="standard",
        default_prepend_bos=False, miiii=meta,
    )


# ---------------------------------------------------------------- the command


def kept_params(run, step: int) -> dict:
    """The parameters of kept step `step` (exactly that step: an export names the step it holds)."""
    kept = run.kept_steps
    if step not in kept:
        raise ConfigError(f"--step {step}: {run.path} kept no checkpoint at step {step} (kept: "
                          f"{', '.join(map(str, kept)) or 'none'}); keep more with --set ckpt.keep_log=K")
    return run.params_at(step)


def export_tl(run_dir: str | Path, out_dir: str | Path, step: int | None = None) -> dict:
    """Write RUN_DIR's final parameters (or, `step`, those of that kept step: one of `run.kept_steps`, restored and
    verified) as OUT_DIR/model.safetensors and OUT_DIR/config.json; returns the config. Refuses an OUT_DIR that holds
    anything, one inside a run directory (a resume would take it for the run's own files), a RUN_DIR that is not a
    finished run (with `step`: not a run) and a step that was not kept (ConfigError). A failed write (disk full) is a
    RunError and leaves nothing: the files and the folders it made are removed."""
    from miiii.model import refuse_small_decoder
    from miiii.run import load_run

    out = Path(out_dir)
    owner = inside_run(out)
    if owner is not None:
        raise ConfigError(f"{shown(out, 200)} is inside the run directory {shown(owner, 200)}; write the export "
                          "somewhere else")
    if out.is_symlink() and not out.exists():
        raise ConfigError(f"{shown(out, 200)} is a symlink to nothing; choose a new OUT_DIR")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"{shown(out, 200)} already exists and is not empty; choose a new OUT_DIR")
    run = load_run(run_dir)
    refuse_small_decoder(run.config.model, "export-tl")
    if step is None and (not run.summary or not run.params):
        raise ConfigError(f"{run_dir} is not a finished run (no summary.json or params.npz); finish it first "
                          f"(`python -m miiii train --resume {run_dir}`), or export a kept step (--step)")
    sd = tl_state_dict(run.params if step is None else kept_params(run, step), run.model, run.task.n_classes)
    cfg = tl_config(run, sd["unembed.W_U"].shape[1], step)
    made = [p for p in (out, *out.parents) if not (p.exists() or p.is_symlink())]
    try:
        out.mkdir(parents=True, exist_ok=True)
        write_safetensors(out / WEIGHTS, sd, {"format": "pt"})
        write_text_atomic(out / CONFIG, json.dumps(cfg, indent=2) + "\n")
    except BaseException as e:
        for name in (WEIGHTS, CONFIG):
            (out / name).unlink(missing_ok=True)
        for p in made:  # innermost first
            try:
                p.rmdir()
            except OSError:
                break
        if isinstance(e, OSError):
            raise io_fault(Path(e.filename) if e.filename else out, e) from None
        raise
    return cfg
