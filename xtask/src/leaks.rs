//! Finds what must never be committed in a packet: secrets, home directories and
//! machine-specific absolute paths.
//!
//! ```
//! let found = xtask::leaks::scan_text("Authorization: Bearer abcdefgh12345678\ncwd=/tmp/x");
//! assert_eq!(found.len(), 2);
//! assert!(xtask::leaks::scan_text("task-1 ran in <tmp>/ws and /workspace/demo").is_empty());
//! ```

use std::path::Path;

/// One finding: which rule, and the offending excerpt (secrets are shortened).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leak {
    /// The rule that matched (`openai-key`, `bearer-token`, `api-key-value`, `home-dir`,
    /// `machine-path`).
    pub rule: &'static str,
    /// 1-based line number.
    pub line: usize,
    /// A short excerpt, with secret material cut off.
    pub excerpt: String,
}

const PATH_RULES: &[(&str, &str)] = &[
    ("/root/", "home-dir"),
    ("/home/", "home-dir"),
    ("/work/", "machine-path"),
    ("/tmp/", "machine-path"),
    ("/var/tmp/", "machine-path"),
    ("/opt/", "machine-path"),
];

fn token_len(bytes: &[u8]) -> usize {
    bytes
        .iter()
        .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        .count()
}

fn excerpt(line: &str, at: usize, keep: usize) -> String {
    let end = (at + keep).min(line.len());
    let mut end = end;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &line[at..end])
}

/// Every leak in `text`.
pub fn scan_text(text: &str) -> Vec<Leak> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let bytes = line.as_bytes();
        let mut push = |rule, at: usize, keep| {
            out.push(Leak {
                rule,
                line: n + 1,
                excerpt: excerpt(line, at, keep),
            })
        };
        // OpenAI-style keys: `sk-` at a word start followed by a long token.
        for (at, _) in line.match_indices("sk-") {
            let boundary = at == 0 || !bytes[at - 1].is_ascii_alphanumeric();
            if boundary && token_len(&bytes[at + 3..]) >= 16 {
                push("openai-key", at, 5);
            }
        }
        for (at, m) in line.match_indices("Bearer ") {
            if token_len(&bytes[at + m.len()..]) >= 8 {
                push("bearer-token", at, 9);
            }
        }
        for (at, m) in line.match_indices("API_KEY=") {
            let rest = &line[at + m.len()..];
            let value = rest.split_whitespace().next().unwrap_or("");
            let value = value.trim_matches(|c| c == '"' || c == '\'');
            if !value.is_empty() && !value.starts_with('<') && !value.starts_with('$') {
                push("api-key-value", at, m.len());
            }
        }
        for (needle, rule) in PATH_RULES {
            for (at, _) in line.match_indices(needle) {
                // `/root/` inside a longer word (e.g. `chroot/`) is not a path.
                let boundary = at == 0 || !bytes[at - 1].is_ascii_alphanumeric();
                if boundary {
                    push(rule, at, needle.len() + 12);
                }
            }
        }
    }
    out
}

/// Every leak in every file under `dir` (text files; binary files are skipped), as
/// `(relative path, leak)`, sorted by path.
pub fn scan_dir(dir: &Path) -> std::io::Result<Vec<(String, Leak)>> {
    let mut out = Vec::new();
    for rel in crate::evidence::list_files(dir)? {
        let bytes = std::fs::read(dir.join(&rel))?;
        if let Ok(text) = std::str::from_utf8(&bytes) {
            for leak in scan_text(text) {
                out.push((rel.clone(), leak));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_keys_tokens_and_paths() {
        let text = "key sk-abcdefghijklmnopqrstu\nOPENAI_API_KEY=abc123\nhome /root/.cargo\n\
                    at /home/u/x\nin /work/main/x\n";
        let rules: Vec<_> = scan_text(text).into_iter().map(|l| l.rule).collect();
        assert_eq!(
            rules,
            [
                "openai-key",
                "api-key-value",
                "home-dir",
                "home-dir",
                "machine-path"
            ]
        );
    }

    #[test]
    fn ignores_lookalikes_and_redactions() {
        let text = "task-abcdefghijklmnopqrstu\nOPENAI_API_KEY=<redacted>\nOPENAI_API_KEY=\n\
                    /workspace/demo and <tmp>/sbx and chroot/x\nBearer <redacted>\n";
        assert!(scan_text(text).is_empty(), "{:?}", scan_text(text));
    }
}
