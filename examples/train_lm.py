"""Train a small language model on the Python standard library's own source,
with the fused linear + cross-entropy loss, on logsoftmax's autograd.

The corpus needs no download: the ``.py`` files of the running Python's
standard library. A byte-pair-encoding tokenizer is trained on it (merges
counted over unique words, so a few thousand merges take seconds), giving a
vocabulary large enough that the output layer dominates: with V = 8192
classes and a batch of 1024 tokens, the logits alone are 32 MiB and the
unfused loss keeps three arrays of that size alive.

The model predicts the next token from the previous ``--context`` tokens:
token embeddings (a small custom autograd op defined below: a gather
forward, a scatter-add backward) -> concatenation -> Linear -> ReLU ->
``logsoftmax.nn.functional.linear_cross_entropy`` against the output
embedding (the ``(batch, V)`` logits are never built). Adam updates the
parameters. At the end it prints the peak memory of one training step with
the fused loss against the same step with ``linear`` + ``cross_entropy``,
saves a loss plot, and samples a few lines.

    python examples/train_lm.py --quick       # < 2 minutes on 2 cores
    python examples/train_lm.py --steps 2000 --vocab 16384

A progress bar is shown on a terminal only; logs get one line per 10%.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import sysconfig
import time
from collections import Counter
from pathlib import Path

import numpy as np

import logsoftmax as ls
from logsoftmax.autograd import Function
from logsoftmax.nn import functional as F
from logsoftmax.schema import AmpPolicy, OpSchema, register

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PLOT = ROOT / "docs" / "img" / "train_lm.png"
_WORD = re.compile(r"\n|[ \t]+|\w+|[^\w\s]+")


# ---------------------------------------------------------------------------
# corpus and tokenizer
# ---------------------------------------------------------------------------
def load_corpus(max_bytes: int) -> str:
    """Concatenated stdlib sources (ASCII only), in a fixed order, up to
    ``max_bytes``."""
    lib = Path(sysconfig.get_paths()["stdlib"])
    parts, size = [], 0
    for path in sorted(lib.glob("*.py")):
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        text = text.encode("ascii", "replace").decode("ascii")
        parts.append(text)
        size += len(text)
        if size >= max_bytes:
            break
    return "".join(parts)[:max_bytes]


class BPE:
    """Byte-pair encoding over pre-split words (whitespace runs, identifiers,
    punctuation runs): tokens never cross a word boundary."""

    def __init__(self, text: str, vocab: int):
        words = Counter(_WORD.findall(text))
        alphabet = sorted({ch for w in words for ch in w})
        self.tokens = list(alphabet)
        seqs = {w: list(w) for w in words}
        pairs: Counter = Counter()
        where: dict = {}
        for w, s in seqs.items():
            for a, b in zip(s, s[1:]):
                pairs[a, b] += words[w]
                where.setdefault((a, b), set()).add(w)
        self.ranks = {}
        while len(self.tokens) < vocab and pairs:
            best = max(pairs, key=pairs.get)
            if pairs[best] < 2:
                break
            merged = best[0] + best[1]
            self.ranks[best] = len(self.ranks)
            self.tokens.append(merged)
            for w in list(where.pop(best, ())):
                s, c = seqs[w], words[w]
                for a, b in zip(s, s[1:]):  # remove the word's old pairs
                    pairs[a, b] -= c
                    if pairs[a, b] <= 0:
                        del pairs[a, b]
                seqs[w] = s = _merge(s, best, merged)
                for a, b in zip(s, s[1:]):
                    pairs[a, b] += c
                    where.setdefault((a, b), set()).add(w)
        self.index = {t: i for i, t in enumerate(self.tokens)}
        self._cache = {w: [self.index[p] for p in s] for w, s in seqs.items()}

    def encode(self, text: str) -> np.ndarray:
        out = []
        for w in _WORD.findall(text):
            ids = self._cache.get(w)
            if ids is None:
                ids = self._cache[w] = self._encode_word(w)
            out.extend(ids)
        return np.asarray(out, np.int64)

    def _encode_word(self, w: str) -> list[int]:
        s = [ch if ch in self.index else "?" for ch in w]
        while len(s) > 1:
            ranked = [(self.ranks.get((a, b), 1 << 30), i)
                      for i, (a, b) in enumerate(zip(s, s[1:]))]
            r, i = min(ranked)
            if r == 1 << 30:
                break
            s = s[:i] + [s[i] + s[i + 1]] + s[i + 2:]
        return [self.index[p] for p in s]

    def decode(self, ids) -> str:
        return "".join(self.tokens[i] for i in ids)


def _merge(s, pair, merged):
    out, i = [], 0
    while i < len(s):
        if i + 1 < len(s) and s[i] == pair[0] and s[i + 1] == pair[1]:
            out.append(merged)
            i += 2
        else:
            out.append(s[i])
            i += 1
    return out


# ---------------------------------------------------------------------------
# the model
# ---------------------------------------------------------------------------
@register(OpSchema("example_embedding", 1, AmpPolicy.KEEP_INPUT, True, 1, 1))
class Embedding(Function):
    """``table[ids]``: a gather forward, a scatter-add backward (a user-defined
    op: ``prepare`` / ``compute`` / ``backward``, as the library's own)."""

    def prepare(self, table, *, ids):
        self.ids, self.shape = ids, table.shape

    def compute(self, table):
        return table[self.ids]

    def backward(self, grad):
        g = np.zeros(self.shape, grad.dtype)
        np.add.at(g, self.ids.reshape(-1), grad.numpy().reshape(-1, self.shape[1]))
        return (ls.tensor(g),)


class Model:
    def __init__(self, vocab, context, dim, hidden, seed=0):
        rng = np.random.default_rng(seed)
        f32 = np.float32
        self.context = context
        self.emb = ls.tensor((rng.standard_normal((vocab, dim)) * 0.1).astype(f32),
                             requires_grad=True)
        fan = context * dim
        self.w1 = ls.tensor((rng.standard_normal((hidden, fan)) / np.sqrt(fan)).astype(f32),
                            requires_grad=True)
        self.b1 = ls.tensor(np.zeros(hidden, f32), requires_grad=True)
        self.out = ls.tensor((rng.standard_normal((vocab, hidden)) / np.sqrt(hidden))
                             .astype(f32), requires_grad=True)
        self.bias = ls.tensor(np.zeros(vocab, f32), requires_grad=True)

    def parameters(self):
        return [self.emb, self.w1, self.b1, self.out, self.bias]

    def hidden(self, ctx):
        e = Embedding.forward(self.emb, ids=ctx)  # (B, k, D)
        e = e.reshape((ctx.shape[0], -1))
        return F.relu(F.linear(e, self.w1, self.b1))

    def loss(self, ctx, target, fused=True):
        h = self.hidden(ctx)
        if fused:
            return F.linear_cross_entropy(h, self.out, target, linear_bias=self.bias)
        return F.cross_entropy(F.linear(h, self.out, self.bias), target)


class Adam:
    def __init__(self, params, lr=3e-3, betas=(0.9, 0.99), eps=1e-8):
        self.params, self.lr, self.betas, self.eps = params, lr, betas, eps
        self.m = [np.zeros_like(p.data) for p in params]
        self.v = [np.zeros_like(p.data) for p in params]
        self.t = 0

    def step(self):
        self.t += 1
        b1, b2 = self.betas
        for p, m, v in zip(self.params, self.m, self.v):
            g = p.grad.numpy()
            m *= b1
            m += (1 - b1) * g
            v *= b2
            v += (1 - b2) * g * g
            mh = m / (1 - b1**self.t)
            vh = v / (1 - b2**self.t)
            p.data -= (self.lr * mh / (np.sqrt(vh) + self.eps)).astype(p.data.dtype)
            p.grad = None


def batches(ids, context, batch, rng):
    while True:
        pos = rng.integers(context, len(ids), batch)
        ctx = np.stack([ids[pos - context + j] for j in range(context)], axis=1)
        yield ctx, ids[pos]


# ---------------------------------------------------------------------------
# reporting
# ---------------------------------------------------------------------------
class Progress:
    """A bar on a terminal (tqdm if installed); one line per 10% otherwise."""

    def __init__(self, total):
        self.total, self.tty = total, sys.stderr.isatty()
        self.bar = None
        if self.tty:
            try:
                from tqdm import tqdm

                self.bar = tqdm(total=total, unit="step", file=sys.stderr)
            except ImportError:
                pass

    def update(self, step, loss):
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(loss=f"{loss:.3f}")
        elif self.tty:
            print(f"\rstep {step + 1}/{self.total} loss {loss:.3f}", end="",
                  file=sys.stderr, flush=True)
        elif (step + 1) % max(1, self.total // 10) == 0:
            print(f"step {step + 1}/{self.total} loss {loss:.3f}", flush=True)

    def close(self):
        if self.bar is not None:
            self.bar.close()
        elif self.tty:
            print(file=sys.stderr)


def _rss() -> int:
    """Resident bytes of this process (Linux ``/proc``; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def step_peak_mib(v, a, fused: bool) -> float:
    """Peak extra resident memory of one forward + backward of a fresh model
    of the same shape, in a fresh process (so nothing freed earlier hides
    in the allocator): warmed on a batch of 8 (kernels load), then the
    resident size is sampled every 0.2 ms by a thread (kernels and BLAS
    release the GIL) around one step with the training batch. Resident size,
    not tracemalloc: the library's large results come from its own memory
    maps, which tracemalloc does not see."""
    import subprocess

    out = subprocess.run(
        [sys.executable, __file__, "--memory-child", "fused" if fused else "unfused",
         "--vocab", str(v), "--batch", str(a.batch), "--context", str(a.context),
         "--dim", str(a.dim), "--hidden", str(a.hidden)],
        capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def _memory_child(mode: str, a) -> None:
    import threading

    rng = np.random.default_rng(0)
    model = Model(a.vocab, a.context, a.dim, a.hidden)

    def step(batch):
        ctx = rng.integers(0, a.vocab, (batch, a.context))
        model.loss(ctx, rng.integers(0, a.vocab, batch), mode == "fused").backward()
        for p in model.parameters():
            p.grad = None

    step(8)
    before = _rss()
    peak, done = [before], threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], _rss())
            done.wait(0.0002)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    step(a.batch)
    done.set()
    th.join()
    print(max(0, peak[0] - before) / 2**20)


def sample(model, bpe, prompt, n_tokens, rng, temperature=0.8) -> str:
    ids = list(bpe.encode(prompt))
    k = model.context
    pad = bpe.index.get(" ", 0)
    with ls.no_grad():
        for _ in range(n_tokens):
            ctx = np.asarray([([pad] * k + ids)[-k:]])
            h = model.hidden(ctx).numpy()
            logits = h @ model.out.numpy().T + model.bias.numpy()
            p = ls.softmax(logits[0].astype(np.float64) / temperature)
            ids.append(int(rng.choice(len(p), p=p / p.sum())))
            if bpe.tokens[ids[-1]] == "\n" and len(ids) > len(prompt) + 8:
                break
    return bpe.decode(ids)


def plot(losses, path: Path, title: str) -> None:
    try:
        import matplotlib
    except ImportError:
        print("(matplotlib not installed: no plot)")
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    steps = np.arange(1, len(losses) + 1)
    ax.plot(steps, losses, lw=0.6, alpha=0.5, label="batch loss")
    w = max(1, len(losses) // 25)
    smooth = np.convolve(losses, np.ones(w) / w, mode="valid")
    ax.plot(steps[w - 1:], smooth, lw=1.5, label=f"mean of {w}")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_title(title, fontsize=9)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"loss plot: {path}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="1 MB corpus, 4096 tokens, 150 steps (< 2 minutes)")
    ap.add_argument("--corpus-mb", type=float, default=4.0)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--context", type=int, default=6)
    ap.add_argument("--dim", type=int, default=48)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--plot", default=str(DEFAULT_PLOT), help="'' for no plot")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--memory-child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.memory_child:
        _memory_child(a.memory_child, a)
        return 0
    if a.quick:
        a.corpus_mb, a.vocab, a.steps, a.batch = 1.0, 4096, 150, 512
    rng = np.random.default_rng(a.seed)
    t0 = time.perf_counter()
    text = load_corpus(int(a.corpus_mb * 1e6))
    bpe = BPE(text, a.vocab)
    ids = bpe.encode(text)
    v = len(bpe.tokens)
    print(f"corpus: {len(text) / 1e6:.1f} MB of stdlib source -> {len(ids)} BPE "
          f"tokens, vocabulary {v} ({time.perf_counter() - t0:.1f} s)")
    split = int(len(ids) * 0.95)
    train, val = ids[:split], ids[split:]
    model = Model(v, a.context, a.dim, a.hidden, a.seed)
    opt = Adam(model.parameters(), lr=a.lr)
    data = batches(train, a.context, a.batch, rng)
    losses, bar = [], Progress(a.steps)
    t1 = time.perf_counter()
    for step in range(a.steps):
        ctx, target = next(data)
        loss = model.loss(ctx, target)
        loss.backward()
        opt.step()
        losses.append(float(loss.numpy()))
        bar.update(step, losses[-1])
    bar.close()
    train_s = time.perf_counter() - t1
    with ls.no_grad():
        vctx, vt = next(batches(val, a.context, 4 * a.batch, np.random.default_rng(1)))
        val_loss = float(model.loss(vctx, vt).numpy())
    print(f"trained {a.steps} steps in {train_s:.1f} s: loss {np.mean(losses[:10]):.3f} "
          f"-> {np.mean(losses[-10:]):.3f} (train), {val_loss:.3f} (held-out), "
          f"uniform would be {np.log(v):.3f}")
    fused = step_peak_mib(v, a, True)
    unfused = step_peak_mib(v, a, False)
    print(f"peak memory of one step (batch {a.batch}, V={v}): fused "
          f"linear_cross_entropy {fused:.1f} MiB, linear + cross_entropy "
          f"{unfused:.1f} MiB ({unfused / max(fused, 1e-9):.1f}x)")
    if a.plot:
        plot(losses, Path(a.plot),
             f"train_lm: stdlib BPE V={v}, context {a.context}, batch {a.batch}")
    print("samples:")
    for prompt in ("def ", "import ", "class ", "    return "):
        print("  " + sample(model, bpe, prompt, 24, rng).rstrip().replace("\n", "\n  "))
    print(f"total {time.perf_counter() - t0:.1f} s")
    return 0 if np.mean(losses[-10:]) < np.log(v) - 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
