//! Checking labels against the number of classes, so that a stray label (a 200 among MNIST's
//! 0–9, a test label the training set never has) stops the run at start-up instead of silently
//! widening the model's output layer.

use std::path::Path;

use super::DataError;

/// The number of classes a data set's labels must fit, and where it comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ClassCount {
    /// Declared in the `[data]` table (`classes = N`).
    Declared(usize),
    /// Taken from the training labels: the largest one + 1.
    FromTraining(usize),
}

impl ClassCount {
    /// The number of classes.
    pub(super) fn count(self) -> usize {
        match self {
            ClassCount::Declared(n) | ClassCount::FromTraining(n) => n,
        }
    }

    /// Where the count comes from, for error messages.
    fn origin(self) -> String {
        match self {
            ClassCount::Declared(n) => format!("`classes` = {n} in [data]"),
            ClassCount::FromTraining(n) => {
                format!("{n} classes, from the training labels' largest")
            }
        }
    }
}

/// Checks that every label in `labels` (read from `path`) is below `classes`; the error names
/// the file, the first offending label's index and value, and the allowed range.
pub(super) fn check_labels(
    path: &Path,
    labels: &[u32],
    classes: ClassCount,
) -> Result<(), DataError> {
    match labels
        .iter()
        .enumerate()
        .find(|&(_, &l)| l as usize >= classes.count())
    {
        Some((index, &label)) => Err(DataError::LabelOutOfRange {
            path: path.to_path_buf(),
            index,
            label,
            classes: classes.count(),
            why: classes.origin(),
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_label_at_or_above_the_count_is_named() {
        let p = Path::new("labels-file");
        assert!(check_labels(p, &[0, 1, 9], ClassCount::Declared(10)).is_ok());
        let err = check_labels(p, &[0, 10, 200], ClassCount::Declared(10)).unwrap_err();
        assert!(matches!(
            err,
            DataError::LabelOutOfRange {
                index: 1,
                label: 10,
                classes: 10,
                ..
            }
        ));
        let msg = err.to_string();
        assert!(
            msg.contains("labels-file") && msg.contains("0..10") && msg.contains("`classes` = 10"),
            "{msg}"
        );
        let msg = check_labels(p, &[3], ClassCount::FromTraining(3))
            .unwrap_err()
            .to_string();
        assert!(msg.contains("from the training labels"), "{msg}");
    }
}
