"""Fast forward and hand-written backward pass of a σ = identity linear transformer on a batch.

For σ = identity every layer of Ahn et al. eq. (4) multiplies all columns by one matrix,
Z_{ℓ+1} = K_ℓ Z_ℓ with K_ℓ = I + (1/n) Σ_h P_{ℓh} C_ℓ Q_{ℓh} and C_ℓ = Z_ℓ M Z_ℓᵀ, so a prompt
enters only through C_0 = Σ_{i≤n} z_i z_iᵀ and the query column z_q, and

    C_{ℓ+1} = K_ℓ C_ℓ K_ℓᵀ,   z_{ℓ+1} = K_ℓ z_ℓ,   prediction = −[z_L]_{d+1}.

The cost per prompt is O(L d³), independent of n. On CPU, XLA runs batched d×d matmuls (and the
reductions autodiff makes of broadcasts) slowly, so this module stores the batch on the *last*
axis, writes every per-prompt product as a sum of d broadcast products (one fused elementwise
loop), turns every product with a shared weight into one GEMM (the heads of a layer fold into a
single (d+1)²×(d+1)² matrix), and supplies the backward pass by hand (``jax.custom_vjp``), so
the parameter gradients are GEMMs over the batch too. ``tests/test_linear_transformer.py``
checks values and gradients against plain autodiff of the direct form.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

_barrier = jax.lax.optimization_barrier


def _bmm(a, b):
    """Per-prompt product: (i, k, B) × (k, j, B) → (i, j, B)."""
    out = a[:, 0, None, :] * b[None, 0, :, :]
    for k in range(1, a.shape[1]):
        out = out + a[:, k, None, :] * b[None, k, :, :]
    return _barrier(out)


def _bmv(a, v):
    """Per-prompt matrix-vector product: (i, k, B) × (k, B) → (i, B)."""
    out = a[:, 0, :] * v[0]
    for k in range(1, a.shape[1]):
        out = out + a[:, k, :] * v[k]
    return out


def _bmtv(a, v):
    """Per-prompt (transposed matrix)-vector product: (k, i, B)ᵀ × (k, B) → (i, B)."""
    out = a[0, :, :] * v[0]
    for k in range(1, a.shape[0]):
        out = out + a[k, :, :] * v[k]
    return out


def _t(a):
    return jnp.swapaxes(a, 0, 1)


def _layer_matrices(P, Q):
    """W_ℓ[(i,j),(k,m)] = Σ_h P_h[i,k] Q_h[m,j], so vec G = W vec C.  Shape (L, D², D²)."""
    L, _, D, _ = P.shape
    return jnp.einsum("lhik,lhmj->lijkm", P, Q).reshape(L, D * D, D * D)


def _forward(P, Q, active, C0, zq, n):
    D, _, B = C0.shape
    L = P.shape[0]
    W = _layer_matrices(P, Q)
    eye = jnp.eye(D, dtype=C0.dtype)[:, :, None]
    Cs, Ks, zs = [], [], []
    C, z = C0, zq
    for layer in range(L - 1):
        G = (W[layer] @ C.reshape(D * D, B)).reshape(D, D, B)
        K = eye + (active[layer] / n) * G
        Cs.append(C), Ks.append(K), zs.append(z)
        z = _bmv(K, z)
        C = _bmm(_bmm(K, C), _t(K))
    # last layer: only the last row of K_{L-1} reaches the prediction
    g_last = W[L - 1, (D - 1) * D :] @ C.reshape(D * D, B)  # row d+1 of G_{L-1}: (D, B)
    Cs.append(C), zs.append(z)
    pred = -(z[-1] + (active[L - 1] / n) * jnp.sum(g_last * z, axis=0))
    return pred, (W, Cs, Ks, zs)


@jax.custom_vjp
def gram_predict(P, Q, active, C0, zq, n):
    """Predictions −[Z_L]_{d+1,n+1} for a batch given as C0 (D, D, B), zq (D, B).

    P, Q: (L, H, D, D) layer weights; active: (L,) multipliers (1 = layer applied, 0 = skipped).
    """
    return _forward(P, Q, active, C0, zq, n)[0]


def _fwd(P, Q, active, C0, zq, n):
    pred, res = _forward(P, Q, active, C0, zq, n)
    return pred, (P, Q, active, n, res)


def _adjoints(saved, pbar):
    """Reverse sweep. Returns, per layer, Ḡ_ℓ = ∂(Σ_b p̄_b pred_b)/∂G_ℓ per prompt (scaled by the
    layer's activity / n, shape (D, D, B)), and the cotangents of C_0 and z_q."""
    P, Q, active, n, (W, Cs, Ks, zs) = saved
    L, H, D, _ = P.shape
    B = pbar.shape[0]
    Gbars = []
    # last layer: pred = −(z_d + (a/n) Σ_j G[d, j] z_j), G[d, :] = W[rows of d] vec C
    C, z = Cs[-1], zs[-1]
    a = active[L - 1] / n
    W_last = W[L - 1, (D - 1) * D :]
    g_last = W_last @ C.reshape(D * D, B)
    gbar = -(a * pbar)[None, :] * z  # ∂/∂G[d, j]: (D, B)
    zbar = (-(a * pbar)[None, :] * g_last).at[-1].add(-pbar)
    Gbars.append(jnp.zeros((D, D, B), gbar.dtype).at[-1].set(gbar))
    Cbar = (W_last.T @ gbar).reshape(D, D, B)
    Cbar = 0.5 * (Cbar + _t(Cbar))  # C is symmetric: keep its cotangent symmetric
    for layer in reversed(range(L - 1)):
        C, K, z = Cs[layer], Ks[layer], zs[layer]
        # C_{l+1} = K C Kᵀ with C, C̄ symmetric: d⟨C̄, K C Kᵀ⟩/dK = 2 C̄ K C
        Kbar = zbar[:, None, :] * z[None, :, :] + 2.0 * _bmm(Cbar, _bmm(K, C))
        Cbar = _bmm(_bmm(_t(K), Cbar), K)
        zbar = _bmtv(K, zbar)
        Gbar = (active[layer] / n) * Kbar
        Gbars.append(Gbar)
        Cbar_direct = (W[layer].T @ Gbar.reshape(D * D, B)).reshape(D, D, B)
        Cbar = Cbar + 0.5 * (Cbar_direct + _t(Cbar_direct))
    return Gbars[::-1], Cbar, zbar


def _bwd(saved, pbar):
    P, Q, active, n, (W, Cs, Ks, zs) = saved
    L, H, D, _ = P.shape
    B = pbar.shape[0]
    Gbars, Cbar, zbar = _adjoints(saved, pbar)
    # dW_ℓ = Σ_b vec Ḡ_b vec C_bᵀ: one GEMM over the batch per layer
    dW = jnp.stack([Gb.reshape(D * D, B) @ C.reshape(D * D, B).T for Gb, C in zip(Gbars, Cs)])
    dW = dW.reshape(L, D, D, D, D)  # [l, i, j, k, m]
    Pbar = jnp.einsum("lijkm,lhmj->lhik", dW, Q)
    Qbar = jnp.einsum("lijkm,lhik->lhmj", dW, P)
    return Pbar, Qbar, jnp.zeros_like(active), Cbar, zbar, jnp.zeros_like(n)


gram_predict.defvjp(_fwd, _bwd)


def gram_jacobian(P, Q, active, C0, zq, n):
    """Predictions and their per-prompt derivatives ∂pred_b/∂P, ∂pred_b/∂Q, each of shape
    (L, H, D, D, B), from one forward and one reverse sweep (the sweep is linear in p̄ and
    prompts are independent, so p̄ = 1 yields every prompt's adjoint at once)."""
    pred, res = _forward(P, Q, active, C0, zq, n)
    saved = (P, Q, active, n, res)
    Gbars, _, _ = _adjoints(saved, jnp.ones_like(pred))
    Cs = res[1]
    L, H, D, _ = P.shape
    B = pred.shape[0]
    dP, dQ = [], []
    for layer in range(L):
        C, Gb = Cs[layer], Gbars[layer]
        dP_l, dQ_l = [], []
        for h in range(H):
            # ∂/∂P_h = Ḡ (C Q_h)ᵀ = Ḡ Q_hᵀ C ;  ∂/∂Q_h = (P_h C)ᵀ Ḡ = C P_hᵀ Ḡ   (C symmetric)
            QtC = (Q[layer, h].T @ C.reshape(D, D * B)).reshape(D, D, B)
            PC = (P[layer, h] @ C.reshape(D, D * B)).reshape(D, D, B)
            dP_l.append(_bmm(Gb, QtC))
            dQ_l.append(_bmm(_t(PC), Gb))
        dP.append(jnp.stack(dP_l)), dQ.append(jnp.stack(dQ_l))
    return pred, jnp.stack(dP), jnp.stack(dQ)
