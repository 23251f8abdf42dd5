//! Where a page of a revision's reader text ends (`ctx.fetch_source_document`).

/// The end of the page that starts at byte `start` of `text`: at most `max_chars` characters,
/// cut at the last paragraph break, else line break, else space, in the page's last quarter,
/// so a page rarely ends mid-sentence. Always past `start` unless the text ends there.
pub(crate) fn page_end(text: &str, start: usize, max_chars: usize) -> usize {
    let rest = &text[start..];
    let hard = rest
        .char_indices()
        .nth(max_chars)
        .map_or(rest.len(), |(i, _)| i);
    if hard == rest.len() {
        return text.len();
    }
    let window = &rest[..hard];
    let floor = window
        .char_indices()
        .nth(max_chars * 3 / 4)
        .map_or(0, |(i, _)| i);
    let cut = ["\n\n", "\n", " "].iter().find_map(|sep| {
        window[floor..]
            .rfind(sep)
            .map(|at| floor + at + sep.len())
            .filter(|&at| at > 0)
    });
    start + cut.unwrap_or(hard)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_cut_at_paragraphs_and_cover_the_text_exactly_once() {
        let text =
            "First paragraph here.\n\nSecond one is a little longer.\n\nThird. Ünïcode words.";
        let mut pages = Vec::new();
        let mut start = 0;
        while start < text.len() {
            let end = page_end(text, start, 30);
            assert!(end > start);
            assert!(text[start..end].chars().count() <= 30);
            pages.push(&text[start..end]);
            start = end;
        }
        assert_eq!(pages.concat(), text);
        assert_eq!(pages[0], "First paragraph here.\n\n");
    }

    #[test]
    fn a_text_without_breaks_is_cut_at_the_character_limit() {
        let text = "é".repeat(50);
        let end = page_end(&text, 0, 20);
        assert_eq!(&text[..end], "é".repeat(20));
    }
}
