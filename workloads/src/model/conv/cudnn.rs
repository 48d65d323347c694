//! The three passes of a convolution on cuDNN: forward, backward to the input (`dx`) and backward
//! to the kernel (`dw`), on candle CUDA tensors.
//!
//! candle runs only the forward pass on cuDNN and differentiates it through its own
//! `conv_transpose2d` kernel and a second forward convolution, which on a GPU made a small CNN's
//! step several times slower than PyTorch's; cuDNN's backward kernels are what PyTorch runs.
//! Every pass names a fixed algorithm and uses FMA math (no TF32), as PyTorch does for fp32 with
//! `allow_tf32 = False` and deterministic algorithms: the choice is the same in every run, so GPU
//! results repeat bit for bit, and no per-call heuristics query is paid.

use super::super::vars::cuda_f32_view;
use candle_core::cuda_backend::cudarc::cudnn::safe::{
    ConvBackwardData, ConvBackwardFilter, ConvForward, Cudnn,
};
use candle_core::cuda_backend::cudarc::cudnn::sys::{
    cudnnConvolutionBwdDataAlgo_t as DataAlgo, cudnnConvolutionBwdFilterAlgo_t as FilterAlgo,
    cudnnConvolutionFwdAlgo_t as FwdAlgo, cudnnConvolutionMode_t, cudnnMathType_t,
    cudnnTensorFormat_t,
};
use candle_core::cuda_backend::cudarc::driver::{CudaSlice, CudaView};
use candle_core::cuda_backend::{CudaDevice, DeviceId};
use candle_core::{CpuStorage, CudaStorage, CustomOp2, Layout, Result, Shape, Tensor};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

thread_local! {
    /// cuDNN handles, one per device and thread (a handle is neither `Send` nor `Sync`), bound
    /// to the device's candle stream so the passes are ordered with candle's own kernels.
    static HANDLES: RefCell<HashMap<DeviceId, Arc<Cudnn>>> = RefCell::new(HashMap::new());
}

/// This thread's cuDNN handle for `dev`.
fn handle(dev: &CudaDevice) -> Result<Arc<Cudnn>> {
    HANDLES.with(|handles| {
        if let Some(h) = handles.borrow().get(&dev.id()) {
            return Ok(h.clone());
        }
        let h = Cudnn::new(dev.cuda_stream())?;
        handles.borrow_mut().insert(dev.id(), h.clone());
        Ok(h)
    })
}

/// One convolution's shapes: input `[n, c, h, w]`, kernel `[k, c, r, s]`, zero padding and stride
/// on both axes, dilation 1, one group.
#[derive(Clone, Copy, Debug)]
struct Geometry {
    x: [usize; 4],
    w: [usize; 4],
    padding: usize,
    stride: usize,
}

impl Geometry {
    fn new(x: &[usize], w: &[usize], padding: usize, stride: usize) -> Result<Geometry> {
        let four = |dims: &[usize], what: &str| -> Result<[usize; 4]> {
            <[usize; 4]>::try_from(dims)
                .map_err(|_| candle_core::Error::Msg(format!("conv2d: {what} {dims:?} is not 4-d")))
        };
        let g = Geometry {
            x: four(x, "input")?,
            w: four(w, "kernel")?,
            padding,
            stride,
        };
        if g.x[1] != g.w[1]
            || stride == 0
            || g.x[2] + 2 * padding < g.w[2]
            || g.x[3] + 2 * padding < g.w[3]
        {
            candle_core::bail!(
                "conv2d: input {:?} and kernel {:?} with padding {padding}, stride {stride}",
                g.x,
                g.w
            );
        }
        Ok(g)
    }

    /// The output's shape `[n, k, p, q]`.
    fn y(&self) -> [usize; 4] {
        let out = |len: usize, k: usize| (len + 2 * self.padding - k) / self.stride + 1;
        [
            self.x[0],
            self.w[0],
            out(self.x[2], self.w[2]),
            out(self.x[3], self.w[3]),
        ]
    }
}

/// Which pass an op runs, with the operands it takes (in `apply_op2` order).
#[derive(Clone, Copy, Debug)]
enum Pass {
    /// `y = x ⋆ w`; operands `(x, w)`.
    Forward,
    /// `dx` from `(dy, w)`.
    BackwardData,
    /// `dw` from `(x, dy)`.
    BackwardFilter,
}

/// One pass on cuDNN as a candle op (CUDA tensors only).
struct CudnnConv {
    pass: Pass,
    geometry: Geometry,
}

/// `x ⋆ w` on cuDNN, differentiable through cuDNN's backward passes. `x`: `[n, c, h, w]`, `w`:
/// `[k, c, r, s]`, both on one CUDA device.
pub(crate) fn conv2d(x: &Tensor, w: &Tensor, padding: usize, stride: usize) -> Result<Tensor> {
    let geometry = Geometry::new(x.dims(), w.dims(), padding, stride)?;
    x.contiguous()?
        .apply_op2(&w.contiguous()?, Differentiable(geometry))
}

/// The forward pass whose backward runs the two backward passes.
struct Differentiable(Geometry);

impl CustomOp2 for Differentiable {
    fn name(&self) -> &'static str {
        "cudnn-conv2d"
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        candle_core::bail!("cudnn-conv2d: the operands are on the CPU")
    }

    fn cuda_fwd(
        &self,
        x: &CudaStorage,
        xl: &Layout,
        w: &CudaStorage,
        wl: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        let op = CudnnConv {
            pass: Pass::Forward,
            geometry: self.0,
        };
        op.cuda_fwd(x, xl, w, wl)
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _: &Tensor,
        dy: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let dy = dy.contiguous()?;
        let pass = |pass, a: &Tensor, b: &Tensor| {
            a.apply_op2_no_bwd(
                b,
                &CudnnConv {
                    pass,
                    geometry: self.0,
                },
            )
        };
        Ok((
            Some(pass(Pass::BackwardData, &dy, w)?),
            Some(pass(Pass::BackwardFilter, &x.contiguous()?, &dy)?),
        ))
    }
}

/// The contiguous f32 elements of a CUDA operand, which must be `dims` in size: the shape its
/// cuDNN descriptor gives it.
fn operand<'a>(
    storage: &'a CudaStorage,
    layout: &Layout,
    dims: [usize; 4],
) -> Result<CudaView<'a, f32>> {
    let view = cuda_f32_view(storage, layout, "cudnn-conv2d")?;
    if view.len() != dims.iter().product::<usize>() {
        candle_core::bail!(
            "cudnn-conv2d: an operand of {} elements for shape {dims:?}",
            view.len()
        );
    }
    Ok(view)
}

fn dims_i32(dims: [usize; 4]) -> [i32; 4] {
    dims.map(|d| d as i32)
}

impl CustomOp2 for CudnnConv {
    fn name(&self) -> &'static str {
        match self.pass {
            Pass::Forward => "cudnn-conv2d-forward",
            Pass::BackwardData => "cudnn-conv2d-backward-data",
            Pass::BackwardFilter => "cudnn-conv2d-backward-filter",
        }
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        candle_core::bail!("{}: the operands are on the CPU", self.name())
    }

    fn cuda_fwd(
        &self,
        a: &CudaStorage,
        al: &Layout,
        b: &CudaStorage,
        bl: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        let dev = &a.device;
        let g = self.geometry;
        let cudnn = handle(dev)?;
        let mut conv = cudnn.create_conv2d::<f32>(
            [g.padding as i32; 2],
            [g.stride as i32; 2],
            [1, 1],
            cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION,
        )?;
        conv.set_math_type(cudnnMathType_t::CUDNN_FMA_MATH)?;
        let nchw = cudnnTensorFormat_t::CUDNN_TENSOR_NCHW;
        let x = cudnn.create_4d_tensor::<f32>(nchw, dims_i32(g.x))?;
        let w = cudnn.create_4d_filter::<f32>(nchw, dims_i32(g.w))?;
        let y = cudnn.create_4d_tensor::<f32>(nchw, dims_i32(g.y()))?;
        // The operands' shapes, then the output's, in `apply_op2` order.
        let (a_dims, b_dims, out_dims) = match self.pass {
            Pass::Forward => (g.x, g.w, g.y()),
            Pass::BackwardData => (g.y(), g.w, g.x),
            Pass::BackwardFilter => (g.x, g.y(), g.w),
        };
        let (a, b) = (operand(a, al, a_dims)?, operand(b, bl, b_dims)?);
        // SAFETY (both allocations): every pass runs with beta = 0, so cuDNN writes every
        // element of its output without reading it, and the workspace is its own scratch.
        let mut out = unsafe { dev.alloc::<f32>(out_dims.iter().product())? };
        let workspace = |bytes: usize| -> Result<Option<CudaSlice<u8>>> {
            Ok(if bytes == 0 {
                None
            } else {
                Some(unsafe { dev.alloc::<u8>(bytes)? })
            })
        };
        // SAFETY: the descriptors above describe the operands' f32 NCHW data (contiguous views
        // of `g`'s shapes, checked by `operand`) and `out`, allocated with the pass's output
        // shape; the workspace has the size cuDNN asked for the algorithm.
        unsafe {
            match self.pass {
                Pass::Forward => {
                    let op = ConvForward {
                        conv: &conv,
                        x: &x,
                        w: &w,
                        y: &y,
                    };
                    let algo = FwdAlgo::CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
                    let mut ws = workspace(op.get_workspace_size(algo)?)?;
                    op.launch(algo, ws.as_mut(), (1f32, 0f32), &a, &b, &mut out)?;
                }
                Pass::BackwardData => {
                    let op = ConvBackwardData {
                        conv: &conv,
                        dx: &x,
                        w: &w,
                        dy: &y,
                    };
                    let algo = DataAlgo::CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
                    let mut ws = workspace(op.get_workspace_size(algo)?)?;
                    op.launch(algo, ws.as_mut(), (1f32, 0f32), &mut out, &b, &a)?;
                }
                Pass::BackwardFilter => {
                    let op = ConvBackwardFilter {
                        conv: &conv,
                        x: &x,
                        dw: &w,
                        dy: &y,
                    };
                    let algo = FilterAlgo::CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
                    let mut ws = workspace(op.get_workspace_size(algo)?)?;
                    op.launch(algo, ws.as_mut(), (1f32, 0f32), &a, &mut out, &b)?;
                }
            }
        }
        Ok((
            CudaStorage::wrap_cuda_slice(out, dev.clone()),
            Shape::from(out_dims.to_vec()),
        ))
    }
}
