"""Checks of the exercises of chapter 48 (self-supervised learning).

The references are independent of :mod:`mlbook.beyond.self_supervised` and
:mod:`mlbook.architectures.vit`: the share of chosen-but-unchanged tokens in closed form, revealed
beside a run of ``lm.mask_tokens`` on a million ids (48.1); the masked-autoencoder loss from a
patch mask expanded to pixels with ``repeat_interleave`` (48.2); ridge regression in NumPy on
scikit-learn's digits, with pixel masks from ``np.kron`` (48.3).

Each typical wrong answer is written once, as a function below; a check compares the reader's
answer with those functions' results (to name the mistake), and ``MISTAKES`` lists the same
functions (the tests feed each to its check).
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from ...language import language_model as lm
from . import Incorrect, as_number, as_tensor, attempt, exercise, expect_answer, is_close

F64 = torch.float64

# --- 48.1 ----------------------------------------------------------------------------------------

BERT_VOCAB = 30522


def _unchanged_share(p_select=0.15, p_mask=0.8, p_random=0.1, V=BERT_VOCAB) -> float:
    """Chosen, and the input equals the original: the unchanged case or a random draw of it."""
    return p_select * ((1 - p_mask - p_random) + p_random / V)


def guess_share_of_chosen():
    return 0.1


def guess_all_unchanged():
    return 0.85 + _unchanged_share()


def guess_random_too():
    return 0.03


def guess_percent():
    return 1.5


WRONG_SHARE = {
    "0.1 is the share among the chosen tokens; only 15 % of all tokens are chosen": 0.1,
    "that counts every token that reaches the model unchanged, and most of them (the 85 % not "
    "chosen) carry no loss": guess_all_unchanged(),
    "that also counts the 85 % that are not chosen; they carry no loss": 0.85,
    "the random substitutes are changed tokens (only 1 in V of them equals the original)": 0.03,
    "0.12 is the share of [MASK] inputs": 0.12,
    "return a fraction, not a percentage: 1.5 % is 0.015": 1.5,
}


@exercise("48.1", "predict_unchanged_share")
def unchanged_share(answer) -> str:
    """The exact share 0.15 (0.1 + 0.1 / V), revealed beside a million-token run of BERT's rule."""
    guess = as_number(attempt(answer), "predict_unchanged_share()", " (a fraction)")
    exact = _unchanged_share()
    g = torch.Generator().manual_seed(481)
    tokens = torch.randint(0, BERT_VOCAB, (1_000_000,), generator=g)
    inputs, labels = lm.mask_tokens(tokens, BERT_VOCAB, BERT_VOCAB, g)
    observed = float(((labels != lm.IGNORE_INDEX) & (inputs == tokens)).double().mean())
    seen = (
        f"a million corrupted tokens: {100 * observed:.3f} % carry a loss and are unchanged "
        f"(exactly 0.15 (0.1 + 0.1/V) = {100 * exact:.5f} %)"
    )
    expect_answer(
        guess,
        exact,
        f"predict_unchanged_share() = {guess!r} ({seen})",
        wrong=WRONG_SHARE,
        atol=5e-4,
        rtol=0,
    )
    return f"right: {seen}; these 1.5 % tie the output at a visible token to that token"


# --- 48.2 ----------------------------------------------------------------------------------------


def _pixel_mask(mask: torch.Tensor, p: int, H: int, W: int) -> torch.Tensor:
    """The patch mask (B, N), row by row, as a pixel mask (B, 1, H, W) of 0/1 floats."""
    B = mask.shape[0]
    grid = mask.reshape(B, H // p, W // p).to(F64)
    return grid.repeat_interleave(p, 1).repeat_interleave(p, 2)[:, None]


def _masked_loss(images, recon, mask, p, *, order="rows", hidden=True, per="value"):
    B, C, H, W = images.shape
    if order == "columns":  # patch k counted column by column
        mask = mask.reshape(B, W // p, H // p).transpose(1, 2).reshape(B, -1)
    m = _pixel_mask(mask if hidden else ~mask, p, H, W)
    sq = (recon - images) ** 2 * m  # (B, C, H, W), zero outside the scored patches
    loss = sq.sum() / (m.sum() * C)
    return loss * C * p * p if per == "patch" else loss


def loss_all_patches(images, recon, mask, p):
    return ((recon - images) ** 2).mean()


def loss_summed_in_patch(images, recon, mask, p):
    return _masked_loss(images, recon, mask, p, per="patch")


def loss_visible_patches(images, recon, mask, p):
    return _masked_loss(images, recon, mask, p, hidden=False)


def loss_column_order(images, recon, mask, p):
    return _masked_loss(images, recon, mask, p, order="columns")


WRONG_MAE = [
    (
        loss_all_patches,
        "that averages over all patches; eq. 48.3 scores the hidden ones only "
        "(the visible patches are part of the input)",
    ),
    (
        loss_summed_in_patch,
        "that sums the squared errors within each patch; average them over its C p^2 values",
    ),
    (loss_visible_patches, "that scores the visible patches: True in the mask means hidden"),
    (
        loss_column_order,
        "the patches are numbered column by column; vit.patchify numbers them row by row",
    ),
]


@exercise("48.2", "mae_masked_loss")
def mae_masked_loss(answer) -> str:
    """Eq. 48.3 against a patch mask expanded to pixels, on four image shapes."""
    cases = ((3, 1, 8, 8, 2), (2, 3, 8, 12, 4), (4, 1, 6, 9, 3), (2, 2, 4, 4, 2))
    for seed, (B, C, H, W, p) in enumerate(cases):
        g = torch.Generator().manual_seed(482 + seed)
        images = torch.rand(B, C, H, W, generator=g, dtype=F64)
        recon = images + 0.3 * torch.randn(B, C, H, W, generator=g, dtype=F64)
        N = (H // p) * (W // p)
        mask = torch.rand(B, N, generator=g) < 0.6
        mask[:, 0], mask[:, -1] = True, False  # every image has hidden and visible patches
        what = f"mae_masked_loss(images, recon, mask, p={p}) for images of shape {(B, C, H, W)}"
        got = attempt(answer, images.clone(), recon.clone(), mask.clone(), p)
        wrong = {fb: fn(images, recon, mask, p) for fn, fb in WRONG_MAE}
        expect_answer(
            got, _masked_loss(images, recon, mask, p), what, wrong=wrong, atol=1e-12, rtol=1e-10
        )
    return (
        "matches the squared error weighted by the pixel mask, per value, over the hidden "
        "patches, for 1 and 3 channels, square and non-square images and p = 2, 3, 4"
    )


# --- 48.3 ----------------------------------------------------------------------------------------


@functools.cache
def _digits_split() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    x = load_digits().data / 16.0  # (1797, 64)
    order = np.random.default_rng(483).permutation(len(x))
    return x[order[:1347]], x[order[1347:]]


def _masks() -> np.ndarray:
    rng = np.random.default_rng(4830)
    out = []
    for hidden in (4, 8, 12, 15):  # ratios 0.25, 0.5, 0.75, 0.9375
        m = np.zeros(16, dtype=bool)
        m[rng.choice(16, hidden, replace=False)] = True
        out.append(m)
    return np.stack(out)


def _fvu(
    x_train,
    x_test,
    masks,
    *,
    on="test",
    normalise=True,
    invert=False,
    order="rows",
    explained=False,
):
    out = []
    for m in masks:
        grid = m.reshape(4, 4) if order == "rows" else m.reshape(4, 4).T
        hidden = np.kron(grid, np.ones((2, 2), dtype=bool)).reshape(-1)  # (64,) pixels
        if invert:
            hidden = ~hidden
        xe = x_test if on == "test" else x_train
        mu_x, mu_y = x_train[:, ~hidden].mean(0), x_train[:, hidden].mean(0)
        X, Y = x_train[:, ~hidden] - mu_x, x_train[:, hidden] - mu_y
        Wr = np.linalg.solve(X.T @ X + np.eye(X.shape[1]), X.T @ Y)
        err = ((mu_y + (xe[:, ~hidden] - mu_x) @ Wr - xe[:, hidden]) ** 2).mean()
        base = ((mu_y - xe[:, hidden]) ** 2).mean()
        v = err / base if normalise else err
        out.append(1 - v if explained else v)
    return np.array(out)


def _wrong_fvu(**flags):
    def answer(x_train, x_test, masks):
        return torch.from_numpy(_fvu(x_train.numpy(), x_test.numpy(), masks.numpy(), **flags))

    return answer


fvu_on_train = _wrong_fvu(on="train")
fvu_unnormalised = _wrong_fvu(normalise=False)
fvu_explained = _wrong_fvu(explained=True)
fvu_inverted = _wrong_fvu(invert=True)
fvu_column_order = _wrong_fvu(order="columns")

WRONG_FVU = [
    (fvu_on_train, "that is measured on the training images; score the test images"),
    (
        fvu_unnormalised,
        "that is the mean squared error itself; divide it by the error of "
        "predicting the training means",
    ),
    (fvu_explained, "that is the fraction explained; return the fraction left unexplained"),
    (fvu_inverted, "that predicts the visible pixels from the hidden ones: True means hidden"),
    (fvu_column_order, "the patches are numbered column by column; number them row by row"),
]


def _matches(got, want, **tol) -> bool:
    try:
        return is_close(got, want, **tol)
    except Incorrect:
        return False


@exercise("48.3", "masked_predictability")
def masked_predictability(answer) -> str:
    """Ridge predictions of hidden pixels in NumPy for four mask ratios, on sklearn's digits."""
    x_train, x_test = _digits_split()
    masks = _masks()
    want = _fvu(x_train, x_test, masks)
    args = (torch.from_numpy(x_train), torch.from_numpy(x_test), torch.from_numpy(masks))
    got = attempt(answer, *(a.clone() for a in args))
    tol = {"atol": 1e-9, "rtol": 1e-7}
    wrong = None
    if not _matches(got, want, **tol):  # the mistakes are computed only when needed
        wrong = {fb: fn(*args) for fn, fb in WRONG_FVU}
    expect_answer(got, want, "masked_predictability(x_train, x_test, masks)", wrong=wrong, **tol)
    got = as_tensor(got, "masked_predictability(...)", (len(masks),))
    table = ", ".join(f"{r:.3g}: {v:.3f}" for r, v in zip(masks.mean(1), want, strict=True))
    return (
        f"matches NumPy ridge regression; fraction of hidden-pixel variance left unexplained "
        f"by mask ratio: {table}"
    )


# Typical wrong answers, listed once (the tests build each and check that it is rejected with
# its feedback) -----------------------------------------------------------------------------------

MISTAKES = {
    "48.1": [
        (guess_share_of_chosen, "share among the chosen tokens"),
        (guess_all_unchanged, "most of them"),
        (guess_random_too, "random substitutes are changed"),
        (guess_percent, "not a percentage"),
    ],
    "48.2": [(fn, fb.split(";")[0]) for fn, fb in WRONG_MAE],
    "48.3": [(fn, fb.split(";")[0]) for fn, fb in WRONG_FVU],
}
