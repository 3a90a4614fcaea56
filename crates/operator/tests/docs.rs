//! The documentation's links hold: every relative link in README.md and docs/*.md names a file
//! that exists (relative to the file holding the link), and every `#anchor` names a heading of
//! its target, slugged as GitHub does. Links to other sites (any URL with a scheme: http, https,
//! mailto) and anything inside fenced code blocks or code spans are not checked. No cluster.

// Test code: a failed expectation is a failed test.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::collections::{BTreeSet, HashMap};
use std::path::{Component, Path, PathBuf};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// A Markdown file as far as links go: the link destinations (with their line numbers) and the
/// anchors its headings and HTML `id`/`name` attributes define.
struct Document {
    links: Vec<(usize, String)>,
    anchors: BTreeSet<String>,
}

/// GitHub's heading anchor: the heading's text lowercased, every character that is not a letter,
/// a digit, `-`, `_` or a space dropped, and each space turned into `-` (not collapsed).
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .collect()
}

/// The byte ranges of `line`'s code spans: a run of backticks up to the next run of the same
/// length (a run without a match is literal text).
fn code_spans(line: &str) -> Vec<(usize, usize)> {
    let bytes = line.as_bytes();
    let run_at = |start: usize| bytes[start..].iter().take_while(|b| **b == b'`').count();
    let mut spans = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'`' {
            i += 1;
            continue;
        }
        let open = run_at(i);
        let mut j = i + open;
        let mut end = None;
        while j < bytes.len() {
            if bytes[j] == b'`' {
                let run = run_at(j);
                if run == open {
                    end = Some(j + run);
                    break;
                }
                j += run;
            } else {
                j += 1;
            }
        }
        match end {
            Some(end) => {
                spans.push((i, end));
                i = end;
            }
            None => i += open,
        }
    }
    spans
}

/// The destination at the start of `rest` (what follows `](`): `<…>`, or up to the first space
/// or the `)` that closes the link (balanced parentheses inside are part of it). Also returns
/// where in `rest` the destination ends.
fn destination(rest: &str) -> Option<(String, usize)> {
    let skipped = rest.len() - rest.trim_start().len();
    let trimmed = &rest[skipped..];
    if let Some(inner) = trimmed.strip_prefix('<') {
        return inner
            .find('>')
            .map(|end| (inner[..end].to_owned(), skipped + end + 2));
    }
    let mut depth = 0usize;
    for (at, c) in trimmed.char_indices() {
        match c {
            '(' => depth += 1,
            ')' if depth == 0 => return Some((trimmed[..at].to_owned(), skipped + at)),
            ')' => depth -= 1,
            c if c.is_whitespace() => return Some((trimmed[..at].to_owned(), skipped + at)),
            _ => {}
        }
    }
    None
}

/// The inline links and images of one line (outside code spans).
fn inline_links(line: &str) -> Vec<String> {
    let spans = code_spans(line);
    let in_code = |at: usize| {
        spans
            .iter()
            .any(|(start, end)| (*start..*end).contains(&at))
    };
    line.match_indices("](")
        .filter(|(at, _)| !in_code(*at))
        .filter_map(|(at, _)| destination(&line[at + 2..]).map(|(link, _)| link))
        .collect()
}

/// A reference definition (`[label]: destination`), not a footnote.
fn reference_definition(line: &str) -> Option<String> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    let rest = line.trim_start_matches(' ').strip_prefix('[')?;
    let (label, after) = rest.split_once("]:")?;
    if indent > 3 || label.is_empty() || label.starts_with('^') {
        return None;
    }
    destination(&format!("{after} "))
        .map(|(link, _)| link)
        .filter(|link| !link.is_empty())
}

/// The text of an ATX heading (`## Text ##`), or `None` when `line` is not one.
fn heading(line: &str) -> Option<String> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    let trimmed = line.trim_start_matches(' ');
    let level = trimmed.chars().take_while(|c| *c == '#').count();
    if indent > 3 || level == 0 || level > 6 {
        return None;
    }
    let text = &trimmed[level..];
    if !(text.is_empty() || text.starts_with([' ', '\t'])) {
        return None;
    }
    // An optional closing sequence of `#`s, preceded by a space.
    let text = text.trim();
    let without_closing = text.trim_end_matches('#');
    let text = if without_closing.is_empty() || without_closing.ends_with([' ', '\t']) {
        without_closing.trim_end()
    } else {
        text
    };
    Some(rendered(text))
}

/// A heading's text as GitHub renders it, for the slug: `[text](url)` is `text`.
fn rendered(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        let after = &rest[open + 1..];
        let Some(close) = after.find("](") else {
            break;
        };
        let tail = &after[close + 2..];
        let Some(end) = destination(tail)
            .and_then(|(_, consumed)| Some(consumed + tail[consumed..].find(')')?))
        else {
            break;
        };
        out.push_str(&rest[..open]);
        out.push_str(&after[..close]);
        rest = &tail[end + 1..];
    }
    out.push_str(rest);
    out
}

/// The anchors HTML elements define on `line`: `id="…"` and `<a name="…">`.
fn html_anchors(line: &str) -> Vec<String> {
    let mut anchors = Vec::new();
    for attribute in [" id=\"", "<a name=\""] {
        for (at, _) in line.match_indices(attribute) {
            let value = &line[at + attribute.len()..];
            if let Some(end) = value.find('"') {
                anchors.push(value[..end].to_owned());
            }
        }
    }
    anchors
}

/// An opening or closing code fence: its character and length (``` or ~~~, at least 3). Any
/// indentation: a fence inside a list item is indented like the item's text.
fn fence(line: &str) -> Option<(char, usize)> {
    let trimmed = line.trim_start();
    let marker = trimmed.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let length = trimmed.chars().take_while(|c| *c == marker).count();
    (length >= 3).then_some((marker, length))
}

fn parse(text: &str) -> Document {
    let mut links = Vec::new();
    let mut anchors = BTreeSet::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut open_fence: Option<(char, usize)> = None;
    for (index, line) in text.lines().enumerate() {
        if let Some((marker, length)) = open_fence {
            // A closing fence: the same character, at least as long, nothing after it.
            if fence(line).is_some_and(|(m, l)| m == marker && l >= length)
                && line.trim().chars().all(|c| c == marker)
            {
                open_fence = None;
            }
            continue;
        }
        if let Some(opening) = fence(line) {
            open_fence = Some(opening);
            continue;
        }
        if let Some(text) = heading(line) {
            // GitHub numbers repeated anchors: `a`, `a-1`, `a-2`, …
            let base = slug(&text);
            let count = seen.entry(base.clone()).or_insert(0);
            let anchor = match *count {
                0 => base,
                n => format!("{base}-{n}"),
            };
            *count += 1;
            anchors.insert(anchor);
        }
        anchors.extend(html_anchors(line));
        let number = index + 1;
        links.extend(inline_links(line).into_iter().map(|link| (number, link)));
        links.extend(reference_definition(line).map(|link| (number, link)));
    }
    Document { links, anchors }
}

/// Whether `link` names another site or protocol (`https:`, `mailto:`, …): a scheme is a letter
/// then letters, digits, `+`, `-` or `.`, up to a `:`.
fn has_scheme(link: &str) -> bool {
    link.split_once(':').is_some_and(|(scheme, _)| {
        scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    })
}

/// `%20` and friends, as a browser would decode them in a path.
fn percent_decode(path: &str) -> String {
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `path` with its `.` and `..` components resolved (for messages: no file system access).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The Markdown files whose links are checked: README.md and docs/*.md.
fn documents(root: &Path) -> Vec<PathBuf> {
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ exists")
        .map(|entry| entry.expect("a docs/ entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "md") && path.is_file())
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

/// What is wrong with the links of `file`, one line per broken link.
fn broken_links(root: &Path, file: &Path, cache: &mut HashMap<PathBuf, Document>) -> Vec<String> {
    let name = file
        .strip_prefix(root)
        .unwrap_or(file)
        .display()
        .to_string();
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("reading {name}: {e}"));
    let document = parse(&text);
    let mut problems = Vec::new();
    for (line, link) in &document.links {
        if has_scheme(link) {
            continue;
        }
        let (path, anchor) = match link.split_once('#') {
            Some((path, anchor)) => (path, Some(anchor)),
            None => (link.as_str(), None),
        };
        let path = percent_decode(path.split('?').next().unwrap_or_default());
        let target = if path.is_empty() {
            file.to_path_buf()
        } else if let Some(from_root) = path.strip_prefix('/') {
            root.join(from_root)
        } else {
            file.parent().unwrap_or(root).join(&path)
        };
        let shown = |target: &Path| {
            let target = normalize(target);
            target
                .strip_prefix(normalize(root))
                .unwrap_or(&target)
                .display()
                .to_string()
        };
        if !target.exists() {
            problems.push(format!(
                "{name}:{line}: link `{link}`: {} does not exist",
                shown(&target)
            ));
            continue;
        }
        let Some(anchor) = anchor.filter(|a| !a.is_empty()) else {
            continue;
        };
        // Anchors are checked in Markdown targets only (a source file's `#L10` is GitHub's).
        if target.is_dir() || target.extension().is_none_or(|e| e != "md") {
            continue;
        }
        let anchors = &cache
            .entry(target.clone())
            .or_insert_with(|| {
                parse(&std::fs::read_to_string(&target).unwrap_or_else(|e| {
                    panic!("reading {}: {e}", target.display());
                }))
            })
            .anchors;
        let anchor = percent_decode(anchor);
        if !anchors.contains(&anchor) {
            problems.push(format!(
                "{name}:{line}: link `{link}`: no heading in {} has the anchor `#{anchor}` (it has: {})",
                shown(&target),
                anchors
                    .iter()
                    .map(|a| format!("#{a}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    problems
}

#[test]
fn every_relative_link_and_anchor_in_the_docs_resolves() {
    let root = Path::new(ROOT);
    let mut cache = HashMap::new();
    let files = documents(root);
    assert!(files.len() > 1, "no docs/*.md found under {ROOT}");
    let problems: Vec<String> = files
        .iter()
        .flat_map(|file| broken_links(root, file, &mut cache))
        .collect();
    assert!(
        problems.is_empty(),
        "{} broken link(s):\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn slugs_follow_github() {
    assert_eq!(slug("Adding a controller"), "adding-a-controller");
    assert_eq!(slug("SampleDB (seed 003)"), "sampledb-seed-003");
    assert_eq!(
        slug("`make run`: the first step"),
        "make-run-the-first-step"
    );
    assert_eq!(slug("Retries & back-off"), "retries--back-off");
    assert_eq!(slug("snake_case stays"), "snake_case-stays");
    assert_eq!(slug("Ünïcode letters"), "ünïcode-letters");
}

#[test]
fn headings_links_and_fences_are_parsed_as_github_does() {
    let text = "\
# Title
## Again ##
## Again
#NotAHeading
### See [the guide](guide.md) now
```sh
# not a heading
[not](a-link.md)
```
~~~~
```
[still](code.md)
~~~~
Text [one](a.md#x) and ![image](img/b.png \"title\") and `[code](c.md)`.
A [`spanned`](<with space.md>) link, [nested](d_(e).md).
<a name=\"custom\"></a><span id=\"other\"></span>
[ref]: ref.md#y
[^note]: a footnote
";
    let document = parse(text);
    let anchors: Vec<&str> = document.anchors.iter().map(String::as_str).collect();
    assert_eq!(
        anchors,
        [
            "again",
            "again-1",
            "custom",
            "other",
            "see-the-guide-now",
            "title"
        ]
    );
    let links: Vec<(usize, &str)> = document
        .links
        .iter()
        .map(|(line, link)| (*line, link.as_str()))
        .collect();
    assert_eq!(
        links,
        [
            (5, "guide.md"),
            (14, "a.md#x"),
            (14, "img/b.png"),
            (15, "with space.md"),
            (15, "d_(e).md"),
            (17, "ref.md#y"),
        ]
    );
}

#[test]
fn only_scheme_less_links_are_local() {
    for external in ["https://kubernetes.io/docs", "http://x", "mailto:a@b.c"] {
        assert!(has_scheme(external), "{external}");
    }
    for local in ["docs/a.md", "#anchor", "a.md#b:c", "../x.md", "./c:d"] {
        assert!(!has_scheme(local), "{local}");
    }
    assert_eq!(percent_decode("with%20space.md"), "with space.md");
}
