//! The result blocks of BENCHMARKS.md: each benchmark owns the text between its two
//! markers and rewrites it after a run; the rest of the file is written by hand.

use anyhow::Context;
use std::path::Path;

/// Replaces what stands between `<!-- {marker} results: begin -->` and its end marker.
pub fn replace_block(doc: &Path, marker: &str, block: &str) -> anyhow::Result<()> {
    let begin = format!("<!-- {marker} results: begin -->");
    let end = format!("<!-- {marker} results: end -->");
    let text =
        std::fs::read_to_string(doc).with_context(|| format!("reading {}", doc.display()))?;
    let (head, rest) = text
        .split_once(&begin)
        .with_context(|| format!("{begin} missing from {}", doc.display()))?;
    let (_, tail) = rest
        .split_once(&end)
        .with_context(|| format!("{end} missing from {}", doc.display()))?;
    std::fs::write(doc, format!("{head}{begin}\n{block}\n{end}{tail}"))
        .with_context(|| format!("writing {}", doc.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_block_between_the_markers_changes() {
        let path = std::env::temp_dir().join(format!("bench-doc-{}.md", std::process::id()));
        std::fs::write(
            &path,
            "intro\n<!-- x results: begin -->\nold\n<!-- x results: end -->\noutro\n",
        )
        .expect("write");
        replace_block(&path, "x", "new\nlines").expect("replaced");
        let text = std::fs::read_to_string(&path).expect("read");
        std::fs::remove_file(&path).expect("remove");
        assert_eq!(
            text,
            "intro\n<!-- x results: begin -->\nnew\nlines\n<!-- x results: end -->\noutro\n"
        );
        assert!(replace_block(&path, "x", "gone").is_err());
    }
}
