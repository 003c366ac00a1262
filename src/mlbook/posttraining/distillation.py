"""Knowledge distillation of the book's decoder: soft targets, the T^2 KL loss, a student (ch. 38).

A teacher's logits z^t and a student's logits z^s over the V tokens are both softened by a
temperature T (eq. 38.1); the student is trained on T^2 KL(q_T || p_T) (eq. 38.2), whose gradient
with respect to the student's logits is T (p_T - q_T) (eq. 38.3). Chapter 13 derived the same
loss for a classifier (:func:`mlbook.nn.losses.distillation_loss`, with the letters p and q the
other way round); here it is averaged over the positions of a language model's windows and used
to train a small decoder (:func:`train_student`) on the same text as a student trained on the
hard next-token labels. ``scripts/distill_students.py`` runs both trainings and stores the
students, which :func:`load_students` loads.

Shape legend
    B batch;  T window (context) length;  V vocabulary;  N tokens in a stream
    logits (..., V), in particular (B, T, V);  tokens, targets (B, T) int;  data (N,) int
    q_T teacher's soft targets, p_T student's softened distribution: (..., V)
"""

from __future__ import annotations

from functools import cache
from importlib import resources

import torch

from ..models.decoder import Decoder
from ..models.training import get_batch, lm_loss
from ..nn.losses import distillation_grad, distillation_loss
from ..nn.optim import Optimizer, OptimizerConfig, clip_grad_norm
from ..nn.schedules import warmup_cosine
from ..nn.softmax import softmax
from ..validation import float_tensor, index_tensor, one_of, positive, positive_int, same_shape

__all__ = [
    "soft_targets",
    "kd_loss",
    "kd_loss_naive",
    "kd_grad",
    "kd_grad_naive",
    "student_loss",
    "train_student",
    "held_out_kl",
    "STUDENTS",
    "load_students",
]


def _pair(student_logits, teacher_logits, temperature) -> float:
    """Checked logits of the same shape (no broadcast may hide a mismatch); returns T."""
    float_tensor(student_logits, "student_logits", min_ndim=1, not_empty=True)
    float_tensor(teacher_logits, "teacher_logits", min_ndim=1)
    same_shape(student_logits, teacher_logits, ("student_logits", "teacher_logits"))
    return positive(temperature, "temperature")


def soft_targets(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """softmax(z / T) over the last axis: q_T for the teacher, p_T for the student. Eq. 38.1.

    logits: (..., V); temperature: T > 0. Returns (..., V) probabilities."""
    float_tensor(logits, "logits", min_ndim=1, not_empty=True)
    return softmax(logits, dim=-1, temperature=positive(temperature, "temperature"))


def kd_loss(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    temperature: float,
    reduction: str = "mean",
) -> torch.Tensor:
    """T^2 KL(q_T || p_T) at every position of a language model. Implements eq. 38.2.

    Chapter 13's distillation loss (eq. 13.5, stable log-softmaxes) with the teacher not
    differentiated. student_logits z^s, teacher_logits z^t: (..., V); temperature: T > 0.
    reduction: "mean" over all positions (a number) or "none" (shape (...)).
    """
    T = _pair(student_logits, teacher_logits, temperature)
    one_of(reduction, "reduction", ("mean", "none"))
    per_position = distillation_loss(student_logits, teacher_logits.detach(), T)  # (...)
    return per_position.mean() if reduction == "mean" else per_position


def kd_loss_naive(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float
) -> torch.Tensor:
    """Eq. 38.2 literally, one position at a time: T^2 sum_v q_v log(q_v / p_v), exp / sum.

    Same arguments as :func:`kd_loss`; returns the per-position losses (...,) (overflows for
    large logits / T, like every literal softmax)."""
    T = _pair(student_logits, teacher_logits, temperature)
    zs = student_logits.reshape(-1, student_logits.shape[-1])  # (M, V) positions as rows
    zt = teacher_logits.detach().reshape(-1, teacher_logits.shape[-1])
    out = []
    for s_row, t_row in zip(zs, zt, strict=True):
        q = torch.exp(t_row / T) / torch.exp(t_row / T).sum()
        p = torch.exp(s_row / T) / torch.exp(s_row / T).sum()
        out.append(T * T * (q * torch.log(q / p)).sum())
    return torch.stack(out).reshape(student_logits.shape[:-1])


def kd_grad(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float
) -> torch.Tensor:
    """T (p_T - q_T): the gradient of the per-position loss of eq. 38.2 with respect to the
    student's logits (chapter 13's distillation_grad). Implements eq. 38.3.

    student_logits, teacher_logits: (..., V); temperature: T > 0. Returns (..., V), every row
    summing to zero (the gradient of ``kd_loss(..., reduction="none").sum()``)."""
    return distillation_grad(
        student_logits, teacher_logits, _pair(student_logits, teacher_logits, temperature)
    )


def kd_grad_naive(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float
) -> torch.Tensor:
    """Eq. 38.3 by the chain rule, term by term: dL/dz_i = T^2 sum_v (dL/dlog p_v)(dlog p_v/dz_i)
    with dlog p_v / dz_i = (delta_vi - p_i) / T, for one position z of shape (V,) at a time."""
    T = _pair(student_logits, teacher_logits, temperature)
    V = student_logits.shape[-1]
    zs = student_logits.reshape(-1, V)  # (M, V)
    zt = teacher_logits.reshape(-1, V)
    rows = []
    for s_row, t_row in zip(zs, zt, strict=True):
        q = torch.exp(t_row / T) / torch.exp(t_row / T).sum()  # (V,)
        p = torch.exp(s_row / T) / torch.exp(s_row / T).sum()
        jac = (torch.eye(V, dtype=p.dtype) - p[None, :]) / T  # [v, i] = d log p_v / d z_i
        rows.append(T * T * (-q) @ jac)  # dL/dlog p_v = -T^2 q_v
    return torch.stack(rows).reshape(student_logits.shape)


def student_loss(
    student: Decoder,
    x: torch.Tensor,
    y: torch.Tensor,
    teacher: Decoder | None = None,
    temperature: float = 1.0,
) -> torch.Tensor:
    """The loss of one batch: hard next-token labels y (teacher None, eq. 23.3) or the teacher's
    soft targets on the same windows x (eq. 38.2). x, y: (B, T) int; returns a number."""
    z_s = student(x)  # (B, T, V)
    if teacher is None:
        return lm_loss(z_s, y)
    with torch.no_grad():
        z_t = teacher(x)  # (B, T, V), no gradient into the teacher
    return kd_loss(z_s, z_t, temperature)


def train_student(
    student: Decoder,
    data: torch.Tensor,
    *,
    steps: int,
    batch_size: int,
    peak_lr: float,
    warmup_steps: int,
    generator: torch.Generator,
    teacher: Decoder | None = None,
    temperature: float = 1.0,
    clip: float = 1.0,
) -> dict[str, list[float]]:
    """Train ``student`` on windows of ``data`` with hard labels (teacher None) or soft targets.

    Both kinds see the same batches (:func:`~mlbook.models.training.get_batch` with the same
    ``generator`` seed) with AdamW (no weight decay), linear warmup and a cosine decay to
    peak_lr / 10 (as :func:`~mlbook.models.training.train`) and global-norm clipping at ``clip``.
    data: (N,) int. Returns per update ``loss`` (what was trained on) and ``hard`` (the batch's
    next-token cross-entropy, the same measure for both kinds).
    """
    steps, B = positive_int(steps, "steps"), positive_int(batch_size, "batch_size")
    index_tensor(data, "data", student.config.vocab_size, ndim=1)
    if teacher is not None and teacher.config.vocab_size != student.config.vocab_size:
        raise ValueError(
            f"teacher has vocab_size {teacher.config.vocab_size}, student "
            f"{student.config.vocab_size}: soft targets need the same vocabulary"
        )
    params = [p for p in student.parameters() if p.requires_grad]
    peak = positive(peak_lr, "peak_lr")

    def schedule(t: int) -> float:  # t = updates taken so far
        return warmup_cosine(
            t + 1, peak_lr=peak, warmup_steps=warmup_steps, total_steps=steps, min_lr=peak / 10
        )

    opt = Optimizer(params, OptimizerConfig(kind="adamw", beta2=0.95), schedule=schedule)
    hist: dict[str, list[float]] = {"loss": [], "hard": []}
    T_win = student.config.max_seq_len
    if teacher is not None:
        teacher.eval()
    student.train()
    for _ in range(steps):
        x, y = get_batch(data, B, T_win, generator)
        z_s = student(x)  # (B, T, V)
        hard = lm_loss(z_s, y)
        if teacher is None:
            loss = hard
        else:
            with torch.no_grad():
                z_t = teacher(x)  # (B, T, V)
            loss = kd_loss(z_s, z_t, temperature)
        opt.zero_grad()
        loss.backward()
        clipped, _ = clip_grad_norm([p.grad for p in params], clip)
        for p, g in zip(params, clipped, strict=True):
            p.grad = g
        opt.step()
        hist["loss"].append(loss.item())
        hist["hard"].append(hard.item())
    student.eval()
    return hist


def held_out_kl(
    student: Decoder, teacher: Decoder, data: torch.Tensor, batch_size: int = 32
) -> float:
    """Mean KL(q || p) per token (T = 1, nats) between teacher and student on consecutive
    windows of max_seq_len tokens of ``data`` (N,), as :func:`~mlbook.models.training.evaluate`
    cuts them."""
    T_win = student.config.max_seq_len
    index_tensor(data, "data", student.config.vocab_size, ndim=1)
    n = (data.numel() - 1) // T_win
    if n < 1:
        raise ValueError(f"data has {data.numel()} tokens; need more than max_seq_len={T_win}")
    x = data[: n * T_win].view(n, T_win)  # (n, T) windows
    total = 0.0
    with torch.no_grad():
        for start in range(0, n, positive_int(batch_size, "batch_size")):
            xb = x[start : start + batch_size]
            total += kd_loss(student(xb), teacher(xb), 1.0, reduction="none").sum().item()
    return max(total / (n * T_win), 0.0)  # a KL is >= 0; identical models leave rounding only


#: The two stored students: trained on hard next-token labels, and on the teacher's soft targets.
STUDENTS = ("hard", "soft")


@cache
def _stored() -> dict:
    path = resources.files("mlbook").joinpath("data", "distilled_students.pt")
    with resources.as_file(path) as file:
        return torch.load(file, weights_only=True)


def load_students() -> tuple[dict[str, Decoder], dict]:
    """The students that ``scripts/distill_students.py`` trained, and how.

    Returns ``(models, info)``: ``models["hard"]`` and ``models["soft"]`` are fresh float32
    Decoders in eval mode with the stored weights; ``info`` holds the settings (steps, batch,
    learning rate, temperature, the text), the per-update histories ``info["history"][name]``
    and the held-out losses the script measured, ``info["held_out"][name]``.
    """
    from ..models.config import DecoderConfig

    stored = _stored()
    models = {}
    for name in STUDENTS:
        model = Decoder(DecoderConfig(**stored["config"]))
        model.load_state_dict(stored["weights"][name])
        models[name] = model.eval()
    return models, dict(stored["info"])
