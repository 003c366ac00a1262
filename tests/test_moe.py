"""Unit tests of mlbook.architectures.moe: routing, routed vs dense MoE, balancing, capacity."""

import math

import pytest
import torch

from mlbook.architectures import moe

TOL = {torch.float64: 1e-12, torch.float32: 1e-5}
DTYPES = [torch.float64, torch.float32]


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def setup_layer(T=64, d=8, h=12, N=6, dtype=torch.float64, seed=0):
    g = gen(seed)
    params = moe.init_experts(N, d, h, generator=g, dtype=dtype)
    x = torch.randn(T, d, generator=g, dtype=dtype)
    return x, params


# --- routing (eqs. 27.1-27.2) ---------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", [1, 2, 4])
def test_topk_route_matches_torch(dtype, k):
    logits = 2.0 * torch.randn(50, 6, generator=gen(1), dtype=dtype)
    rt = moe.topk_route(logits, k)
    torch.testing.assert_close(rt.probs, torch.softmax(logits, -1), atol=TOL[dtype], rtol=0)
    assert torch.equal(rt.idx, torch.topk(logits, k, dim=-1).indices)
    # Mixtral gates are a softmax over the selected logits.
    torch.testing.assert_close(
        rt.gates, torch.softmax(logits.gather(1, rt.idx), -1), atol=TOL[dtype], rtol=0
    )
    raw = moe.topk_route(logits, k, renormalize=False)
    torch.testing.assert_close(
        raw.gates, torch.softmax(logits, -1).gather(1, raw.idx), atol=TOL[dtype], rtol=0
    )


def test_bias_changes_selection_not_gates():
    logits = torch.randn(200, 8, generator=gen(2), dtype=torch.float64)
    bias = torch.linspace(-0.2, 0.2, 8, dtype=torch.float64)
    rt = moe.topk_route(logits, 2, bias=bias)
    p = torch.softmax(logits, -1)
    assert torch.equal(rt.idx, torch.topk(p + bias, 2, dim=-1).indices)
    assert not torch.equal(rt.idx, torch.topk(p, 2, dim=-1).indices)
    sel = p.gather(1, rt.idx)
    torch.testing.assert_close(rt.gates, sel / sel.sum(1, keepdim=True), atol=1e-15, rtol=0)


def test_gate_matrix():
    logits = torch.randn(30, 5, generator=gen(3), dtype=torch.float64)
    rt = moe.topk_route(logits, 2)
    G = moe.gate_matrix(rt.idx, rt.gates, 5)
    torch.testing.assert_close(G.sum(1), torch.ones(30, dtype=torch.float64), atol=1e-15, rtol=0)
    assert int((G > 0).sum()) == 60
    torch.testing.assert_close(G.gather(1, rt.idx), rt.gates, atol=0, rtol=0)


# --- the layer -----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k,renorm", [(1, False), (2, True), (6, True)])
def test_routed_matches_dense(dtype, k, renorm):
    x, P = setup_layer(dtype=dtype)
    rt = moe.topk_route(x @ P["W_r"], k, renormalize=renorm)
    y_r = moe.moe_routed(x, rt.idx, rt.gates, P["W"], P["V"], P["W2"])
    y_d = moe.moe_dense(x, moe.gate_matrix(rt.idx, rt.gates, 6), P["W"], P["V"], P["W2"])
    torch.testing.assert_close(y_r, y_d, atol=TOL[dtype], rtol=0)


def test_dense_matches_per_token_loop():
    # An independent, even more literal reference: token by token, expert by expert.
    x, P = setup_layer(T=10)
    rt = moe.topk_route(x @ P["W_r"], 2)
    y = moe.moe_dense(x, moe.gate_matrix(rt.idx, rt.gates, 6), P["W"], P["V"], P["W2"])
    for t in range(10):
        ref = torch.zeros(8, dtype=torch.float64)
        for j in range(2):
            i = int(rt.idx[t, j])
            u = torch.nn.functional.silu(x[t] @ P["W"][i]) * (x[t] @ P["V"][i])
            ref += rt.gates[t, j] * (u @ P["W2"][i])
        torch.testing.assert_close(y[t], ref, atol=1e-12, rtol=0)


def test_routed_gradients_match_dense():
    x, P = setup_layer()
    grads = []
    for impl in ("routed", "dense"):
        leaves = {n: p.clone().requires_grad_(True) for n, p in P.items()}
        rt = moe.topk_route(x @ leaves["W_r"], 2)
        if impl == "routed":
            y = moe.moe_routed(x, rt.idx, rt.gates, leaves["W"], leaves["V"], leaves["W2"])
        else:
            y = moe.moe_dense(
                x, moe.gate_matrix(rt.idx, rt.gates, 6), leaves["W"], leaves["V"], leaves["W2"]
            )
        (y**2).sum().backward()
        grads.append(torch.cat([leaves[n].grad.reshape(-1) for n in P]))
    torch.testing.assert_close(grads[0], grads[1], atol=1e-11, rtol=0)


def test_routed_with_capacity_matches_masked_dense():
    x, P = setup_layer()
    rt = moe.topk_route(x @ P["W_r"] + torch.tensor([2.0, 0, 0, 0, 0, 0]), 2)
    keep = moe.capacity_mask(rt.idx, 6, moe.expert_capacity(64, 6, 2, 1.0))
    assert (~keep).any()
    y = moe.moe_routed(x, rt.idx, rt.gates, P["W"], P["V"], P["W2"], keep=keep)
    G = moe.gate_matrix(rt.idx, rt.gates * keep, 6)
    torch.testing.assert_close(y, moe.moe_dense(x, G, P["W"], P["V"], P["W2"]), atol=1e-12, rtol=0)


# --- balancing (eq. 27.3) ------------------------------------------------------------------------


def test_balancing_loss_closed_forms():
    N, T = 8, 40
    probs = torch.full((T, N), 1 / N, dtype=torch.float64)
    idx = torch.arange(T).remainder(N)[:, None]
    assert moe.load_balancing_loss(probs, idx, 0.01).item() == pytest.approx(0.01, abs=1e-15)
    probs = torch.zeros(T, N, dtype=torch.float64)
    probs[:, 2] = 1
    idx = torch.full((T, 1), 2)
    assert moe.load_balancing_loss(probs, idx, 0.01).item() == pytest.approx(0.08, abs=1e-15)
    # Hand computation on a tiny case: f = (2/3, 1/3), P = mean of rows.
    probs = torch.tensor([[0.7, 0.3], [0.6, 0.4], [0.2, 0.8]], dtype=torch.float64)
    idx = torch.tensor([[0], [0], [1]])
    P = probs.mean(0)
    expected = 2 * (2 / 3 * P[0] + 1 / 3 * P[1])
    torch.testing.assert_close(moe.load_balancing_loss(probs, idx), expected, atol=1e-15, rtol=0)


@pytest.mark.parametrize("k", [1, 2])
def test_balancing_grad_matches_autograd(k):
    logits = torch.randn(33, 7, generator=gen(4), dtype=torch.float64)
    r = logits.clone().requires_grad_(True)
    rt = moe.topk_route(r, k)
    moe.load_balancing_loss(rt.probs, rt.idx, 0.3).backward()
    f = moe.expert_load(rt.idx, 7)
    torch.testing.assert_close(
        moe.load_balancing_loss_grad(logits, f, 0.3), r.grad, atol=1e-15, rtol=0
    )


def test_expert_load_and_mean_prob():
    idx = torch.tensor([[0, 1], [0, 2], [0, 1]])
    torch.testing.assert_close(
        moe.expert_load(idx, 4), torch.tensor([0.5, 1 / 3, 1 / 6, 0.0], dtype=torch.float64)
    )
    probs = torch.tensor([[0.5, 0.5], [1.0, 0.0]])
    torch.testing.assert_close(moe.mean_router_prob(probs), torch.tensor([0.75, 0.25]))


# --- capacity ------------------------------------------------------------------------------------


def test_expert_capacity():
    assert moe.expert_capacity(2048, 8, 2, 1.0) == 512
    assert moe.expert_capacity(100, 8, 1, 1.25) == math.ceil(1.25 * 100 / 8)
    assert moe.expert_capacity(10, 3, 1, 1.0) == 4


@pytest.mark.parametrize("capacity", [0, 1, 5, 17, 1000])
def test_capacity_mask_matches_loop_and_formula(capacity):
    idx = torch.rand(120, 6, generator=gen(5)).topk(2, dim=1).indices
    keep = moe.capacity_mask(idx, 6, capacity)
    assert torch.equal(keep, moe.capacity_mask_naive(idx, 6, capacity))
    counts = torch.bincount(idx.reshape(-1), minlength=6)
    assert int((~keep).sum()) == int((counts - capacity).clamp(min=0).sum())
    kept_counts = torch.bincount(idx[keep], minlength=6)
    assert int(kept_counts.max()) <= capacity


def test_capacity_priority_first_choices_first():
    # Expert 0 is every token's second choice and token 2's first: token 2 wins the one slot.
    idx = torch.tensor([[1, 0], [2, 0], [0, 1]])
    keep = moe.capacity_mask(idx, 3, 1)
    assert keep[2, 0] and not keep[0, 1] and not keep[1, 1]


# --- bias balancing (eq. 27.5) -------------------------------------------------------------------


def test_bias_update_rule_and_balancing():
    b = torch.zeros(4, dtype=torch.float64)
    f = torch.tensor([0.5, 0.25, 0.15, 0.10], dtype=torch.float64)
    torch.testing.assert_close(
        moe.bias_update(b, f, 0.1), torch.tensor([-0.1, 0.0, 0.1, 0.1], dtype=torch.float64)
    )
    logits = torch.randn(1000, 4, generator=gen(6), dtype=torch.float64) + torch.tensor(
        [1.0, 0.3, 0.0, 0.0], dtype=torch.float64
    )
    b = torch.zeros(4, dtype=torch.float64)
    for _ in range(400):
        f = moe.expert_load(moe.topk_route(logits, 1, bias=b).idx, 4)
        b = moe.bias_update(b, f, 2e-3)
    assert float(f.max()) < 0.3 < float(moe.expert_load(moe.topk_route(logits, 1).idx, 4).max())


# --- parameters ----------------------------------------------------------------------------------


def test_mixtral_counts():
    c = moe.parameter_budget(moe.MoEConfig())
    assert round(c["total"] / 1e9, 1) == 46.7
    assert round(c["active"] / 1e9, 1) == 12.9
    tied = moe.parameter_budget(moe.MoEConfig(tied_embeddings=True))
    assert c["total"] - tied["total"] == 32000 * 4096


def test_counts_match_transformers_small():
    transformers = pytest.importorskip("transformers")
    cfg = moe.MoEConfig(
        vocab=97,
        d_model=24,
        n_layers=3,
        n_heads=6,
        n_kv_heads=2,
        head_dim=4,
        d_ff=40,
        n_experts=4,
        top_k=2,
    )
    hf = transformers.MixtralConfig(
        vocab_size=97,
        hidden_size=24,
        intermediate_size=40,
        num_hidden_layers=3,
        num_attention_heads=6,
        num_key_value_heads=2,
        head_dim=4,
        num_local_experts=4,
        num_experts_per_tok=2,
        tie_word_embeddings=False,
    )
    with torch.device("meta"):
        model = transformers.MixtralForCausalLM(hf)
    assert moe.parameter_budget(cfg)["total"] == sum(p.numel() for p in model.parameters())


# --- training ------------------------------------------------------------------------------------


def test_train_toy_moe_short_run():
    out = moe.train_toy_moe(0.1, steps=4, batch=32, n_tokens=64)
    assert out["load"].shape == (4, 8)
    assert abs(out["load"].sum(1) - 1).max() < 1e-12
    assert out["aux"].shape == out["task"].shape == out["z"].shape == (4,)
    # No offset pushes the router: at the first step the tokens go to several experts.
    assert (out["load"][0] > 0).sum() >= 3
    assert 0 < out["aux"][0] < 8 and (out["task"] > 0).all()


def test_router_collapses_without_a_push_and_the_balancing_loss_prevents_it():
    runs = {a: moe.train_toy_moe(a, seed=1) for a in (0.0, 0.1)}
    assert runs[0.0]["load"][0].max() < 0.35  # spread over the experts at the start
    assert runs[0.0]["load"][-50:].mean(0).max() > 0.9  # collapsed onto one expert
    assert runs[0.1]["load"][-50:].mean(0).max() < 0.2  # balanced (1/N = 0.125)


# --- bad input -----------------------------------------------------------------------------------


def test_bad_input_raises():
    x, P = setup_layer()
    logits = x @ P["W_r"]
    rt = moe.topk_route(logits, 2)
    with pytest.raises(TypeError, match="logits must be a floating-point tensor"):
        moe.topk_route(logits.long(), 1)
    with pytest.raises(ValueError, match=r"k must be in \[1, 6\]"):
        moe.topk_route(logits, 7)
    with pytest.raises(ValueError, match="logits must have 2 axes"):
        moe.topk_route(logits[0], 1)
    with pytest.raises(ValueError, match="idx must hold indices"):
        moe.gate_matrix(rt.idx, rt.gates, 3)
    with pytest.raises(TypeError, match="idx must be an integer tensor"):
        moe.gate_matrix(rt.idx.double(), rt.gates, 6)
    with pytest.raises(TypeError, match="idx must be a torch.Tensor"):
        moe.load_balancing_loss(rt.probs, rt.idx.tolist(), 1.0)
    with pytest.raises(ValueError, match="n_experts must be a positive int"):
        moe.init_experts(0, 4, 4)
    with pytest.raises(TypeError, match="keep must be a bool tensor"):
        moe.moe_routed(x, rt.idx, rt.gates, P["W"], P["V"], P["W2"], keep=rt.idx)
    with pytest.raises(ValueError, match="alpha must be a finite number"):
        moe.load_balancing_loss(rt.probs, rt.idx, -1.0)
    with pytest.raises(ValueError, match="capacity_factor must be a finite number"):
        moe.expert_capacity(10, 4, 1, 0.0)
    with pytest.raises(ValueError, match="n_tokens must be a positive int"):
        moe.expert_capacity(0, 4, 1, 1.0)
    with pytest.raises(ValueError, match=r"capacity must be in \[0, inf\]"):
        moe.capacity_mask(rt.idx, 6, -1)
    with pytest.raises(TypeError, match="capacity must be an int"):
        moe.capacity_mask_naive(rt.idx, 6, 1.5)
    with pytest.raises(ValueError, match="eta must be a finite number"):
        moe.bias_update(torch.zeros(6), torch.zeros(6), 0.0)
    with pytest.raises(ValueError, match=r"top_k must be in \[1, 8\]"):
        moe.MoEConfig(top_k=9)
    with pytest.raises(ValueError, match="n_kv_heads=8 must divide n_heads=30"):
        moe.MoEConfig(n_heads=30)
    with pytest.raises(ValueError, match="d_model must be a positive int"):
        moe.MoEConfig(d_model=0)
    with pytest.raises(ValueError, match="spread must be a finite number"):
        moe.toy_task(10, 4, spread=0.0)
    with pytest.raises(ValueError, match="alpha must be a finite number"):
        moe.train_toy_moe(-0.1, steps=1)
    with pytest.raises(ValueError, match=r"batch must be in \[1, 50\]"):
        moe.train_toy_moe(0.1, steps=1, batch=100, n_tokens=50)


def test_shape_mismatches_that_would_broadcast_or_drop_tokens_raise():
    x, P = setup_layer()
    logits = x @ P["W_r"]
    rt = moe.topk_route(logits, 2)
    G = moe.gate_matrix(rt.idx, rt.gates, 6)
    with pytest.raises(ValueError, match=r"bias must have shape \(6\)"):
        moe.topk_route(logits, 1, bias=torch.zeros(1, dtype=torch.float64))  # would broadcast
    with pytest.raises(ValueError, match="gates and idx must have the same shape"):
        moe.gate_matrix(rt.idx, rt.gates[:, :1], 6)
    with pytest.raises(ValueError, match=r"G must have shape \(64, 6\)"):
        moe.moe_dense(x, G[:1], P["W"], P["V"], P["W2"])  # one row would broadcast
    with pytest.raises(ValueError, match=r"idx must have shape \(64, \*\)"):
        moe.moe_routed(x, rt.idx[:10], rt.gates[:10], P["W"], P["V"], P["W2"])  # tokens dropped
    with pytest.raises(ValueError, match="idx must hold indices"):
        moe.moe_routed(x, rt.idx + 6, rt.gates, P["W"], P["V"], P["W2"])  # experts skipped
    with pytest.raises(ValueError, match="keep and idx must have the same shape"):
        keep = torch.ones(3, 2, dtype=torch.bool)
        moe.moe_routed(x, rt.idx, rt.gates, P["W"], P["V"], P["W2"], keep=keep)
    with pytest.raises(ValueError, match=r"idx must have shape \(5, \*\)"):
        moe.load_balancing_loss(rt.probs[:5], rt.idx, 1.0)
    with pytest.raises(ValueError, match=r"f must have shape \(6\)"):
        moe.load_balancing_loss_grad(logits, torch.zeros(1, dtype=torch.float64))
    with pytest.raises(ValueError, match="f and bias must have the same shape"):
        moe.bias_update(torch.zeros(6), torch.zeros(1), 0.1)


def test_gate_matrix_refuses_an_expert_named_twice_for_one_token():
    # Before: scatter kept only one of the two gates of expert 1, silently.
    idx = torch.tensor([[0, 1], [1, 1]])
    gates = torch.tensor([[0.6, 0.4], [0.5, 0.5]], dtype=torch.float64)
    with pytest.raises(ValueError, match="idx must hold distinct entries .* row 1 repeats"):
        moe.gate_matrix(idx, gates, 3)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: 1.8 * p, "probs must sum to one along dim 1, off by up to 0.8"),
        (lambda p: torch.log(p), "probs must be non-negative"),  # raw logits
        (lambda p: p + torch.tensor([-0.1, 0.1, 0, 0, 0, 0]), "probs must be non-negative"),
    ],
)
def test_balancing_loss_refuses_router_probabilities_that_are_not_distributions(make, message):
    # Before: each of these returned a number (1.8 times the loss, a negative "loss", ...).
    logits = torch.randn(20, 6, generator=gen(7), dtype=torch.float64)
    rt = moe.topk_route(logits, 2)
    with pytest.raises(ValueError, match=message):
        moe.load_balancing_loss(make(rt.probs), rt.idx)


def test_gate_sums_state_the_normalisation():
    logits = torch.randn(40, 8, generator=gen(8), dtype=torch.float64)
    mixtral = moe.topk_route(logits, 2)
    torch.testing.assert_close(
        mixtral.gates.sum(1), torch.ones(40, dtype=torch.float64), atol=1e-15, rtol=0
    )
    switch = moe.topk_route(logits, 2, renormalize=False)
    p = torch.softmax(logits, -1)
    torch.testing.assert_close(
        switch.gates.sum(1), p.gather(1, switch.idx).sum(1), atol=1e-15, rtol=0
    )
    assert bool((switch.gates.sum(1) < 1).all())


# --- shared and fine-grained experts -------------------------------------------------------------


def swiglu_literal(x, W, V, W2):
    """One SwiGLU expert written out: (silu(x W) * (x V)) W2."""
    return (torch.nn.functional.silu(x @ W) * (x @ V)) @ W2


@pytest.mark.parametrize("m", [1, 2, 3, 6])
def test_segments_sum_to_their_expert(m):
    x, P = setup_layer(T=20, h=12)
    Wf, Vf, W2f = moe.segment_experts(P["W"], P["V"], P["W2"], m)
    assert Wf.shape == Vf.shape == (6 * m, 8, 12 // m) and W2f.shape == (6 * m, 12 // m, 8)
    for i in range(6):
        pieces = sum(
            swiglu_literal(x, Wf[i * m + j], Vf[i * m + j], W2f[i * m + j]) for j in range(m)
        )
        whole = swiglu_literal(x, P["W"][i], P["V"][i], P["W2"][i])
        torch.testing.assert_close(pieces, whole, atol=1e-13, rtol=0)
        j, w = m - 1, 12 // m  # the last segment holds hidden units (m - 1) h/m, ..., h - 1
        assert torch.equal(Wf[i * m + j], P["W"][i][:, j * w : (j + 1) * w])
        assert torch.equal(W2f[i * m + j], P["W2"][i][j * w : (j + 1) * w])


def test_fine_grained_routing_reproduces_coarse_routing():
    x, P = setup_layer(T=30)
    rt = moe.topk_route(x @ P["W_r"], 2)
    m = 4
    Wf, Vf, W2f = moe.segment_experts(P["W"], P["V"], P["W2"], m)
    idx_f = (rt.idx[:, :, None] * m + torch.arange(m)).reshape(30, -1)  # (T, 2 m)
    gates_f = rt.gates[:, :, None].expand(-1, -1, m).reshape(30, -1)
    coarse = moe.moe_routed(x, rt.idx, rt.gates, P["W"], P["V"], P["W2"])
    fine = moe.moe_routed(x, idx_f, gates_f, Wf, Vf, W2f)
    torch.testing.assert_close(fine, coarse, atol=1e-12, rtol=0)


def test_shared_experts_routed_vs_dense_vs_literal():
    x, P = setup_layer(T=16)
    shared = moe.init_experts(2, 8, 12, generator=gen(9), dtype=torch.float64)
    rt = moe.topk_route(x @ P["W_r"], 2)
    y = moe.moe_shared(x, shared, rt.idx, rt.gates, P["W"], P["V"], P["W2"])
    G = moe.gate_matrix(rt.idx, rt.gates, 6)
    torch.testing.assert_close(
        y, moe.moe_shared_dense(x, shared, G, P["W"], P["V"], P["W2"]), atol=1e-12, rtol=0
    )
    for t in range(16):
        ref = sum(
            swiglu_literal(x[t], shared["W"][s], shared["V"][s], shared["W2"][s]) for s in range(2)
        )
        for j in range(2):
            i = int(rt.idx[t, j])
            ref = ref + rt.gates[t, j] * swiglu_literal(x[t], P["W"][i], P["V"][i], P["W2"][i])
        torch.testing.assert_close(y[t], ref, atol=1e-12, rtol=0)


def test_expert_layer_budget_keeps_parameters_and_flops_under_segmentation():
    d, h = 64, 96
    coarse = moe.expert_layer_budget(d, h, 16, 2)
    fine = moe.expert_layer_budget(d, h // 4, 64, 8)
    shared = moe.expert_layer_budget(d, h // 4, 63, 7, n_shared=1)
    assert coarse["experts"] == fine["experts"] == shared["experts"] == 3 * d * h * 16
    expert_active = 3 * d * h * 2
    for b, n in ((coarse, 16), (fine, 64), (shared, 63)):
        assert b["active"] == expert_active + d * n and b["flops"] == 2 * b["active"]
    assert (coarse["combinations"], fine["combinations"]) == (120, math.comb(64, 8))


def test_expert_layer_budget_matches_a_deepseek_v3_style_model():
    transformers = pytest.importorskip("transformers")
    hf = transformers.DeepseekV3Config(
        vocab_size=50,
        hidden_size=32,
        intermediate_size=48,
        moe_intermediate_size=8,
        num_hidden_layers=3,
        first_k_dense_replace=1,
        n_routed_experts=8,
        n_shared_experts=2,
        num_experts_per_tok=2,
        n_group=2,
        topk_group=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        q_lora_rank=16,
        kv_lora_rank=8,
        qk_nope_head_dim=8,
        qk_rope_head_dim=4,
        v_head_dim=8,
        head_dim=4,
    )
    with torch.device("meta"):
        model = transformers.DeepseekV3ForCausalLM(hf)
    counted = {"experts": 0, "router": 0}
    for name, p in model.named_parameters():
        if ".mlp.experts." in name or ".mlp.shared_experts." in name:
            counted["experts"] += p.numel()
        elif ".mlp.gate.weight" in name:
            counted["router"] += p.numel()
    b = moe.expert_layer_budget(32, 8, 8, 2, n_shared=2)
    assert counted == {"experts": 2 * b["experts"], "router": 2 * b["router"]}  # 2 MoE layers


# --- expert parallelism --------------------------------------------------------------------------


@pytest.mark.parametrize("n_devices", [1, 2, 3, 6])
def test_expert_parallel_matches_routed_and_counts_its_traffic(n_devices):
    x, P = setup_layer(T=36)
    rt = moe.topk_route(x @ P["W_r"], 2)
    y, sent = moe.expert_parallel_moe(x, rt.idx, rt.gates, P["W"], P["V"], P["W2"], n_devices)
    torch.testing.assert_close(
        y, moe.moe_routed(x, rt.idx, rt.gates, P["W"], P["V"], P["W2"]), atol=1e-12, rtol=0
    )
    per_dev = 36 // n_devices
    assert sent.shape == (n_devices, n_devices)
    assert sent.sum(1).tolist() == [per_dev * 2] * n_devices  # each device sends k per token
    received = torch.bincount((rt.idx // (6 // n_devices)).reshape(-1), minlength=n_devices)
    assert sent.sum(0).tolist() == received.tolist()
    for p_ in range(n_devices):  # literal count of the assignments from p to q
        owners = rt.idx[p_ * per_dev : (p_ + 1) * per_dev] // (6 // n_devices)
        assert sent[p_].tolist() == torch.bincount(owners.reshape(-1), minlength=n_devices).tolist()


def test_expert_parallel_refuses_devices_that_do_not_divide():
    x, P = setup_layer(T=36)
    rt = moe.topk_route(x @ P["W_r"], 2)
    with pytest.raises(ValueError, match="n_devices=4 must divide the number of experts N=6"):
        moe.expert_parallel_moe(x, rt.idx, rt.gates, P["W"], P["V"], P["W2"], 4)
    with pytest.raises(ValueError, match="n_devices=5 must divide the number of tokens T=36"):
        moe.expert_parallel_moe(x, rt.idx, rt.gates, P["W"], P["V"], P["W2"], 5)
    with pytest.raises(ValueError, match="m=5 must divide h=12"):
        moe.segment_experts(P["W"], P["V"], P["W2"], 5)


def test_empty_batches_raise_instead_of_nan():
    with pytest.raises(ValueError, match="idx must not be empty"):
        moe.expert_load(torch.zeros(0, 1, dtype=torch.long), 3)
    with pytest.raises(ValueError, match="probs must not be empty"):
        moe.mean_router_prob(torch.zeros(0, 3))
