//! The layers check of `cargo xtask test`: the modules of `shared`, and those of the web app's
//! timeline, must form a DAG (each uses only modules below it, as their docs list them). A
//! module's uses are the paths to its siblings in its code (`crate::NAME` in `shared`,
//! `super::NAME` or `crate::timeline::NAME` in the timeline) outside its `#[cfg(test)] mod
//! tests` (tests may reach anywhere) and outside comments.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

/// The folders whose modules are checked, each with the path prefixes that name a sibling.
pub const CHECKED: [(&str, &[&str]); 2] =
    [("shared/src", &["crate::"]), ("web/src/timeline", &["super::", "crate::timeline::"])];

/// Each module in the folder `src` and the modules of the same folder it uses, named by the
/// path `prefixes`.
pub fn module_uses(src: &Path, prefixes: &[&str]) -> Result<BTreeMap<String, Vec<String>>, String> {
    let mut uses = BTreeMap::new();
    let entries = fs::read_dir(src).map_err(|e| format!("reading {}: {e}", src.display()))?;
    for entry in entries {
        let path = entry.map_err(|e| format!("reading {}: {e}", src.display()))?.path();
        // A module is a file, or a folder whose every file belongs to it.
        let (name, files) = match path.extension().and_then(|e| e.to_str()) {
            Some("rs") => (path.file_stem(), vec![path.clone()]),
            _ if path.join("mod.rs").is_file() => (path.file_name(), rust_files(&path)?),
            _ => continue,
        };
        let name = name.and_then(|n| n.to_str()).unwrap_or_default().to_string();
        // The folder's root declares its modules; it is not one of them.
        if name == "lib" || name == "main" || name == "mod" {
            continue;
        }
        let mut code = String::new();
        for file in files {
            // A folder's `tests.rs` is its test module.
            if file.file_name().is_some_and(|n| n == "tests.rs") {
                continue;
            }
            let text = fs::read_to_string(&file)
                .map_err(|e| format!("reading {}: {e}", file.display()))?;
            code.push_str(&code_of(&text));
        }
        let mut used = sibling_paths(&code, prefixes);
        used.retain(|used| used != &name);
        uses.insert(name, used);
    }
    Ok(uses)
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Result<Vec<std::path::PathBuf>, String> {
    let mut files = Vec::new();
    let entries = fs::read_dir(dir).map_err(|e| format!("reading {}: {e}", dir.display()))?;
    for entry in entries {
        let path = entry.map_err(|e| format!("reading {}: {e}", dir.display()))?.path();
        if path.is_dir() {
            files.extend(rust_files(&path)?);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// `text` without its test module and its comments.
fn code_of(text: &str) -> String {
    let without_tests = match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => text,
    };
    without_tests
        .lines()
        .map(|line| line.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first segment after any of `prefixes` in `code` (`crate::{a, b::c}` included); sorted,
/// each once.
fn sibling_paths(code: &str, prefixes: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    let ident = |s: &str| -> String {
        s.trim().chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect()
    };
    for prefix in prefixes {
        for (at, _) in code.match_indices(prefix) {
            let rest = &code[at + prefix.len()..];
            if let Some(group) = rest.strip_prefix('{') {
                let group = &group[..group.find('}').unwrap_or(group.len())];
                found.extend(group.split(',').map(ident).filter(|name| !name.is_empty()));
            } else {
                found.push(ident(rest));
            }
        }
    }
    found.retain(|name| !name.is_empty());
    found.sort();
    found.dedup();
    found
}

/// A cycle among `uses`, as the modules along it (the first repeated at the end), if any.
pub fn find_cycle(uses: &BTreeMap<String, Vec<String>>) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Unseen,
        OnPath,
        Done,
    }
    fn visit<'a>(
        module: &'a str,
        uses: &'a BTreeMap<String, Vec<String>>,
        marks: &mut BTreeMap<&'a str, Mark>,
        path: &mut Vec<&'a str>,
    ) -> Option<Vec<String>> {
        marks.insert(module, Mark::OnPath);
        path.push(module);
        for used in uses.get(module).into_iter().flatten() {
            match marks.get(used.as_str()).copied() {
                // A path into another crate's module or a re-export: not a module of this one.
                None => {}
                Some(Mark::OnPath) => {
                    let from = path.iter().position(|m| *m == used).expect("on the path");
                    let mut cycle: Vec<String> =
                        path[from..].iter().map(|m| m.to_string()).collect();
                    cycle.push(used.clone());
                    return Some(cycle);
                }
                Some(Mark::Unseen) => {
                    if let Some(cycle) = visit(used, uses, marks, path) {
                        return Some(cycle);
                    }
                }
                Some(Mark::Done) => {}
            }
        }
        path.pop();
        marks.insert(module, Mark::Done);
        None
    }
    let mut marks: BTreeMap<&str, Mark> = uses.keys().map(|m| (m.as_str(), Mark::Unseen)).collect();
    for module in uses.keys() {
        if marks[module.as_str()] == Mark::Unseen {
            if let Some(cycle) = visit(module, uses, &mut marks, &mut Vec::new()) {
                return Some(cycle);
            }
        }
    }
    None
}

/// Fails with the cycle found, naming its modules in order.
pub fn check(root: &Path) -> Result<usize, String> {
    let mut modules = 0;
    for (src, prefixes) in CHECKED {
        let uses = module_uses(&root.join(src), prefixes)?;
        modules += uses.len();
        if let Some(cycle) = find_cycle(&uses) {
            return Err(format!(
                "{src}: a module cycle came back: {}. Move what both need into a module below \
                 them (the module docs list the layers)",
                cycle.join(" -> ")
            ));
        }
    }
    Ok(modules)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(edges: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
        edges
            .iter()
            .map(|(m, used)| (m.to_string(), used.iter().map(|u| u.to_string()).collect()))
            .collect()
    }

    #[test]
    fn a_cycle_is_found_and_named_in_order_and_a_dag_passes() {
        let dag = graph(&[("a", &["b", "c"]), ("b", &["c"]), ("c", &[]), ("d", &["serde"])]);
        assert_eq!(find_cycle(&dag), None);
        let cyclic = graph(&[("a", &["b"]), ("b", &["c"]), ("c", &["a"]), ("d", &[])]);
        assert_eq!(
            find_cycle(&cyclic),
            Some(vec!["a", "b", "c", "a"].into_iter().map(String::from).collect())
        );
    }

    #[test]
    fn uses_are_read_from_code_not_from_tests_or_comments() {
        let text = "use crate::{event::Event, stats};\n// crate::wire in a comment\n\
                    fn f() { crate::span::Span::new(); }\n#[cfg(test)]\nmod tests { use crate::reduce; }";
        assert_eq!(sibling_paths(&code_of(text), &["crate::"]), ["event", "span", "stats"]);
        let timeline = "use super::scale::Scale;\nuse crate::timeline::{layout, rows::Row};";
        assert_eq!(
            sibling_paths(&code_of(timeline), &["super::", "crate::timeline::"]),
            ["layout", "rows", "scale"]
        );
    }

    #[test]
    fn the_shared_crate_and_the_timeline_have_no_module_cycle() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("inside the workspace");
        let modules = check(root).unwrap_or_else(|cycle| panic!("{cycle}"));
        assert!(modules > 30, "read the {modules} modules of shared and the timeline");
    }
}
