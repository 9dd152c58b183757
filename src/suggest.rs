//! "Did you mean": the closest known name by edit distance, if it is close enough to be a typo.

pub fn did_you_mean<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<String> {
    let limit = (name.chars().count() / 3).max(1);
    candidates
        .into_iter()
        .filter(|c| *c != name)
        .map(|c| (distance(&name.to_lowercase(), &c.to_lowercase()), c))
        .filter(|(d, _)| *d <= limit)
        .min_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(b.1)))
        .map(|(_, c)| c.to_string())
}

/// Like [`did_you_mean`], and when no name is that close, the one name that spells `name` out
/// (`h100` for `h100_sxm`): people write the short name of a product.
pub fn did_you_mean_or_longer<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str> + Clone) -> Option<String> {
    did_you_mean(name, candidates.clone()).or_else(|| {
        let prefix = format!("{}_", name.to_lowercase());
        let mut longer = candidates.into_iter().filter(|c| c.to_lowercase().starts_with(&prefix));
        match (longer.next(), longer.next()) {
            (Some(only), None) => Some(only.to_string()),
            _ => None,
        }
    })
}

/// Optimal-string-alignment distance: a swap of neighbours (`1fb1`) counts as one edit.
fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            d[i][j] = (d[i - 1][j] + 1).min(d[i][j - 1] + 1).min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d[i][j] = d[i][j].min(d[i - 2][j - 2] + 1);
            }
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::did_you_mean;

    #[test]
    fn suggests_close_names_only() {
        let names = ["1f1b", "gpipe", "interleaved", "transpose"];
        assert_eq!(did_you_mean("1fb1", names).as_deref(), Some("1f1b"));
        assert_eq!(did_you_mean("transpos", names).as_deref(), Some("transpose"));
        assert_eq!(did_you_mean("interleave", names).as_deref(), Some("interleaved"));
        assert_eq!(did_you_mean("zzz", names), None);
    }

    #[test]
    fn a_short_name_finds_the_one_it_abbreviates() {
        let names = ["h100_sxm", "h200_sxm", "qwen3_8b", "qwen3_32b"];
        assert_eq!(super::did_you_mean_or_longer("h100", names).as_deref(), Some("h100_sxm"));
        assert_eq!(super::did_you_mean_or_longer("qwen3", names), None, "two names extend it");
    }
}
