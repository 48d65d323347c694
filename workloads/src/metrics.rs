//! Ranking metrics for binary classifiers: the area under the ROC curve ([`auc`]), the
//! click-through models' headline accuracy measure.

/// Area under the ROC curve of `scores` against binary `labels` (0 negative, anything else
/// positive), computed from ranks (the Mann–Whitney U statistic): the probability that a random
/// positive scores above a random negative, ties counting one half.
///
/// Tied scores get the average of the ranks they span, so a constant scorer gets exactly 0.5.
/// `None` when one class is absent (the AUC is undefined) or the two slices differ in length.
/// NaN scores sort above every number (IEEE total order), so they rank deterministically.
pub fn auc(scores: &[f32], labels: &[u32]) -> Option<f64> {
    if scores.len() != labels.len() {
        return None;
    }
    let positives = labels.iter().filter(|&&l| l != 0).count();
    let negatives = labels.len() - positives;
    if positives == 0 || negatives == 0 {
        return None;
    }
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[a].total_cmp(&scores[b]));
    // Sum of the (1-based, tie-averaged) ranks of the positives.
    let mut rank_sum = 0.0f64;
    let mut start = 0;
    while start < order.len() {
        let mut end = start + 1;
        while end < order.len() && scores[order[end]].total_cmp(&scores[order[start]]).is_eq() {
            end += 1;
        }
        // Ranks start+1 ..= end, averaged.
        let mean_rank = (start + 1 + end) as f64 / 2.0;
        let tied_positives = order[start..end]
            .iter()
            .filter(|&&i| labels[i] != 0)
            .count();
        rank_sum += mean_rank * tied_positives as f64;
        start = end;
    }
    let (p, n) = (positives as f64, negatives as f64);
    Some((rank_sum - p * (p + 1.0) / 2.0) / (p * n))
}

#[cfg(test)]
mod tests {
    use super::auc;

    #[test]
    fn perfect_reversed_and_tied_rankings() {
        assert_eq!(auc(&[0.1, 0.2, 0.8, 0.9], &[0, 0, 1, 1]), Some(1.0));
        assert_eq!(auc(&[0.9, 0.8, 0.2, 0.1], &[0, 0, 1, 1]), Some(0.0));
        assert_eq!(auc(&[0.5; 5], &[0, 1, 0, 1, 1]), Some(0.5));
    }

    /// Worked by hand: positives score 0.8, 0.4, 0.4; negatives 0.6, 0.4, 0.1. Pairs
    /// (positive above negative = 1, tie = ½): 0.8 beats all three (3); each 0.4 loses to
    /// 0.6, ties 0.4 and beats 0.1 (1.5 each). Total 6 of 9 pairs.
    #[test]
    fn worked_example_with_ties() {
        let scores = [0.8, 0.6, 0.4, 0.4, 0.4, 0.1];
        let labels = [1, 0, 1, 1, 0, 0];
        let a = auc(&scores, &labels).unwrap();
        assert!((a - 6.0 / 9.0).abs() < 1e-12, "{a}");
        // Order of the samples does not matter.
        let scores2 = [0.4, 0.1, 0.8, 0.4, 0.6, 0.4];
        let labels2 = [0, 0, 1, 1, 0, 1];
        assert_eq!(auc(&scores2, &labels2), Some(a));
    }

    #[test]
    fn undefined_without_both_classes() {
        assert_eq!(auc(&[0.1, 0.2], &[1, 1]), None);
        assert_eq!(auc(&[0.1, 0.2], &[0, 0]), None);
        assert_eq!(auc(&[], &[]), None);
        assert_eq!(auc(&[0.1], &[0, 1]), None);
    }
}
