"""Complex numbers and FFT (issue #30): a 2^20-point complex signal through an
elementwise phase, an FFT round trip with a spectral product, and |.|^2 summed; value
and gradient with respect to the signal and the phase, eager, paired round by round with
torch's complex autograd (CPU, eager) at one and at two threads. Target: <= 1.2x torch.

    python -m pytest benchmarks/test_complex_fft.py --benchmark-json=complex.json

jax.jit of the same function is timed beside it where jax is installed (jax's own
compiled graph, for reference).
"""
import numpy as np
import pytest

import autotape as at
from conftest import run_paired

N = 1 << 20
RNG = np.random.default_rng(0)
SIGNAL = RNG.standard_normal(N) + 1j * RNG.standard_normal(N)
PHASE = RNG.standard_normal(N)


def ours():
    z = at.tensor(SIGNAL, requires_grad=True)
    p = at.tensor(PHASE, requires_grad=True)
    w = z * at.exp(1j * p)
    spectrum = at.fft.fft(w)
    back = at.fft.ifft(spectrum * spectrum)
    loss = (abs(back) ** 2).sum()
    return at.grad(loss, [z, p])


def torch_step(torch):
    def step():
        z = torch.tensor(SIGNAL, requires_grad=True)
        p = torch.tensor(PHASE, requires_grad=True)
        w = z * torch.exp(1j * p)
        spectrum = torch.fft.fft(w)
        back = torch.fft.ifft(spectrum * spectrum)
        loss = (back.abs() ** 2).sum()
        return torch.autograd.grad(loss, [z, p])
    return step


@pytest.mark.parametrize("threads", [1, 2])
def test_round_trip_paired_with_torch(benchmark, torch, threads):
    torch.set_num_threads(threads)
    at.set_num_threads(threads)
    theirs = torch_step(torch)
    mine, reference = ours(), theirs()
    # torch's gradient of a real loss wrt a complex leaf is the same convention
    np.testing.assert_allclose(mine[0].numpy(), reference[0].numpy(), rtol=1e-9, atol=1e-6)
    np.testing.assert_allclose(mine[1].numpy(), reference[1].numpy(), rtol=1e-9, atol=1e-6)
    benchmark.group = f"complex elementwise + FFT round trip, 2^20 points, {threads} thread(s)"
    run_paired(benchmark, ours, theirs, "autotape_over_torch", rounds=40)
    torch.set_num_threads(1)


def test_round_trip_jax_jit(benchmark, jax):
    import jax.numpy as jnp

    def loss(z, p):
        w = z * jnp.exp(1j * p)
        spectrum = jnp.fft.fft(w)
        back = jnp.fft.ifft(spectrum * spectrum)
        return jnp.sum(jnp.abs(back) ** 2)
    grad = jax.jit(jax.grad(loss, argnums=(0, 1)))
    z, p = jnp.asarray(SIGNAL), jnp.asarray(PHASE)
    jax_z, jax_p = grad(z, p)
    mine = ours()
    # jax's gradient wrt a complex argument is the conjugate of torch's (and autotape's)
    np.testing.assert_allclose(np.conj(np.asarray(jax_z)), mine[0].numpy(), rtol=1e-9,
                               atol=1e-6)
    benchmark.group = "complex elementwise + FFT round trip, 2^20 points, 1 thread(s)"
    run_paired(benchmark, ours, lambda: [a.block_until_ready() for a in grad(z, p)],
               "autotape_over_jax_jit", rounds=40)
