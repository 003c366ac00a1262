"""Diffusion models (chapter 51): the forward noising process in closed form, the ε-prediction
objective, the DDPM sampling step, a DiT block with adaLN-Zero conditioning, and the
Schrödinger bridge in its static form, entropic optimal transport solved by Sinkhorn in log space.

Shape legend
    N samples;  d data dimension (2 for the toy data);  T diffusion steps, t = 1..T stored at
    index t - 1;  betas, alpha_bar (T,) float64 schedules
    x0, x_t, eps (N, d);  t (N,) int step indices in 0..T-1 (index i is step i + 1)
    DiT: B images;  S patch tokens;  D model width;  P patch side;  c (B, D) conditioning
    OT: n, m support points;  a (n,), b (m,) marginals;  C (n, m) cost;  P (n, m) plan;
    f (n,), g (m,) dual potentials;  eps the entropic regularisation (a positive float)
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..architectures import vit
from ..attention import dot_product
from ..attention.positional import sinusoidal_encoding
from ..validation import (
    distribution,
    divides,
    float_tensor,
    index_tensor,
    number,
    positive,
    positive_int,
    same_shape,
    shape_is,
)

__all__ = [
    "linear_betas",
    "alpha_bars",
    "q_sample",
    "q_sample_naive",
    "eps_loss",
    "vlb_weights",
    "posterior_mean",
    "ddpm_step",
    "sample",
    "time_embedding",
    "Denoiser",
    "ring_of_gaussians",
    "sliced_wasserstein",
    "sliced_wasserstein_naive",
    "modulate",
    "DiTBlock",
    "TinyDiT",
    "sinkhorn_log",
    "sinkhorn_naive",
    "entropic_objective",
    "bridge_sample",
]


# --- eq. 51.1: the forward process ----------------------------------------------------------------


def linear_betas(T: int, beta_1: float = 1e-4, beta_T: float = 0.02) -> torch.Tensor:
    """The linear noise schedule beta_t, t = 1..T, of Ho et al. (float64, shape (T,))."""
    T = positive_int(T, "T")
    number(beta_1, "beta_1", 0.0, 1.0, open_low=True, open_high=True)
    number(beta_T, "beta_T", 0.0, 1.0, open_low=True, open_high=True)
    return torch.linspace(beta_1, beta_T, T, dtype=torch.float64)


def alpha_bars(betas: torch.Tensor) -> torch.Tensor:
    """alpha_bar_t = prod_{s <= t} (1 - beta_s): (T,) -> (T,). Part of eq. 51.1."""
    return torch.cumprod(1 - betas, dim=0)


def q_sample(x0, t, eps, alpha_bar) -> torch.Tensor:
    """A draw of x_t ~ q(x_t | x_0) in one step. Implements eq. 51.1.

    x0, eps: (N, d); t: (N,) step indices; alpha_bar: (T,). Returns x_t (N, d).
    """
    same_shape(x0, eps, ("x0", "eps"))
    t = index_tensor(t, "t", high=len(alpha_bar), ndim=1)
    ab = alpha_bar[t].to(x0.dtype)[:, None]  # (N, 1)
    return ab.sqrt() * x0 + (1 - ab).sqrt() * eps


def q_sample_naive(x0, t: int, betas, generator=None) -> torch.Tensor:
    """Reference for :func:`q_sample`: t + 1 one-step kernels
    x_s = sqrt(1 - beta_s) x_{s-1} + sqrt(beta_s) eps_s, with fresh noise at each step.

    x0: (N, d); t: one step index in 0..T-1. Returns x_t (N, d).
    """
    x = x0
    for s in range(t + 1):
        z = torch.randn(x.shape, generator=generator, dtype=x.dtype)
        x = (1 - betas[s]).sqrt() * x + betas[s].sqrt() * z
    return x


# --- eqs. 51.2-51.3: the objective and the sampling step ------------------------------------------


def eps_loss(model, x0, t, eps, alpha_bar) -> torch.Tensor:
    """The simple ε-prediction loss mean ||eps - model(x_t, t)||^2 / d. Implements eq. 51.2.

    model: (x_t (N, d), t (N,)) -> (N, d); x0, eps: (N, d); t: (N,). Returns a scalar.
    """
    x_t = q_sample(x0, t, eps, alpha_bar)
    return ((eps - model(x_t, t)) ** 2).mean()


def vlb_weights(betas) -> torch.Tensor:
    """The weight lambda_t = beta_t^2 / (2 sigma_t^2 alpha_t (1 - alpha_bar_t)) of the squared
    ε-error in the variational bound, with sigma_t^2 = beta_t: the factor eq. 51.2 drops. (T,)."""
    ab = alpha_bars(betas)
    return betas**2 / (2 * betas * (1 - betas) * (1 - ab))


def posterior_mean(x0, x_t, t: int, betas) -> torch.Tensor:
    """The mean of q(x_{t-1} | x_t, x_0), written with x_0 (not with eps). x0, x_t: (N, d)."""
    ab = alpha_bars(betas)
    ab_prev = ab[t - 1] if t > 0 else torch.ones((), dtype=ab.dtype)
    c0 = ab_prev.sqrt() * betas[t] / (1 - ab[t])
    ct = (1 - betas[t]).sqrt() * (1 - ab_prev) / (1 - ab[t])
    return c0 * x0 + ct * x_t


def ddpm_step(x_t, t: int, eps_hat, betas, z) -> torch.Tensor:
    """One ancestral sampling step x_t -> x_{t-1}, sigma_t^2 = beta_t. Implements eq. 51.3.

    x_t, eps_hat, z: (N, d); t: the step index (no noise is added at index 0). Returns (N, d).
    """
    same_shape(x_t, eps_hat, ("x_t", "eps_hat"))
    ab = alpha_bars(betas)
    mean = (x_t - betas[t] / (1 - ab[t]).sqrt() * eps_hat) / (1 - betas[t]).sqrt()
    return mean + betas[t].sqrt() * z if t > 0 else mean


@torch.no_grad()
def sample(model, n: int, betas, *, d: int = 2, generator=None, trajectory: bool = False):
    """Draw n samples by running eq. 51.3 from x_T ~ N(0, I) down to x_0.

    model: (x_t (n, d), t (n,)) -> eps_hat (n, d). Returns x_0 (n, d), float32; with
    ``trajectory`` also every x_t, (T + 1, n, d), x_T first.
    """
    x = torch.randn(positive_int(n, "n"), d, generator=generator)
    path = [x]
    for t in reversed(range(len(betas))):
        eps_hat = model(x, torch.full((n,), t, dtype=torch.long))
        x = ddpm_step(x, t, eps_hat, betas.float(), torch.randn(x.shape, generator=generator))
        path.append(x)
    return (x, torch.stack(path)) if trajectory else x


def time_embedding(t, dim: int, T: int) -> torch.Tensor:
    """Sinusoidal features of the step index, scaled so that t = T maps to position 1000
    (the range of Ho et al.'s schedule): (N,) -> (N, dim) float32."""
    pos = t.to(torch.float64) * (1000.0 / T)
    return sinusoidal_encoding(pos, dim).float()


class Denoiser(nn.Module):
    """eps_theta(x_t, t): an MLP on [x_t, embedding(t)] with two hidden SiLU layers.

    d: data dimension; T: number of steps; width: hidden width; t_dim: embedding width.
    """

    def __init__(self, d: int = 2, T: int = 100, width: int = 128, t_dim: int = 32) -> None:
        super().__init__()
        self.T, self.t_dim = T, t_dim
        self.net = nn.Sequential(
            nn.Linear(d + t_dim, width),
            nn.SiLU(),
            nn.Linear(width, width),
            nn.SiLU(),
            nn.Linear(width, width),
            nn.SiLU(),
            nn.Linear(width, d),
        )

    def forward(self, x, t):
        emb = time_embedding(t, self.t_dim, self.T)  # (N, t_dim)
        return self.net(torch.cat([x, emb], dim=1))  # (N, d + t_dim) -> (N, d)


def ring_of_gaussians(
    n: int, k: int = 8, radius: float = 2.0, std: float = 0.15, generator=None
) -> torch.Tensor:
    """n points from an equal mixture of k isotropic Gaussians on a circle: (n, 2) float32."""
    comp = torch.randint(0, positive_int(k, "k"), (positive_int(n, "n"),), generator=generator)
    angle = 2 * math.pi * comp.float() / k
    centres = radius * torch.stack([angle.cos(), angle.sin()], dim=1)  # (n, 2)
    return centres + std * torch.randn(n, 2, generator=generator)


def _directions(d: int, n_proj: int, generator) -> torch.Tensor:
    u = torch.randn(n_proj, d, generator=generator, dtype=torch.float64)
    return u / u.norm(dim=1, keepdim=True)  # (n_proj, d) unit vectors


def sliced_wasserstein(x, y, n_proj: int = 128, generator=None) -> torch.Tensor:
    """The sliced 1-Wasserstein distance: the mean over random unit directions u of the 1-D
    W1 between the projections x u and y u (equal sample sizes: sort and match).

    x, y: (N, d). Returns a float64 scalar.
    """
    same_shape(x, y, ("x", "y"))
    u = _directions(x.shape[1], n_proj, generator)
    px = torch.sort(x.double() @ u.T, dim=0).values  # (N, n_proj)
    py = torch.sort(y.double() @ u.T, dim=0).values
    return (px - py).abs().mean()


def sliced_wasserstein_naive(x, y, n_proj: int = 128, generator=None) -> torch.Tensor:
    """Reference for :func:`sliced_wasserstein`: one direction at a time, W1 as the integral
    of |F_x - F_y| over the merged sorted support."""
    u = _directions(x.shape[1], n_proj, generator)
    total = torch.zeros((), dtype=torch.float64)
    for k in range(n_proj):
        a, b = x.double() @ u[k], y.double() @ u[k]
        pts = torch.sort(torch.cat([a, b])).values
        fa = torch.searchsorted(torch.sort(a).values, pts[:-1], right=True).double() / len(a)
        fb = torch.searchsorted(torch.sort(b).values, pts[:-1], right=True).double() / len(b)
        total = total + ((fa - fb).abs() * pts.diff()).sum()
    return total / n_proj


# --- eq. 51.4: adaLN-Zero -------------------------------------------------------------------------


def modulate(x, shift, scale) -> torch.Tensor:
    """(1 + scale) * x + shift per sample: x (B, S, D); shift, scale (B, D)."""
    return x * (1 + scale[:, None]) + shift[:, None]


class DiTBlock(nn.Module):
    """A DiT block with adaLN-Zero conditioning. Implements eq. 51.4.

    LayerNorms without parameters; multi-head self-attention (the book's
    ``scaled_dot_product_attention``) and a GELU MLP (width 4D); a linear map of SiLU(c) gives
    the shift, scale and gate of each branch, initialised to zero (``zero=False`` draws it like
    the other weights: the negative control).
    """

    def __init__(self, D: int, n_heads: int, *, zero: bool = True, generator=None) -> None:
        super().__init__()
        divides(n_heads, "n_heads", D, "D")
        self.D, self.n_heads = D, n_heads

        def lin(i, o):
            w = torch.randn(o, i, generator=generator) / math.sqrt(i)
            layer = nn.Linear(i, o)
            with torch.no_grad():
                layer.weight.copy_(w)
                layer.bias.zero_()
            return layer

        self.qkv, self.proj = lin(D, 3 * D), lin(D, D)
        self.fc1, self.fc2 = lin(D, 4 * D), lin(4 * D, D)
        self.ada = lin(D, 6 * D)
        if zero:
            nn.init.zeros_(self.ada.weight)
            nn.init.zeros_(self.ada.bias)

    def attention(self, h):
        B, S, D = h.shape
        q, k, v = self.qkv(h).reshape(B, S, 3, self.n_heads, D // self.n_heads).unbind(2)
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))  # (B, n_h, S, D/n_h) each
        out, _ = dot_product.scaled_dot_product_attention(q, k, v)
        return self.proj(out.transpose(1, 2).reshape(B, S, D))  # (B, n_h, S, D/n_h) -> (B, S, D)

    def forward(self, x, c):
        """x: (B, S, D) tokens; c: (B, D) conditioning (time + class). Returns (B, S, D)."""
        b1, s1, g1, b2, s2, g2 = self.ada(F.silu(c)).chunk(6, dim=1)  # six (B, D)
        ln = F.layer_norm(x, (self.D,), eps=1e-6)
        x = x + g1[:, None] * self.attention(modulate(ln, b1, s1))
        ln = F.layer_norm(x, (self.D,), eps=1e-6)
        mlp = self.fc2(F.gelu(self.fc1(modulate(ln, b2, s2))))
        return x + g2[:, None] * mlp


class TinyDiT(nn.Module):
    """A diffusion transformer for (B, C, H, W) images: patch tokens (``vit.patchify``), learned
    positions, c = time embedding + class embedding, L DiT blocks, a zero-initialised adaLN
    output layer back to patches. Predicts eps_theta(x_t, t, y) of the image's shape."""

    def __init__(
        self,
        image_size: int = 8,
        channels: int = 1,
        patch: int = 2,
        D: int = 32,
        n_heads: int = 4,
        n_layers: int = 2,
        n_classes: int = 10,
        T: int = 100,
        generator=None,
    ) -> None:
        super().__init__()
        divides(patch, "patch", image_size, "image_size")
        self.size, self.patch, self.T, self.D = image_size, patch, T, D
        S, pd = (image_size // patch) ** 2, channels * patch * patch
        self.embed = nn.Linear(pd, D)
        self.pos = nn.Parameter(0.02 * torch.randn(S, D, generator=generator))
        self.label = nn.Embedding(n_classes, D)
        self.blocks = nn.ModuleList(
            DiTBlock(D, n_heads, generator=generator) for _ in range(n_layers)
        )
        self.final_ada = nn.Linear(D, 2 * D)
        self.out = nn.Linear(D, pd)
        for layer in (self.final_ada, self.out):
            nn.init.zeros_(layer.weight)
            nn.init.zeros_(layer.bias)

    def forward(self, x, t, y):
        """x: (B, C, H, W); t: (B,) step indices; y: (B,) labels. Returns eps_hat (B, C, H, W)."""
        shape_is(x, "x", (None, None, self.size, self.size))
        h = self.embed(vit.patchify(x, self.patch)) + self.pos  # (B, S, D)
        c = time_embedding(t, self.D, self.T) + self.label(y)  # (B, D)
        for block in self.blocks:
            h = block(h, c)
        shift, scale = self.final_ada(F.silu(c)).chunk(2, dim=1)
        h = self.out(modulate(F.layer_norm(h, (self.D,), eps=1e-6), shift, scale))  # (B, S, pd)
        return vit.unpatchify(h, self.patch, self.size, self.size)


# --- eqs. 51.5-51.6: Schrödinger bridges, entropic OT, Sinkhorn ----------------------------------


def _ot_inputs(a, b, C, eps):
    a = distribution(a, "a", atol=1e-9)
    b = distribution(b, "b", atol=1e-9)
    C = float_tensor(C, "C", ndim=2, all_finite=True)
    shape_is(C, "C", (len(a), len(b)))
    return a, b, C, positive(eps, "eps")


def sinkhorn_log(a, b, C, eps: float, iters: int = 10_000, tol: float = 1e-12):
    """Entropic OT by Sinkhorn's iterations on the dual potentials in log space.
    Implements eq. 51.6.

    a: (n,), b: (m,) marginals; C: (n, m) cost; eps > 0; stops when the row sums of the plan
    match ``a`` to ``tol`` (the column sums match ``b`` after every g-update).
    Returns P (n, m), f (n,), g (m,), and the number of iterations.
    """
    a, b, C, eps = _ot_inputs(a, b, C, eps)
    f, g = torch.zeros_like(a), torch.zeros_like(b)
    it = 0
    while it < positive_int(iters, "iters"):
        it += 1
        f = eps * a.log() - eps * torch.logsumexp((g[None, :] - C) / eps, dim=1)
        g = eps * b.log() - eps * torch.logsumexp((f[:, None] - C) / eps, dim=0)
        P = torch.exp((f[:, None] + g[None, :] - C) / eps)  # (n, m)
        if (P.sum(1) - a).abs().max() < tol:
            break
    return P, f, g, it


def sinkhorn_naive(a, b, C, eps: float, iters: int = 10_000, tol: float = 1e-12):
    """Reference for :func:`sinkhorn_log`: the scaling form u = a / (K v), v = b / (K^T u) with
    K = exp(-C / eps). Underflows (0/0 = NaN) once C / eps exceeds about 745.

    Returns P (n, m) and the number of iterations.
    """
    a, b, C, eps = _ot_inputs(a, b, C, eps)
    K = torch.exp(-C / eps)
    u, v = torch.ones_like(a), torch.ones_like(b)
    it = 0
    while it < iters:
        it += 1
        u = a / (K @ v)
        v = b / (K.T @ u)
        P = u[:, None] * K * v[None, :]
        if not (P.sum(1) - a).abs().max() >= tol:  # also stops on NaN
            break
    return P, it


def entropic_objective(P, a, b, C, eps: float) -> torch.Tensor:
    """<P, C> + eps KL(P || a b^T), the static Schrödinger-bridge objective (eq. 51.5)."""
    ref = a[:, None] * b[None, :]
    kl = torch.where(P > 0, P * (P / ref).log(), torch.zeros_like(P)).sum() - P.sum() + 1
    return (P * C).sum() + eps * kl


def bridge_sample(x0, x1, t: float, sigma: float, z) -> torch.Tensor:
    """A point at time t of the Brownian bridge from x0 to x1 with diffusion sigma:
    (1 - t) x0 + t x1 + sigma sqrt(t (1 - t)) z. x0, x1, z: (N, d). Returns (N, d)."""
    t = number(t, "t", 0.0, 1.0)
    return (1 - t) * x0 + t * x1 + sigma * math.sqrt(t * (1 - t)) * z
