//! Short excerpts of recalled items.

/// A short excerpt of `text` around the first query term it contains.
pub(crate) fn snippet(text: &str, terms: &[String]) -> String {
    const WINDOW: usize = 160;
    if text.chars().count() <= WINDOW {
        return text.to_owned();
    }
    let mut start_byte = 0;
    let mut word_start: Option<usize> = None;
    let mut found = None;
    for (i, c) in text
        .char_indices()
        .chain(std::iter::once((text.len(), ' ')))
    {
        if c.is_alphanumeric() {
            word_start.get_or_insert(i);
        } else if let Some(ws) = word_start.take() {
            let w = text[ws..i].to_lowercase();
            if terms.contains(&w) {
                found = Some(ws);
                break;
            }
        }
    }
    if let Some(pos) = found {
        // Start a little before the match, on a char boundary.
        let before: Vec<usize> = text[..pos].char_indices().map(|(i, _)| i).collect();
        start_byte = before.len().checked_sub(40).map_or(0, |k| before[k]);
    }
    let excerpt: String = text[start_byte..].chars().take(WINDOW).collect();
    let mut out = String::new();
    if start_byte > 0 {
        out.push('…');
    }
    out.push_str(&excerpt);
    if start_byte + excerpt.len() < text.len() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snippets_center_on_the_first_match() {
        let text = format!("{} needle {}", "hay ".repeat(100), "straw ".repeat(50));
        let s = snippet(&text, &["needle".to_owned()]);
        assert!(s.starts_with('…') && s.ends_with('…'), "{s}");
        assert!(s.contains("needle"));
        assert_eq!(snippet("short text", &[]), "short text");
    }
}
