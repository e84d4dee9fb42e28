//! The workspace's shape, checked as a reviewer reads it: no two modules of a crate import
//! each other, directly or round a circle; no line of code over 120 characters; the models'
//! documentation named for what it is (yue2.cpp's and minimaxmusic.cpp's architecture
//! references), so that `seed` means the RNG fields and nothing else; the job contract free
//! of actors, and the cluster built on the contract alone.
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// Every file under `dir` whose name ends with one of `exts`, outside build outputs.
fn files(dir: &Path, exts: &[&str], out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if p.is_dir() {
            if !matches!(name.as_str(), "target" | ".git" | "node_modules" | "venv" | ".venv") {
                files(&p, exts, out);
            }
        } else if exts.iter().any(|x| name.ends_with(x)) {
            out.push(p);
        }
    }
}

/// The workspace's crates: each folder of the root with a `Cargo.toml` and a `src`.
fn crates() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(root())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("Cargo.toml").is_file() && p.join("src").is_dir())
        .collect();
    v.sort();
    v
}

/// A file's module path inside its crate (`src/a/mod.rs` and `src/a.rs` are `a`).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
        parts.pop();
    }
    if parts.first().map(String::as_str) == Some("bin") {
        // Each binary is a crate of its own; its modules are not the library's.
        parts.insert(0, String::new());
    }
    parts
}

/// The source without comments and without the items behind `#[cfg(test)]`.
fn code_of(text: &str) -> String {
    let lines: String = text.lines().map(|l| l.split("//").next().unwrap()).collect::<Vec<_>>().join("\n");
    let mut out = String::new();
    let mut rest = lines.as_str();
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let item = &rest[at..];
        let (semi, brace) = (item.find(';'), item.find('{'));
        let end = match (semi, brace) {
            (Some(s), Some(b)) if s < b => s + 1,
            (_, Some(b)) => {
                let mut depth = 0;
                let mut end = item.len();
                for (i, c) in item[b..].char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = b + i + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                end
            }
            (Some(s), None) => s + 1,
            (None, None) => item.len(),
        };
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

/// The modules of one crate each module names through `crate::`, `super::` or `self::`
/// paths (a `use` group's members included), test modules left out.
fn import_graph(krate: &Path) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let src = krate.join("src");
    let mut all = Vec::new();
    files(&src, &[".rs"], &mut all);
    let mods: BTreeMap<Vec<String>, PathBuf> = all.iter().map(|f| (module_of(&src, f), f.clone())).collect();
    let decl = regex::Regex::new(r"#\[cfg\(test\)\]\s*(?:pub(?:\([a-z]+\))?\s+)?mod\s+(\w+)\s*;").unwrap();
    let mut tests: Vec<Vec<String>> = Vec::new();
    for (m, f) in &mods {
        for c in decl.captures_iter(&std::fs::read_to_string(f).unwrap()) {
            tests.push(m.iter().cloned().chain([c[1].to_string()]).collect());
        }
    }
    let is_test = |m: &[String]| tests.iter().any(|t| m.starts_with(t));
    let path = regex::Regex::new(r"\b(crate|super|self)((?:::\w+)+)(::\{)?").unwrap();
    let deepest = |p: &[String]| (0..=p.len()).rev().map(|k| p[..k].to_vec()).find(|k| mods.contains_key(k));
    let mut graph = BTreeMap::new();
    for (m, f) in &mods {
        if is_test(m) {
            continue;
        }
        let code = code_of(&std::fs::read_to_string(f).unwrap());
        let mut to = BTreeSet::new();
        for c in path.captures_iter(&code) {
            let mut base: Vec<String> = match &c[1] {
                "crate" => vec![],
                "self" => m.clone(),
                _ => m[..m.len().saturating_sub(1)].to_vec(),
            };
            let mut parts: Vec<&str> = c[2].split("::").skip(1).collect();
            while parts.first() == Some(&"super") {
                base.pop();
                parts.remove(0);
            }
            let full: Vec<String> = base.into_iter().chain(parts.iter().map(|s| s.to_string())).collect();
            let Some(target) = deepest(&full) else { continue };
            let mut targets = vec![target.clone()];
            if c.get(3).is_some() && target == full {
                // `use crate::a::{b, c::d}`: the group's first names.
                let group = &code[c.get(0).unwrap().end()..];
                let group = &group[..group.find('}').unwrap_or(group.len())];
                for name in group.split(',').filter_map(|s| s.trim().split("::").next()) {
                    let sub: Vec<String> = full.iter().cloned().chain([name.trim().to_string()]).collect();
                    if mods.contains_key(&sub) {
                        targets.push(sub);
                    }
                }
            }
            for t in targets {
                if &t != m && !is_test(&t) {
                    to.insert(t);
                }
            }
        }
        graph.insert(m.clone(), to);
    }
    graph
}

/// The strongly connected components of more than one module (Tarjan).
fn circles(g: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Vec<Vec<String>> {
    struct T<'a> {
        g: &'a BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        index: BTreeMap<&'a [String], usize>,
        low: BTreeMap<&'a [String], usize>,
        stack: Vec<&'a [String]>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a [String]) {
        let i = t.index.len();
        t.index.insert(v, i);
        t.low.insert(v, i);
        t.stack.push(v);
        for w in t.g.get(v).into_iter().flatten() {
            let w = w.as_slice();
            if !t.index.contains_key(w) {
                visit(t, w);
                let lw = t.low[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if t.stack.contains(&w) {
                let iw = t.index[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = t.stack.pop() {
                comp.push(if w.is_empty() { "lib".to_string() } else { w.join("::") });
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                t.out.push(comp);
            }
        }
    }
    let mut t = T { g, index: BTreeMap::new(), low: BTreeMap::new(), stack: Vec::new(), out: Vec::new() };
    for v in g.keys() {
        if !t.index.contains_key(v.as_slice()) {
            visit(&mut t, v);
        }
    }
    t.out
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let mut found = Vec::new();
    for krate in crates() {
        let name = krate.file_name().unwrap().to_string_lossy().into_owned();
        for c in circles(&import_graph(&krate)) {
            found.push(format!("{name}: {}", c.join(" <-> ")));
        }
    }
    assert!(found.is_empty(), "import circles:\n{}", found.join("\n"));
}

#[test]
fn the_checker_sees_a_circle() {
    // A circle the check must find: a -> b -> a, beside a leaf c.
    let m = |s: &str| vec![s.to_string()];
    let g = BTreeMap::from([
        (m("a"), BTreeSet::from([m("b"), m("c")])),
        (m("b"), BTreeSet::from([m("a")])),
        (m("c"), BTreeSet::new()),
    ]);
    assert_eq!(circles(&g), vec![vec!["a".to_string(), "b".to_string()]]);
    let code = code_of("use crate::a;\n#[cfg(test)]\nmod tests {\n    use crate::b;\n}\n// crate::c\nuse super::d;");
    assert!(code.contains("crate::a") && code.contains("super::d") && !code.contains("crate::b"));
    assert!(!code.contains("crate::c"));
}

#[test]
fn every_line_of_code_fits_in_120_columns() {
    let mut long = Vec::new();
    for krate in crates() {
        let mut all = Vec::new();
        files(&krate, &[".rs"], &mut all);
        for f in all {
            for (i, l) in std::fs::read_to_string(&f).unwrap().lines().enumerate() {
                if l.chars().count() > 120 {
                    long.push(format!("{}:{}", f.strip_prefix(root()).unwrap().display(), i + 1));
                }
            }
        }
    }
    assert!(long.is_empty(), "{} lines over 120 characters:\n{}", long.len(), long.join("\n"));
}

#[test]
fn the_models_documentation_is_named_for_what_it_is() {
    // `seed` is the RNG fields; the architecture references are named by their projects.
    let words =
        regex::Regex::new(r"(?i)\bseed 00[0-9]\b|\bthe seeds?'s?\s|\bseeds/0|\beach (family's )?seed\b").unwrap();
    let mut all = Vec::new();
    files(&root(), &[".rs", ".md", ".html", ".js", ".py", ".sh", ".toml", ".json"], &mut all);
    let mut hits = Vec::new();
    for f in all {
        let rel = f.strip_prefix(root()).unwrap();
        if rel.starts_with("tests/tests/layout.rs") {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&f) else { continue };
        for (i, l) in text.lines().enumerate() {
            if words.is_match(l) {
                hits.push(format!("{}:{}: {}", rel.display(), i + 1, l.trim()));
            }
        }
    }
    assert!(hits.is_empty(), "name yue2.cpp's or minimaxmusic.cpp's architecture reference:\n{}", hits.join("\n"));
}

#[test]
fn the_job_contract_holds_no_actor_the_cluster_needs_no_node_and_the_engine_no_request() {
    let deps = |krate: &str| {
        let text = std::fs::read_to_string(root().join(krate).join("Cargo.toml")).unwrap();
        let table: toml::Table = text.parse().unwrap();
        table.get("dependencies").and_then(|d| d.as_table()).map(|d| d.keys().cloned().collect::<Vec<_>>()).unwrap()
    };
    let contract = deps("contract");
    assert!(!contract.iter().any(|d| d.starts_with("actix") || d == "yued-actors"), "{contract:?}");
    let cluster = deps("cluster");
    assert!(!cluster.iter().any(|d| d.starts_with("actix") || d == "yued-actors"), "{cluster:?}");
    // The engine runs on its own settings; requests are mapped at the edge (actors::settings).
    let engine = deps("engine");
    assert!(!engine.iter().any(|d| d == "yued-protocol" || d == "yued-contract"), "{engine:?}");
}
