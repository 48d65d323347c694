//! The fully-connected layer every built-in network uses: `y = x · Wᵀ + b`, with `W` stored as
//! `[out, in]` (PyTorch's layout, which checkpoints and parameter blocks follow).

use candle_core::{Result, Tensor};

/// `x · Wᵀ + b` for a batch `x` of `[batch, in]`, a weight `w` of `[out, in]` and a bias `b` of
/// `[out]`, computed as `(W · xᵀ)ᵀ + b`.
///
/// Why that order: written as `x.matmul(wᵀ)`, the backward pass yields `W`'s gradient as the
/// transpose of a `[in, out]` product, and candle accumulates it into the gradient store by an
/// element-wise add that reads it with a stride of a whole row: on the CPU that add cost more
/// than the layer's matrix products (a 784-1024-1024-10 MLP's step took about twice as long at
/// batch 32, five times at batch 1). Here `W`'s gradient is the product `dyᵀ · x` itself,
/// already in `W`'s layout; only the small `[batch, out]` activations are ever transposed.
pub fn linear(x: &Tensor, w: &Tensor, b: &Tensor) -> Result<Tensor> {
    w.matmul(&x.t()?)?.t()?.broadcast_add(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    fn layer() -> (Tensor, Var, Var) {
        let d = Device::Cpu;
        let x = Tensor::arange(0f32, 15.0, &d)
            .and_then(|t| t.reshape((3, 5)))
            .and_then(|t| t / 7.0)
            .unwrap();
        let w = Var::from_tensor(
            &Tensor::arange(-10f32, 10.0, &d)
                .and_then(|t| t.reshape((4, 5)))
                .and_then(|t| t / 11.0)
                .unwrap(),
        )
        .unwrap();
        let b = Var::from_tensor(&Tensor::new(&[0.5f32, -1.0, 0.25, 2.0], &d).unwrap()).unwrap();
        (x, w, b)
    }

    #[test]
    fn the_layer_is_x_times_w_transposed_plus_b_and_so_is_its_gradient() {
        let (x, w, b) = layer();
        let ours = linear(&x, w.as_tensor(), b.as_tensor()).unwrap();
        let reference = x
            .matmul(&w.as_tensor().t().unwrap())
            .and_then(|y| y.broadcast_add(b.as_tensor()))
            .unwrap();
        assert_eq!(ours.dims(), &[3, 4]);
        let diff = |a: &Tensor, r: &Tensor| -> f32 {
            (a - r)
                .and_then(|d| d.abs())
                .and_then(|d| d.max_all())
                .and_then(|d| d.to_scalar::<f32>())
                .unwrap()
        };
        assert!(diff(&ours, &reference) < 1e-5);
        let loss = |y: &Tensor| y.sqr().and_then(|s| s.sum_all()).unwrap();
        let (g_ours, g_ref) = (
            loss(&ours).backward().unwrap(),
            loss(&reference).backward().unwrap(),
        );
        for var in [&w, &b] {
            let (a, r) = (
                g_ours.get(var.as_tensor()).unwrap(),
                g_ref.get(var.as_tensor()).unwrap(),
            );
            assert_eq!(a.dims(), var.dims());
            assert!(diff(a, r) < 1e-4, "gradients differ by {}", diff(a, r));
        }
    }
}
