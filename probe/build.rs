//! Lists the built web app's files (the dist folder) for the binary to embed, so `ackscope` is
//! one file: `assets.rs` in OUT_DIR holds one `include_bytes!` per file, and src/main.rs (not
//! the library) includes it.
//!
//! The folder is `ACKSCOPE_WEB_DIST` if set (xtask sets it), else `dist/` at the workspace root.
//! Without a built app the binary still builds; it then serves a page that says how to build it.
//!
//! Why index.html is the one file watched: when this script runs again, cargo recompiles the
//! whole library after it. The list of files changes only with index.html (it names the app's
//! files, xtask's web build leaves unchanged files untouched and writes index.html again when a
//! file comes or goes), while a changed wasm or
//! stylesheet reaches the binary through `include_bytes!`, which cargo tracks itself: a rebuilt
//! web app then costs a relink of the binary, not a rebuild of the probe.

use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rerun-if-env-changed=ACKSCOPE_WEB_DIST");
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let dist = env::var_os("ACKSCOPE_WEB_DIST")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest_dir.join("../dist"));
    println!("cargo:rerun-if-changed={}", dist.join("index.html").display());

    let mut files = Vec::new();
    if dist.join("index.html").is_file() {
        collect(&dist, &dist, &mut files);
    }
    files.sort();
    let mut code = String::from("pub static ASSETS: &[Asset] = &[\n");
    for (name, path) in &files {
        writeln!(code, "    Asset {{ path: {name:?}, bytes: include_bytes!({path:?}) }},")
            .expect("writing to a String");
    }
    code.push_str("];\n");
    let out = PathBuf::from(env::var("OUT_DIR").expect("set by cargo")).join("assets.rs");
    fs::write(out, code).expect("write assets.rs into OUT_DIR");
}

fn collect(root: &Path, dir: &Path, files: &mut Vec<(String, String)>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        // Trunk builds into dist/.stage first: a build in progress is not part of the app.
        if entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        // The in-browser Linux (`cargo xtask build-vm`) is the static site's: a page the probe
        // serves has this machine's kernel to run on.
        if dir == root && entry.file_name() == "vm" {
            continue;
        }
        if path.is_dir() {
            collect(root, &path, files);
        } else if let Ok(relative) = path.strip_prefix(root) {
            let name = relative.to_string_lossy().replace('\\', "/");
            let absolute = fs::canonicalize(&path).unwrap_or(path.clone());
            files.push((name, absolute.to_string_lossy().into_owned()));
        }
    }
}
