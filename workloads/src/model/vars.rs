//! Loading host values into a model's parameter variables, and reading tensors back.
//!
//! On the CPU a variable's storage is host memory, so the values are copied straight into it;
//! variables on one GPU are written in place through a page-locked staging buffer (see
//! `staging`); elsewhere the values are uploaded into a new tensor that the variable takes. The
//! in-place copy halves what a worker that loads the parameters it pulled before every step
//! moves.

use crate::error::{Result, TensorContext, WorkloadError};
use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, InplaceOp1, Layout, Tensor, Var};

/// Sets `vars` from flat values in the same order, each on its own device; an error naming both
/// counts when they differ, or the variable when a vector's length is not its size.
pub fn load_vars(vars: &[&Var], values: &[Vec<f32>]) -> Result<()> {
    if vars.len() != values.len() {
        return Err(WorkloadError::Tensor {
            context: "load parameters".into(),
            source: candle_core::Error::Msg(format!(
                "{} values for {} parameters",
                values.len(),
                vars.len()
            )),
        });
    }
    for (i, (var, v)) in vars.iter().zip(values).enumerate() {
        if var.elem_count() != v.len() {
            return Err(WorkloadError::Tensor {
                context: "load parameters".into(),
                source: candle_core::Error::Msg(format!(
                    "parameter {i} has {} elements ({:?}), its values {}",
                    var.elem_count(),
                    var.dims(),
                    v.len()
                )),
            });
        }
    }
    // Variables on one GPU: through the thread's page-locked buffer, in place.
    #[cfg(feature = "cuda")]
    if super::staging::upload(vars, values).ctx("load parameters")? {
        return Ok(());
    }
    for (var, v) in vars.iter().zip(values) {
        if var.device().is_cpu() {
            var.inplace_op1(&CopyIn(v)).ctx("load parameters")?;
        } else {
            let t = Tensor::from_slice(v, var.shape(), var.device()).ctx("load parameters")?;
            var.set(&t).ctx("load parameters")?;
        }
    }
    Ok(())
}

/// Each tensor's values as a flat row-major vector on the host: tensors on one GPU (a step's
/// gradients) come down together through a page-locked buffer, others one by one.
pub fn host_values(tensors: &[Tensor]) -> candle_core::Result<Vec<Vec<f32>>> {
    #[cfg(feature = "cuda")]
    if let Some(values) = super::staging::download(tensors)? {
        return Ok(values);
    }
    tensors
        .iter()
        .map(super::StagedModel::flat_values)
        .collect()
}

/// Copies host values over a CPU tensor's elements, in place.
struct CopyIn<'a>(&'a [f32]);

impl InplaceOp1 for CopyIn<'_> {
    fn name(&self) -> &'static str {
        "copy-in"
    }

    fn cpu_fwd(&self, storage: &mut CpuStorage, layout: &Layout) -> candle_core::Result<()> {
        let dst = f32_slice_mut(storage, layout, self.name())?;
        if dst.len() != self.0.len() {
            candle_core::bail!(
                "{}: {} values for {} elements",
                self.name(),
                self.0.len(),
                dst.len()
            );
        }
        dst.copy_from_slice(self.0);
        Ok(())
    }
}

/// The elements of a contiguous f32 CPU tensor, to write in place; an error naming `op` for
/// another element type or a strided layout.
pub fn f32_slice_mut<'a>(
    storage: &'a mut CpuStorage,
    layout: &Layout,
    op: &str,
) -> candle_core::Result<&'a mut [f32]> {
    let CpuStorage::F32(values) = storage else {
        candle_core::bail!("{op}: the tensor is {:?}, not f32", storage.dtype());
    };
    let Some((start, end)) = layout.contiguous_offsets() else {
        candle_core::bail!("{op}: the tensor is not contiguous");
    };
    Ok(&mut values[start..end])
}

/// The elements of a contiguous f32 CUDA tensor, to read or copy from; an error naming `op` for
/// another element type or a strided layout. The CUDA twin of [`f32_slice_mut`].
#[cfg(feature = "cuda")]
pub(crate) fn cuda_f32_view<'a>(
    storage: &'a candle_core::CudaStorage,
    layout: &Layout,
    op: &str,
) -> candle_core::Result<candle_core::cuda_backend::cudarc::driver::CudaView<'a, f32>> {
    let Some((start, end)) = layout.contiguous_offsets() else {
        candle_core::bail!("{op}: the tensor is not contiguous");
    };
    Ok(storage.as_cuda_slice::<f32>()?.slice(start..end))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn values_land_in_cpu_variables_in_place() {
        let a = Var::zeros((2, 3), candle_core::DType::F32, &Device::Cpu).unwrap();
        let b = Var::zeros(4, candle_core::DType::F32, &Device::Cpu).unwrap();
        let values = vec![
            vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
            vec![-1.0, 0.5, 0.25, 9.0],
        ];
        load_vars(&[&a, &b], &values).unwrap();
        let read = |v: &Var| {
            v.as_tensor()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap()
        };
        assert_eq!(read(&a), values[0]);
        assert_eq!(read(&b), values[1]);
        // A tensor computed from a variable before the load keeps the old values.
        let before = b.as_tensor().affine(2.0, 0.0).unwrap();
        load_vars(&[&a, &b], &[values[0].clone(), vec![0.0; 4]]).unwrap();
        assert_eq!(before.to_vec1::<f32>().unwrap(), vec![-2.0, 1.0, 0.5, 18.0]);
        assert_eq!(read(&b), vec![0.0; 4]);
    }

    #[test]
    fn host_values_flattens_each_tensor() {
        let a = Tensor::arange(0f32, 6.0, &Device::Cpu)
            .unwrap()
            .reshape((2, 3))
            .unwrap();
        let b = a.t().unwrap();
        assert_eq!(
            host_values(&[a, b]).unwrap(),
            vec![
                vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0],
                vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]
            ]
        );
    }

    #[test]
    fn wrong_counts_and_sizes_are_named() {
        let a = Var::zeros(3, candle_core::DType::F32, &Device::Cpu).unwrap();
        let e = load_vars(&[&a], &[vec![1.0; 3], vec![2.0]])
            .unwrap_err()
            .to_string();
        assert!(e.contains("2 values for 1 parameters"), "{e}");
        let e = load_vars(&[&a], &[vec![1.0; 2]]).unwrap_err().to_string();
        assert!(
            e.contains("parameter 0 has 3 elements") && e.contains("its values 2"),
            "{e}"
        );
        let read = a.as_tensor().to_vec1::<f32>().unwrap();
        assert_eq!(read, vec![0.0; 3], "nothing half-loaded");
    }
}
