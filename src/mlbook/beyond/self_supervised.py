"""Self-supervised learning: training targets made from the data itself (chapter 48).

Masked language modelling (eqs. 48.1-48.2) uses BERT's corruption and loss from
:mod:`mlbook.language.language_model` (``mask_tokens``, ``masked_lm_loss``); this module adds the
corruption's closed form and its observed shares, words of the toy grammar, a training loop for
the book's decoder run without its causal mask, and fill-in-the-blank with a pretrained BERT
from the hub. Masked autoencoding of images (eq. 48.3; patches from
:func:`mlbook.architectures.vit.patchify`): random masks, the loss on the masked patches only, a
small MLP masked autoencoder. Siamese learning without negative pairs
(eqs. 48.4-48.5): the stop-gradient loss, the moving-average target, a siamese network with its
variants, and two measures of collapse (eq. 48.6).

Shape legend
    B batch;  T tokens of a window;  V ordinary token ids 0..V-1, [MASK] = id V
    N patches per image;  P values per patch
    mask (B, N) bool, True = masked (hidden from the encoder, scored by the loss)
    h (B, width) backbone features;  z, p (B, D) projections and predictions of a siamese branch
"""

from __future__ import annotations

import base64
import copy
import math
import re
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..architectures.contrastive import DigitEncoder
from ..language import language_model as lm
from ..models.config import DecoderConfig, gpt2_config
from ..models.decoder import Decoder
from ..models.training import get_batch
from ..nn.schedules import warmup_cosine
from ..validation import (
    bool_tensor,
    float_tensor,
    index_tensor,
    integer,
    nonempty,
    number,
    one_of,
    positive,
    positive_int,
    probability,
    same_shape,
    shape_is,
)

__all__ = [
    "CATEGORIES",
    "HUB_MASKED_LM",
    "RESULTS",
    "corruption_probs",
    "corruption_shares",
    "words",
    "mlm_config",
    "train_mlm",
    "mask_positions",
    "predict_tokens",
    "masked_probs",
    "fill_in",
    "load_masked_lm",
    "fill_mask",
    "pack_state",
    "unpack_state",
    "random_masking",
    "mae_loss",
    "mae_loss_naive",
    "MaskedAutoencoder",
    "train_mae",
    "siamese_loss",
    "siamese_loss_naive",
    "ema_update",
    "embedding_std",
    "effective_rank",
    "SiameseNet",
    "VARIANTS",
    "train_siamese",
]

#: What a token of the input is after BERT's corruption (the order of eq. 48.2's terms).
CATEGORIES = ("[MASK]", "random", "unchanged", "not selected")
#: The fill-in model of the hub path (English, lower-cased, 110 M parameters).
HUB_MASKED_LM = "bert-base-uncased"
RESULTS = "self_supervised"  # mlbook/data/self_supervised.json, read by datasets.stored


# --- masked language modelling (eqs. 48.1-48.2) ------------------------------------------------


def corruption_probs(
    p_select: float = 0.15, p_mask: float = 0.8, p_random: float = 0.1, vocab_size: int = 30522
) -> torch.Tensor:
    """Shares of all tokens that become [MASK], another token, stay unchanged, or are not selected.

    Implements eq. 48.2: a selected token becomes [MASK] with p_mask, a uniform draw from the V
    ordinary ids with p_random (the original itself with probability 1/V), else stays. Returns a
    (4,) float64 tensor in the order of :data:`CATEGORIES`; it sums to one.
    """
    ps, pm, pr = (
        probability(v, n)
        for v, n in ((p_select, "p_select"), (p_mask, "p_mask"), (p_random, "p_random"))
    )
    if pm + pr > 1:
        raise ValueError(f"p_mask + p_random = {pm + pr} exceeds 1")
    V = integer(vocab_size, "vocab_size", low=1)
    return torch.tensor(
        [ps * pm, ps * pr * (1 - 1 / V), ps * (1 - pm - pr) + ps * pr / V, 1 - ps],
        dtype=torch.float64,
    )


def corruption_shares(
    tokens: torch.Tensor, inputs: torch.Tensor, labels: torch.Tensor, mask_id: int
) -> torch.Tensor:
    """The observed shares of :data:`CATEGORIES` in one corruption (a Monte Carlo estimate).

    tokens, inputs, labels: (...) the originals, the corrupted inputs and the labels of
    ``lm.mask_tokens`` (-100 where not selected). Returns (4,) float64 shares.
    """
    same_shape(tokens, inputs, ("tokens", "inputs"))
    same_shape(tokens, labels, ("tokens", "labels"))
    nonempty(tokens, "tokens")
    selected = labels != lm.IGNORE_INDEX
    masked = selected & (inputs == mask_id)
    unchanged = selected & (inputs == tokens)
    counts = torch.stack(
        [masked.sum(), (selected & ~masked & ~unchanged).sum(), unchanged.sum(), (~selected).sum()]
    )
    return counts.double() / tokens.numel()


def words(text: str) -> list[str]:
    """The words and punctuation marks of ``text``, in order (whitespace is dropped)."""
    return re.findall(r"\w+|[^\w\s]", text)


def mlm_config(
    vocab_size: int, d_model: int = 32, n_layers: int = 2, n_heads: int = 4, max_seq_len: int = 12
) -> DecoderConfig:
    """The book's decoder in the GPT-2 form with one id more than the vocabulary: [MASK] = V."""
    return gpt2_config(
        positive_int(vocab_size, "vocab_size") + 1, d_model, n_layers, n_heads, max_seq_len
    )


def train_mlm(
    model: Decoder,
    data: torch.Tensor,
    *,
    steps: int,
    generator: torch.Generator,
    batch_size: int = 64,
    peak_lr: float = 3e-3,
    warmup_steps: int = 100,
    causal: bool = False,
    p_mask: float = 0.8,
    p_random: float = 0.1,
) -> list[float]:
    """Train the decoder on the masked-LM loss (eq. 48.1) of corrupted windows (eq. 48.2).

    data: (n,) token ids 0..V-1 with V = vocab_size - 1 of the model (the last id is [MASK]).
    Each step corrupts a fresh batch of max_seq_len-token windows and runs the model without its
    causal mask (``causal=False``: every token sees both sides; ``True``: the control that sees
    only the left). AdamW, linear warmup, cosine decay. Returns the loss of every step.
    """
    V = model.config.vocab_size - 1
    index_tensor(data, "data", V, ndim=1)
    steps = positive_int(steps, "steps")
    opt = torch.optim.AdamW(model.parameters(), lr=peak_lr, weight_decay=0.01)
    losses = []
    model.train()
    for s in range(1, steps + 1):
        for group in opt.param_groups:
            group["lr"] = warmup_cosine(
                s,
                peak_lr=peak_lr,
                warmup_steps=warmup_steps,
                total_steps=steps,
                min_lr=peak_lr / 10,
            )
        x, _ = get_batch(data, batch_size, model.config.max_seq_len, generator)  # (B, T)
        inputs, labels = lm.mask_tokens(x, V, V, generator, p_mask=p_mask, p_random=p_random)
        loss = lm.masked_lm_loss(model(inputs, causal=causal), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    model.eval()
    return losses


def mask_positions(tokens: torch.Tensor, positions: torch.Tensor, mask_id: int) -> torch.Tensor:
    """A copy of tokens (B, T) with [MASK] at positions (B,), one masked token per row."""
    B, T = shape_is(tokens, "tokens", (None, None)).shape
    index_tensor(shape_is(positions, "positions", (B,)), "positions", T)
    out = tokens.clone()
    out[torch.arange(B), positions] = mask_id
    return out


@torch.no_grad()
def predict_tokens(model: Decoder, inputs: torch.Tensor, *, causal: bool = False) -> torch.Tensor:
    """The most probable token (B, T) at every position of inputs (B, T), [MASK] excluded."""
    logits = model(inputs, causal=causal)[..., :-1]  # (B, T, V + 1) -> (B, T, V): no [MASK]
    return logits.argmax(-1)


@torch.no_grad()
def masked_probs(
    model: Decoder, vocab: list[str], sentences: str | list[str], *, causal: bool = False
) -> torch.Tensor:
    """p(x_i | corrupted input) at the one ``[MASK]`` of each sentence (words of vocab).

    sentences: one sentence, or a list of sentences of the same number of words (one batch).
    Returns (V,) for one sentence, (S, V) for a list of S.
    """
    batch = [sentences] if isinstance(sentences, str) else list(sentences)
    nonempty(batch, "sentences")
    index = {w: i for i, w in enumerate(vocab)}
    rows, where = [], []
    for sentence in batch:
        parts = sentence.split("[MASK]")
        if len(parts) != 2:
            raise ValueError(f"each sentence must hold exactly one [MASK]: {sentence!r}")
        left, right = words(parts[0]), words(parts[1])
        unknown = [w for w in left + right if w not in index]
        if unknown:
            raise ValueError(f"words not in the vocabulary: {unknown}")
        rows.append([index[w] for w in left] + [len(vocab)] + [index[w] for w in right])
        where.append(len(left))
    if len({len(r) for r in rows}) != 1:
        raise ValueError("the sentences of one batch must have the same number of words")
    logits = model(torch.tensor(rows), causal=causal)  # (S, T, V + 1)
    probs = torch.softmax(logits[torch.arange(len(rows)), where, :-1], -1)  # (S, V): no [MASK]
    return probs[0] if isinstance(sentences, str) else probs


def fill_in(
    model: Decoder, vocab: list[str], sentence: str, *, top_k: int = 3, causal: bool = False
) -> list[tuple[str, float]]:
    """The top_k words and their probabilities for the one ``[MASK]`` of sentence."""
    top = masked_probs(model, vocab, sentence, causal=causal).topk(positive_int(top_k, "top_k"))
    return [(vocab[int(i)], float(v)) for v, i in zip(top.values, top.indices, strict=True)]


def load_masked_lm(model_id: str = HUB_MASKED_LM):
    """Tokenizer and masked-LM model (eval mode) of a hub BERT, e.g. bert-base-uncased."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from ..attention.pretrained import _quiet_transformers

    with _quiet_transformers():
        tokenizer = AutoTokenizer.from_pretrained(model_id)
        model = AutoModelForMaskedLM.from_pretrained(model_id)
    return tokenizer, model.eval().requires_grad_(False)


@torch.no_grad()
def fill_mask(model, tokenizer, text: str, top_k: int = 5) -> list[list[tuple[str, float]]]:
    """For every mask token of text, the top_k word pieces and their probabilities (eq. 48.1's
    p(x_i | corrupted input)) under a Hugging Face masked-LM model."""
    enc = tokenizer(text, return_tensors="pt")
    where = (enc["input_ids"][0] == tokenizer.mask_token_id).nonzero().flatten()
    if not len(where):
        raise ValueError(f"text must contain the mask token {tokenizer.mask_token!r}")
    probs = torch.softmax(model(**enc).logits[0, where].float(), -1)  # (masks, V)
    top = probs.topk(positive_int(top_k, "top_k"), dim=-1)
    return [
        [(tokenizer.convert_ids_to_tokens(int(i)), float(v)) for v, i in zip(vs, ids, strict=True)]
        for vs, ids in zip(top.values, top.indices, strict=True)
    ]


def pack_state(module: nn.Module) -> dict[str, dict]:
    """The module's float tensors as JSON-ready float16 base64 strings with their shapes."""
    return {
        name: {
            "shape": list(t.shape),
            "float16": base64.b64encode(t.detach().cpu().half().numpy().tobytes()).decode(),
        }
        for name, t in module.state_dict().items()
        if t.is_floating_point()
    }


def unpack_state(module: nn.Module, packed: dict[str, dict]) -> nn.Module:
    """Load the tensors of :func:`pack_state` into module (strictly: every name must match)."""
    own = module.state_dict()
    state = {}
    for name, t in own.items():
        if not t.is_floating_point():
            state[name] = t
            continue
        if name not in packed:
            raise ValueError(f"packed state has no tensor {name!r}")
        raw = np.frombuffer(base64.b64decode(packed[name]["float16"]), dtype=np.float16)
        state[name] = torch.from_numpy(raw.astype(np.float32)).reshape(packed[name]["shape"])
    extra = sorted(set(packed) - set(state))
    if extra:
        raise ValueError(f"packed state has tensors the module lacks: {extra[:5]}")
    module.load_state_dict({k: v.to(own[k].dtype) for k, v in state.items()})
    return module


# --- masked autoencoders (eq. 48.3) ------------------------------------------------------------


def random_masking(
    batch: int, n_patches: int, ratio: float, generator: torch.Generator
) -> torch.Tensor:
    """Masks (B, N) bool with exactly round(ratio N) True (masked) per row, uniformly at random.

    Each row ranks N uniform draws; the round(ratio N) lowest ranks are masked.
    """
    B, N = positive_int(batch, "batch"), positive_int(n_patches, "n_patches")
    n_mask = round(number(ratio, "ratio", 0.0, 1.0, open_high=True) * N)
    rank = torch.rand(B, N, generator=generator).argsort(1).argsort(1)  # (B, N) ranks 0..N-1
    return rank < n_mask


def _masked_args(pred, target, mask):
    float_tensor(pred, "pred", ndim=3)
    same_shape(pred, target, ("pred", "target"))
    shape_is(bool_tensor(mask, "mask"), "mask", pred.shape[:2])
    if not bool(mask.any()):  # a mean over no patch: nan
        raise ValueError("mask holds no masked patch: the loss is undefined")


def mae_loss(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean squared error per pixel over the masked patches only. Implements eq. 48.3.

    pred, target: (B, N, P) reconstructed and true patches; mask: (B, N) bool, True = masked.
    """
    _masked_args(pred, target, mask)
    per_patch = ((pred - target) ** 2).mean(-1)  # (B, N): error of each patch
    return per_patch[mask].mean()


def mae_loss_naive(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Eq. 48.3 patch by patch: a loop over the masked (b, i), pixel by pixel."""
    _masked_args(pred, target, mask)
    total, count = pred.new_zeros(()), 0
    for b, i in mask.nonzero().tolist():
        total = total + sum((pred[b, i, k] - target[b, i, k]) ** 2 for k in range(pred.shape[-1]))
        count += 1
    return total / (count * pred.shape[-1])


def _linear(n_in: int, n_out: int, generator: torch.Generator | None) -> nn.Linear:
    """nn.Linear with torch's default uniform initialisation drawn from ``generator``."""
    layer = nn.Linear(n_in, n_out)
    bound = 1 / math.sqrt(n_in)
    with torch.no_grad():
        for t in (layer.weight, layer.bias):
            t.copy_((torch.rand(t.shape, generator=generator) * 2 - 1) * bound)
    return layer


class MaskedAutoencoder(nn.Module):
    """A masked autoencoder for small images, with one-hidden-layer MLPs.

    The encoder reads the N patches with the masked ones set to zero, and the mask itself
    (N more inputs), and returns a D-dim code; the decoder reconstructs all N patches from it.
    An MLP has no tokens to drop, so the zeros and the mask stand in for what a transformer
    encoder gets from the visible patches and their positions.
    """

    def __init__(
        self,
        n_patches: int,
        patch_dim: int,
        width: int = 128,
        dim: int = 32,
        *,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        self.n_patches, self.patch_dim = positive_int(n_patches, "n_patches"), patch_dim
        n_in = n_patches * (positive_int(patch_dim, "patch_dim") + 1)
        self.encoder = nn.Sequential(
            _linear(n_in, width, generator), nn.ReLU(), _linear(width, dim, generator)
        )
        self.decoder = nn.Sequential(
            nn.ReLU(),
            _linear(dim, width, generator),
            nn.ReLU(),
            _linear(width, n_patches * patch_dim, generator),
        )

    def encode(self, patches: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """patches (B, N, P), mask (B, N) bool -> code (B, D)."""
        shape_is(patches, "patches", (None, self.n_patches, self.patch_dim))
        shape_is(bool_tensor(mask, "mask"), "mask", patches.shape[:2])
        visible = patches * (~mask)[..., None]  # (B, N, P), masked patches zeroed
        return self.encoder(torch.cat([visible.flatten(1), mask.to(patches.dtype)], 1))

    def forward(self, patches: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """patches (B, N, P), mask (B, N) -> reconstructed patches (B, N, P)."""
        code = self.encode(patches, mask)
        return self.decoder(code).view(-1, self.n_patches, self.patch_dim)  # (B, N P) -> (B, N, P)


def train_mae(
    model: MaskedAutoencoder,
    patches: torch.Tensor,
    *,
    ratio: float,
    steps: int,
    batch_size: int = 128,
    lr: float = 3e-3,
    seed: int = 0,
) -> list[float]:
    """Train on eq. 48.3 with a fresh random mask of the given ratio for every image, AdamW.

    patches: (n, N, P) training images as patches. Returns the loss of every step.
    """
    float_tensor(patches, "patches", ndim=3, not_empty=True)
    g = torch.Generator().manual_seed(integer(seed, "seed", low=0))
    opt = torch.optim.AdamW(model.parameters(), lr=positive(lr, "lr"), weight_decay=1e-4)
    losses = []
    model.train()
    for _ in range(positive_int(steps, "steps")):
        x = patches[torch.randint(len(patches), (batch_size,), generator=g)]  # (B, N, P)
        mask = random_masking(len(x), x.shape[1], ratio, g)  # (B, N)
        loss = mae_loss(model(x, mask), x, mask)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    model.eval()
    return losses


# --- siamese learning without negatives (eqs. 48.4-48.6) ----------------------------------------


def _cosine(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Row-wise cosine similarity of (B, D) and (B, D): (B,)."""
    return (a * b).sum(-1) / (a.norm(dim=-1) * b.norm(dim=-1))


def _siamese_args(p1, p2, z1, z2):
    for t, n in ((p1, "p1"), (p2, "p2"), (z1, "z1"), (z2, "z2")):
        float_tensor(t, n, ndim=2, not_empty=True)
    same_shape(p1, z2, ("p1", "z2"))
    same_shape(p2, z1, ("p2", "z1"))
    same_shape(p1, p2, ("p1", "p2"))


def siamese_loss(p1, p2, z1, z2, *, stop_gradient: bool = True) -> torch.Tensor:
    """Symmetric negative cosine similarity of predictions and the other view's projections.

    Implements eq. 48.4; with ``stop_gradient`` the projections z are constants (detached).
    p1, p2: (B, D) predictions of views 1 and 2; z1, z2: (B, D) their projections.
    """
    _siamese_args(p1, p2, z1, z2)
    if stop_gradient:
        z1, z2 = z1.detach(), z2.detach()
    return -0.5 * (_cosine(p1, z2).mean() + _cosine(p2, z1).mean())


def siamese_loss_naive(p1, p2, z1, z2, *, stop_gradient: bool = True) -> torch.Tensor:
    """Eq. 48.4 sample by sample, with explicit sums for the dot products and norms."""
    _siamese_args(p1, p2, z1, z2)
    if stop_gradient:
        z1, z2 = z1.detach(), z2.detach()
    total = p1.new_zeros(())
    for b in range(len(p1)):
        for p, z in ((p1[b], z2[b]), (p2[b], z1[b])):
            total = total - (p * z).sum() / torch.sqrt((p * p).sum() * (z * z).sum())
    return total / (2 * len(p1))


@torch.no_grad()
def ema_update(target: nn.Module, online: nn.Module, tau: float) -> None:
    """xi <- tau xi + (1 - tau) theta for every parameter; buffers are copied. Implements eq. 48.5.

    target, online: modules of the same structure; tau in [0, 1] (1: the target never moves).
    """
    tau = probability(tau, "tau")
    for xi, theta in zip(target.parameters(), online.parameters(), strict=True):
        xi.mul_(tau).add_(theta, alpha=1 - tau)
    for b_t, b_o in zip(target.buffers(), online.buffers(), strict=True):
        b_t.copy_(b_o)


def embedding_std(z: torch.Tensor) -> float:
    """The std over the batch of each coordinate of the normalised z / ||z||, averaged over the D
    coordinates: about 1/sqrt(D) for directions spread over the sphere, 0 for one direction."""
    z = float_tensor(z, "z", ndim=2, not_empty=True)
    return float(F.normalize(z, dim=1).std(0).mean())


def effective_rank(z: torch.Tensor) -> float:
    """exp of the entropy of the normalised singular values of z (B, D). Implements eq. 48.6.

    Between 1 (one direction: collapse) and min(B, D) (all singular values equal).
    """
    z = float_tensor(z, "z", ndim=2, not_empty=True, all_finite=True)
    s = torch.linalg.svdvals(z.double())  # (min(B, D),)
    if float(s.sum()) == 0:
        raise ValueError("z is all zero: its effective rank is undefined")
    q = s / s.sum()
    q = q[q > 0]
    return float(torch.exp(-(q * q.log()).sum()))


#: The siamese variants: (stop-gradient, predictor, moving-average target) of each.
VARIANTS = {
    "SimSiam": (True, True, False),
    "BYOL": (True, True, True),
    "no stop-gradient": (False, True, False),
    "no predictor": (True, False, False),
}


class SiameseNet(nn.Module):
    """The online network of a siamese pair: backbone, projector and predictor.

    The backbone is chapter 30's :class:`~mlbook.architectures.contrastive.DigitEncoder`
    backbone (images (B, 1, 8, 8) -> h (B, width)), initialised from ``seed`` exactly as
    ``train_simclr(..., seed=seed)`` initialises it; the projector is BatchNorm, ReLU,
    Linear(width, D) (h -> z); the predictor Linear(D, pred_width), BatchNorm, ReLU,
    Linear(pred_width, D) (z -> p), or the identity. ``encoder`` = backbone then projector.
    """

    def __init__(
        self,
        *,
        seed: int = 0,
        dim: int = 32,
        pred_width: int = 16,
        predictor: bool = True,
        **sizes,
    ) -> None:
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(integer(seed, "seed", low=0))
            backbone = DigitEncoder(**sizes).backbone  # the same start as SimCLR's encoder
        width = backbone[-1].out_features
        g = torch.Generator().manual_seed(seed + 1)
        projector = nn.Sequential(nn.BatchNorm1d(width), nn.ReLU(), _linear(width, dim, g))
        self.encoder = nn.Sequential(backbone, projector)
        self.predictor = (
            nn.Sequential(
                _linear(dim, pred_width, g),
                nn.BatchNorm1d(pred_width),
                nn.ReLU(),
                _linear(pred_width, dim, g),
            )
            if predictor
            else nn.Identity()
        )

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """The representation h (B, width) that probes read: the backbone's output."""
        return self.encoder[0](x)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B, 1, 8, 8) -> (z, p), each (B, D)."""
        z = self.encoder(x)
        return z, self.predictor(z)


def train_siamese(
    x: torch.Tensor,
    augment: Callable[[torch.Tensor, torch.Generator], torch.Tensor],
    *,
    variant: str,
    steps: int,
    batch_size: int = 128,
    lr: float = 3e-3,
    tau: float = 0.99,
    seed: int = 0,
    x_eval: torch.Tensor | None = None,
    eval_every: int = 10,
    **sizes,
) -> tuple[SiameseNet, dict[str, list[float]]]:
    """Train a siamese net on two augmented views of each image (eq. 48.4) with Adam.

    variant: a key of :data:`VARIANTS`; BYOL's targets come from a moving average of the
    encoder (eq. 48.5, rate tau). The same seed gives every variant the same initial weights,
    batches and views (and the backbone of ``train_simclr`` with that seed and the same
    ``sizes``, e.g. ``hidden``, passed to :class:`SiameseNet`). With x_eval, every
    eval_every steps (and after the last) the history records ``step``, ``std``
    (:func:`embedding_std`) and ``erank`` (:func:`effective_rank` of the normalised z) of the
    eval images, in eval mode; ``loss`` holds the loss of every step. Returns the model in eval
    mode and the history.
    """
    one_of(variant, "variant", VARIANTS)
    stop, use_predictor, moving = VARIANTS[variant]
    float_tensor(x, "x", ndim=4, not_empty=True)
    model = SiameseNet(seed=seed, predictor=use_predictor, **sizes)
    target = copy.deepcopy(model.encoder).requires_grad_(False) if moving else None
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=positive(lr, "lr"))
    hist: dict[str, list[float]] = {"loss": [], "step": [], "std": [], "erank": []}

    def record(step: int) -> None:
        model.eval()
        with torch.no_grad():
            zn = F.normalize(model.encoder(x_eval), dim=1)  # (n, D) on the unit sphere
        model.train()
        hist["step"].append(step)
        hist["std"].append(embedding_std(zn))
        hist["erank"].append(effective_rank(zn))

    for s in range(positive_int(steps, "steps")):
        if x_eval is not None and s % eval_every == 0:
            record(s)
        batch = x[torch.randint(len(x), (min(batch_size, len(x)),), generator=g)]
        v1, v2 = augment(batch, g), augment(batch, g)  # two views of every image
        (z1, p1), (z2, p2) = model(v1), model(v2)  # one pass per view: BatchNorm per view
        if target is not None:
            with torch.no_grad():
                z1, z2 = target(v1), target(v2)  # BYOL's targets: the averaged encoder
        loss = siamese_loss(p1, p2, z1, z2, stop_gradient=stop)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if target is not None:
            ema_update(target, model.encoder, tau)
        hist["loss"].append(loss.item())
    if x_eval is not None:
        record(steps)
    model.eval()
    return model, hist
