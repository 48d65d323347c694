//! RNA-H's group formation rule: split the workers by profiled step time, recursively, into
//! slow and fast while their spread is large against their mean.

/// Forms groups from per-worker mean step times (index = worker id), the thesis's recursive
/// rule with a configurable factor: a set splits into slow (time > v) and fast (the rest) while
/// ζ > `split_ratio` · v, ζ being the slowest minus the fastest time and v their mean.
/// `split_ratio = 1` is the literal thesis rule. Groups come fastest first, members ascending.
pub fn form_groups(times: &[f64], split_ratio: f64) -> Vec<Vec<u32>> {
    let mut out = Vec::new();
    split_rec(
        (0..times.len() as u32).collect(),
        times,
        split_ratio,
        &mut out,
    );
    out
}

/// Splits `members` (ids into `times`) recursively and appends the resulting groups to `out`,
/// fastest first.
fn split_rec(members: Vec<u32>, times: &[f64], ratio: f64, out: &mut Vec<Vec<u32>>) {
    if members.len() < 2 {
        if !members.is_empty() {
            out.push(members);
        }
        return;
    }
    let t = |w: &u32| times[*w as usize];
    let max = members.iter().map(t).fold(f64::NEG_INFINITY, f64::max);
    let min = members.iter().map(t).fold(f64::INFINITY, f64::min);
    let v = members.iter().map(t).sum::<f64>() / members.len() as f64;
    if max - min > ratio * v {
        let (slow, fast): (Vec<u32>, Vec<u32>) = members.iter().partition(|w| t(w) > v);
        if !slow.is_empty() && !fast.is_empty() {
            split_rec(fast, times, ratio, out);
            split_rec(slow, times, ratio, out);
            return;
        }
    }
    out.push(members);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The mixed-groups profile (A ≈ 51 ms, B ≈ 101 ms per step) splits into {A}, {B} at the
    /// default ratio 0.5 but not under the literal thesis rule ζ > v.
    #[test]
    fn groups_from_speeds() {
        let t = [0.050, 0.052, 0.049, 0.053, 0.100, 0.103, 0.099, 0.101];
        assert_eq!(
            form_groups(&t, 0.5),
            vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]]
        );
        assert_eq!(form_groups(&t, 1.0), vec![(0..8).collect::<Vec<u32>>()]);
        // Interleaved ids: groups keep ascending ids, fastest group first.
        let t = [0.4, 0.1, 0.4, 0.1];
        assert_eq!(form_groups(&t, 1.0), vec![vec![1, 3], vec![0, 2]]);
        // Recursion: 1, 2 and 9 units: {9} splits off, then {1} from {2} (ζ = 1 > 0.5 · 1.5).
        assert_eq!(
            form_groups(&[9.0, 1.0, 2.0], 0.5),
            vec![vec![1], vec![2], vec![0]]
        );
        // Equal speeds never split; one worker is one group.
        assert_eq!(form_groups(&[1.0; 4], 0.01), vec![vec![0, 1, 2, 3]]);
        assert_eq!(form_groups(&[1.0], 0.5), vec![vec![0]]);
    }
}
