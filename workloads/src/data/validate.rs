//! Checking a `[data]` config before anything is generated or read, with errors naming the
//! offending field.

use super::ctr::check_rows;
use super::{ratings_counts, DataConfig, DataError, MAX_RATINGS_DIM, RATINGS_SAMPLE_LEN};

fn invalid(field: &'static str, reason: impl Into<String>) -> DataError {
    DataError::InvalidConfig {
        field,
        reason: reason.into(),
    }
}

fn check_positive(field: &'static str, v: usize) -> Result<(), DataError> {
    if v == 0 {
        Err(invalid(field, "must be > 0 (got 0)"))
    } else {
        Ok(())
    }
}

fn check_classes(v: usize) -> Result<(), DataError> {
    if v < 2 {
        Err(invalid("classes", format!("must be ≥ 2 (got {v})")))
    } else if v > u32::MAX as usize {
        Err(invalid("classes", format!("must fit in a u32 (got {v})")))
    } else {
        Ok(())
    }
}

/// Checks that `count * dim` features can be held (no overflow).
fn check_volume(field: &'static str, count: usize, dim: usize) -> Result<(), DataError> {
    match count.checked_mul(dim) {
        Some(n) if n <= isize::MAX as usize / std::mem::size_of::<f32>() => Ok(()),
        _ => Err(invalid(
            field,
            format!("{count} samples of {dim} features do not fit in memory"),
        )),
    }
}

fn check_path(field: &'static str, p: &std::path::Path) -> Result<(), DataError> {
    if p.as_os_str().is_empty() {
        Err(invalid(field, "must be a non-empty path"))
    } else {
        Ok(())
    }
}

impl DataConfig {
    /// Checks the config without generating or reading anything.
    ///
    /// Sizes, dimensions and widths must be > 0, `classes` ≥ 2, `margin`
    /// finite and ≥ 0, `spread` finite and ≥ 0, `separation` finite and > 0,
    /// IDX paths non-empty (their existence is checked by [`load`]), and for
    /// ratings `rows`, `cols` ≤ 2²⁴, `observed` in (0, 1], `noise` ≥ 0 and
    /// `test_fraction` in (0, 1) leaving at least one test and one training entry.
    /// The error ([`DataError::InvalidConfig`]) names the offending field, so
    /// a run fails at startup with a message pointing into the TOML.
    ///
    /// [`load`]: DataConfig::load
    pub fn validate(&self) -> Result<(), DataError> {
        match self {
            DataConfig::Teacher {
                dim,
                classes,
                hidden,
                train,
                test,
                margin,
            } => {
                check_positive("dim", *dim)?;
                check_classes(*classes)?;
                check_positive("hidden", *hidden)?;
                check_positive("train", *train)?;
                check_positive("test", *test)?;
                check_volume("train", *train, *dim)?;
                check_volume("test", *test, *dim)?;
                if !margin.is_finite() || *margin < 0.0 {
                    return Err(invalid(
                        "margin",
                        format!("must be finite and ≥ 0 (got {margin})"),
                    ));
                }
                Ok(())
            }
            DataConfig::Blobs {
                dim,
                classes,
                train,
                test,
                spread,
                separation,
            } => {
                check_positive("dim", *dim)?;
                check_classes(*classes)?;
                check_positive("train", *train)?;
                check_positive("test", *test)?;
                check_volume("train", *train, *dim)?;
                check_volume("test", *test, *dim)?;
                if !spread.is_finite() || *spread < 0.0 {
                    return Err(invalid(
                        "spread",
                        format!("must be finite and ≥ 0 (got {spread})"),
                    ));
                }
                if !separation.is_finite() || *separation <= 0.0 {
                    return Err(invalid(
                        "separation",
                        format!("must be finite and > 0 (got {separation})"),
                    ));
                }
                Ok(())
            }
            DataConfig::Idx {
                train_images,
                train_labels,
                test_images,
                test_labels,
                classes,
            } => {
                if let Some(classes) = classes {
                    check_classes(*classes)?;
                }
                check_path("train_images", train_images)?;
                check_path("train_labels", train_labels)?;
                check_path("test_images", test_images)?;
                check_path("test_labels", test_labels)?;
                Ok(())
            }
            DataConfig::Ratings {
                rows,
                cols,
                rank,
                observed,
                noise,
                test_fraction,
            } => {
                for (field, v) in [("rows", *rows), ("cols", *cols)] {
                    check_positive(field, v)?;
                    if v > MAX_RATINGS_DIM {
                        return Err(invalid(
                            field,
                            format!(
                                "must be ≤ {MAX_RATINGS_DIM} so indices are exact as f32 features (got {v})"
                            ),
                        ));
                    }
                }
                check_positive("rank", *rank)?;
                check_volume("rows", *rows, *rank)?;
                check_volume("cols", *cols, *rank)?;
                if !observed.is_finite() || *observed <= 0.0 || *observed > 1.0 {
                    return Err(invalid(
                        "observed",
                        format!("must be in (0, 1] (got {observed})"),
                    ));
                }
                if !noise.is_finite() || *noise < 0.0 {
                    return Err(invalid(
                        "noise",
                        format!("must be finite and ≥ 0 (got {noise})"),
                    ));
                }
                if !test_fraction.is_finite() || *test_fraction <= 0.0 || *test_fraction >= 1.0 {
                    return Err(invalid(
                        "test_fraction",
                        format!("must be in (0, 1) (got {test_fraction})"),
                    ));
                }
                let (count, test) = ratings_counts(*rows, *cols, *observed, *test_fraction);
                if count < 2 {
                    return Err(invalid(
                        "observed",
                        format!(
                            "gives {count} observed entries of a {rows} x {cols} matrix; need at least 2 (one to train on, one to test)"
                        ),
                    ));
                }
                if test == 0 || test == count {
                    return Err(invalid(
                        "test_fraction",
                        format!(
                            "holds out {test} of {count} observed entries; need at least one test and one training entry"
                        ),
                    ));
                }
                check_volume("observed", count, RATINGS_SAMPLE_LEN)?;
                Ok(())
            }
            DataConfig::Ctr {
                fields,
                rows,
                dense,
                zipf,
                positive_rate,
                train,
                test,
            } => {
                check_positive("fields", *fields)?;
                let rows = rows.per_field(*fields)?;
                check_positive("dense", *dense)?;
                if !zipf.is_finite() || *zipf <= 0.0 {
                    return Err(invalid(
                        "zipf",
                        format!("must be finite and > 0 (got {zipf})"),
                    ));
                }
                if !positive_rate.is_finite() || *positive_rate <= 0.0 || *positive_rate >= 1.0 {
                    return Err(invalid(
                        "positive_rate",
                        format!("must be in (0, 1) (got {positive_rate})"),
                    ));
                }
                check_positive("train", *train)?;
                check_positive("test", *test)?;
                check_volume("train", *train, dense + rows.len())?;
                check_volume("test", *test, dense + rows.len())?;
                Ok(())
            }
            DataConfig::CtrFile {
                path,
                rows,
                dense,
                test_fraction,
            } => {
                check_path("path", path)?;
                if rows.is_empty() {
                    return Err(invalid(
                        "rows",
                        "must list each field's rows (got an empty list)",
                    ));
                }
                check_rows(rows)?;
                check_positive("dense", *dense)?;
                if !test_fraction.is_finite() || *test_fraction <= 0.0 || *test_fraction >= 1.0 {
                    return Err(invalid(
                        "test_fraction",
                        format!("must be in (0, 1) (got {test_fraction})"),
                    ));
                }
                Ok(())
            }
        }
    }
}
